"""Explain one text as the voice reads it (the G2P tab and the CLI); a dataset's transcripts are read again by
utils.datasets.curate.convert_dataset."""
from __future__ import annotations

from dataclasses import dataclass, field

import re

from utils.text.ethiopic import is_ethiopic
from utils.text.g2p import phonemes_string, phonemize
from utils.text.normalize import ACRONYM, dictionary_key, normalize, without_covered
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


# what `speakable` looks for, in the words every refusal of a text says it (the Inference and G2P tabs, the CLI)
SPEAKABLE_WORDS = ("Amharic letters, numbers (other than beside Latin words, as in 5 km), capital-letter "
                   "abbreviations (BBC) or words of the pronunciation dictionary")


def speakable(text: str, user_dict: dict) -> bool:
    """Has the text something the frontend reads: an Ethiopic letter, numbers the normalizer reads out in Amharic
    words (12345, as the G2P tab shows; not among Latin words), an all-capital abbreviation it spells (BBC), or a
    word the pronunciation dictionary reads ("Hello" with an entry)?"""
    return (any(is_ethiopic(ch) for ch in text) or re.search(r"\d", text) and not re.search(r"[A-Za-z]", text)
            or ACRONYM.search(text) is not None
            or any(dictionary_key(word, user_dict) for word in re.findall(r"[A-Za-z]+", text)))
