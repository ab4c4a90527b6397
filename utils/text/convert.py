"""Explain one text as the voice reads it (the G2P tab and the CLI); a dataset's transcripts are read again by
utils.datasets.curate.convert_dataset."""
from __future__ import annotations

from dataclasses import dataclass, field

from utils.text.g2p import phonemes_string, phonemize
from utils.text.normalize import normalize, without_covered
from utils.text.tokenizers import Tokenizer, make_tokenizer


@dataclass
class Analysis:
    normalized: str
    warnings: list[str]
    ipa: str                       # manifest form: segments, | between words
    symbols: list[str]             # what the model sees (phoneme tokenizer)
    ids: list[int]
    missing: list[str] = field(default_factory=list)


def analyze(text: str, user_dict: dict | None = None, tokenizer: Tokenizer | None = None) -> Analysis:
    tokenizer = tokenizer or make_tokenizer("phoneme")
    norm = normalize(text, user_dict or ())
    segments = phonemize(text, user_dict)
    ids = tokenizer.encode_units(segments)
    missing = sorted({s for s in segments if s not in tokenizer.symbols})
    return Analysis(norm.text, without_covered(norm.warnings, user_dict), phonemes_string(segments),
                    tokenizer.decode(ids), ids, missing)
