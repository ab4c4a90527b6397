"""Character error rate: edit distance over characters after the studio's own text normalisation.

Both sides go through `utils.text.normalize` (numbers read out, homophone letters folded, punctuation
made pauses), then punctuation is dropped, Latin letters lower-cased and spaces collapsed, so a recogniser
that writes ፲ as "አስር" or "10", ሀ for ሐ, no ። at all, or a word space ፡ where the transcript has a space, is
not counted wrong for it: what is counted is what was said (omniASR, for one, writes no punctuation).
"""
from __future__ import annotations

import unicodedata
from typing import Sequence


def _plain(text: str) -> str:
    from utils.text import normalize

    spoken = normalize(unicodedata.normalize("NFC", text or "")).text.casefold()
    kept = "".join(c if not unicodedata.category(c).startswith("P") else " " for c in spoken)
    return " ".join(kept.split())


def edit_distance(a: Sequence, b: Sequence) -> int:
    """Levenshtein distance (insertions, deletions, substitutions all cost 1); one row of the table at a time."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def cer(reference: str, hypothesis: str) -> float:
    """Edits / reference characters (can exceed 1 when the hypothesis is much longer); 0 for two empty texts."""
    ref, hyp = _plain(reference), _plain(hypothesis)
    if not ref:
        return 0.0 if not hyp else 1.0
    return edit_distance(ref, hyp) / len(ref)
