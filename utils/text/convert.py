"""Text-frontend services the UI and CLI share: explain one text, convert a dataset's transcripts."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator

from utils.events import Event
from utils.text.g2p import phonemes_string, phonemize
from utils.text.lexicon import load_user_dict
from utils.text.normalize import ASK_ENTRY, LATIN_WORDS, normalize
from utils.text.tokenizers import Tokenizer, make_tokenizer
from utils.workspace import Workspace

PROGRESS_EVERY = 50  # rows between progress events


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


def without_covered(warnings: list[str], user_dict: dict | None) -> list[str]:
    """The normalizer's warnings less the words the pronunciation dictionary reads: a word given an entry is read
    exactly as written there, and a warning still asking for its entry would no longer be true."""
    out = []
    for warning in warnings:
        if user_dict and warning.startswith(LATIN_WORDS) and warning.endswith(ASK_ENTRY):
            words = [w for w in warning[len(LATIN_WORDS):-len(ASK_ENTRY)].split(", ") if w not in user_dict]
            if not words:
                continue
            warning = LATIN_WORDS + ", ".join(words) + ASK_ENTRY
        out.append(warning)
    return out


def convert_dataset(ws: Workspace, name: str, user_dict: dict | None = None) -> Iterator[Event]:
    """Fill `normalized` and `phonemes` of every row of the dataset (only the rows that change are written).
    Yields progress events; the last carries {"rows", "changed", "empty", "warnings", "missing"}."""
    from utils.datasets.manifest import load_manifest, update_rows

    rows = load_manifest(ws, name)
    if user_dict is None:
        user_dict = load_user_dict(ws)
    tokenizer = make_tokenizer("phoneme")
    changed, empty, warnings, missing = [], 0, [], Counter()
    for i, row in enumerate(rows, 1):
        text = row.get("text") or ""
        norm = normalize(text, user_dict)
        segments = phonemize(text, user_dict)
        new = {"normalized": norm.text, "phonemes": phonemes_string(segments) if segments else None}
        if not segments:
            empty += 1
            warnings.append(f"row {row.get('id', i)}: the transcript has nothing to pronounce")
        warnings += [f"row {row.get('id', i)}: {w}" for w in without_covered(norm.warnings, user_dict)]
        missing.update(s for s in segments if s not in tokenizer.symbols)
        if any(row.get(k) != v for k, v in new.items()):
            row.update(new)
            changed.append(row)
        if i % PROGRESS_EVERY == 0 or i == len(rows):
            yield Event("g2p", i, len(rows), f"{name}: {i} of {len(rows)} transcripts")
    update_rows(ws, name, changed)
    summary = {"rows": len(rows), "changed": len(changed), "empty": empty, "warnings": warnings,
               "missing": dict(missing)}
    level = "warning" if warnings else "info"
    yield Event("g2p", len(rows), len(rows), f"{name}: {len(changed)} of {len(rows)} rows updated, "
                f"{len(warnings)} warning(s)", level=level, result=summary)
