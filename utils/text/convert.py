"""Text-frontend services the UI and CLI share: explain one text, convert a dataset's transcripts."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from utils.events import Event
from utils.text.g2p import phonemes_string, phonemize
from utils.text.lexicon import dictionary_stamp, load_user_dict
from utils.text.normalize import normalize, without_covered
from utils.text.tokenizers import Tokenizer, make_tokenizer
from utils.workspace import Workspace, atomic_write_json, read_json

PROGRESS_EVERY = 50  # rows between progress events
# in a dataset's folder: {"dictionary": dictionary_stamp of the pronunciation dictionary every row was read with}.
# Absent: not known (rows read before it was kept, or a preparation that reused clips checked under another one).
READ_WITH = "read_with.json"


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
    record_read_with(ws.dataset_dir(name), dictionary_stamp(user_dict))
    summary = {"rows": len(rows), "changed": len(changed), "empty": empty, "warnings": warnings,
               "missing": dict(missing)}
    level = "warning" if warnings else "info"
    yield Event("g2p", len(rows), len(rows), f"{name}: {len(changed)} of {len(rows)} rows updated, "
                f"{len(warnings)} warning(s)", level=level, result=summary)


def record_read_with(ds_dir, stamp: str | None) -> None:
    """Say which dictionary all of a dataset's rows were read with (None: not one, or not known)."""
    path = Path(ds_dir) / READ_WITH
    if stamp is None:
        path.unlink(missing_ok=True)
    else:
        atomic_write_json(path, {"dictionary": stamp})


def read_again_if_stale(ws: Workspace, name: str) -> str | None:
    """Read the dataset's transcripts again when the pronunciation dictionary changed since they were read, so that
    a run trains on what the voice will say (a curator who forgot "Convert transcripts" is not punished). Returns
    what was done, None when they were current. Not known (no record) counts as current only without a
    dictionary: the rows were then read without one, as now."""
    user_dict = load_user_dict(ws)
    now = dictionary_stamp(user_dict)
    recorded = (read_json(ws.dataset_dir(name) / READ_WITH, default=None) or {}).get("dictionary")
    if recorded == now or (recorded is None and not now):
        return None
    result = {}
    for event in convert_dataset(ws, name, user_dict):
        result = event.result or result
    return (f"the pronunciation dictionary changed since {name}'s transcripts were read: read them again with it "
            f"({result.get('changed', 0)} of {result.get('rows', 0)} row(s) changed)")
