"""The Ethiopic script as data: every syllable letter -> (consonant, vowel).

Built once from the Unicode character names ("ETHIOPIC SYLLABLE QWAA" -> kʼʷ + a), so every
syllable of the Ethiopic blocks (U+1200-137F, U+1380-139F, U+2D80-2DDF, U+AB00-AB2F and
U+1E7E0-1E7FF) gets a reading without a hand-typed table of 500 letters. Homophone letters that
Amharic pronounces alike (ሐ/ኀ/ሀ, ሠ/ሰ, ዐ/አ, ፀ/ጸ) get the same consonant here; the normalizer also
rewrites them so the text a curator reads is unified.
"""
from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from functools import lru_cache

BLOCKS = ((0x1200, 0x137F), (0x1380, 0x139F), (0x2D80, 0x2DDF), (0xAB00, 0xAB2F), (0x1E7E0, 0x1E7FF))

GEMINATION_MARKS = {"\u135d", "\u135f"}  # a following consonant-doubling mark
VOWEL_LENGTH_MARK = "\u135e"             # length on the vowel: no phonemic effect in Amharic, dropped

# Consonant part of the Unicode name -> Amharic IPA. The pharyngeals and velar fricatives that
# Amharic no longer distinguishes fold into h and ʔ; Gurage/Tigrinya-only letters get their nearest
# Amharic sound.
CONSONANTS = {
    "H": "h", "HH": "h", "X": "h", "KX": "h", "QH": "kʼ", "L": "l", "M": "m", "SZ": "s", "S": "s",
    "R": "r", "SH": "ʃ", "Q": "kʼ", "B": "b", "BB": "b", "V": "v", "T": "t", "C": "t͡ʃ", "CC": "t͡ʃ",
    "N": "n", "NY": "ɲ", "K": "k", "W": "w", "Z": "z", "ZZ": "ʒ", "ZH": "ʒ", "Y": "j", "D": "d",
    "DD": "d", "DDH": "d", "DZ": "d͡ʒ", "J": "d͡ʒ", "G": "ɡ", "GG": "ŋ", "TH": "tʼ", "TTH": "tʼ",
    "CH": "t͡ʃʼ", "CCH": "t͡ʃʼ", "CCHH": "t͡ʃʼ", "PH": "pʼ", "TS": "t͡sʼ", "TZ": "t͡sʼ", "F": "f",
    "P": "p", "SS": "s", "GLOTTAL": "ʔ", "PHARYNGEAL": "ʔ",
}
# Vowel suffix of the name -> (labialized, vowel). None is the 6th order: a bare consonant whose
# epenthetic ɨ is decided later from the syllable structure.
VOWELS = {
    "A": (False, "ə"), "U": (False, "u"), "I": (False, "i"), "AA": (False, "a"), "EE": (False, "e"),
    "E": (False, None), "O": (False, "o"), "OA": (True, "a"), "WA": (True, "a"), "WAA": (True, "a"),
    "WI": (True, "i"), "WEE": (True, "e"), "WE": (True, None),
}
LARYNGEALS = {"h", "ʔ"}


@dataclass(frozen=True)
class Syllable:
    consonant: str          # IPA, labialization included ("kʼʷ")
    vowel: str | None       # None: 6th order
    palatal: bool = False   # RYA, MYA, FYA and the Gurage KYA..: consonant + j


def is_ethiopic(ch: str) -> bool:
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in BLOCKS)


def _parse(name: str, ch: str) -> Syllable | None:
    words = name.split()
    if words[:2] != ["ETHIOPIC", "SYLLABLE"]:
        return None
    last = words[-1]
    if len(words) > 3 and words[2] in ("GLOTTAL", "PHARYNGEAL"):
        labial, vowel = VOWELS[last]
        return Syllable(CONSONANTS[words[2]] + ("ʷ" if labial else ""), vowel)
    for suffix in ("WAA", "WEE", "WA", "WE", "WI", "OA", "AA", "EE", "A", "E", "I", "O", "U"):
        cons = last[: -len(suffix)]
        if last.endswith(suffix) and cons:
            break
    else:
        return None
    labial, vowel = VOWELS[suffix]
    if suffix == "WA":  # in the labiovelar rows (QWA, QWAA, ...) WA is the 1st order; elsewhere it is ʷa
        try:
            unicodedata.lookup(name + "A")
            vowel = "ə"
        except KeyError:
            pass
    palatal = False
    if cons not in CONSONANTS and cons.endswith("Y") and cons[:-1] in CONSONANTS:
        cons, palatal = cons[:-1], True
    if cons not in CONSONANTS:
        return None
    return Syllable(CONSONANTS[cons] + ("ʷ" if labial else ""), vowel, palatal)


@lru_cache(maxsize=None)
def syllable(ch: str) -> Syllable | None:
    """The reading of one Ethiopic syllable letter, or None for anything else."""
    if len(ch) != 1 or not is_ethiopic(ch):
        return None
    if ch == "ኧ":  # named GLOTTAL WA, but Amharic writes ʔə (the ə that does not become a) with it
        return Syllable("ʔ", "ə")
    return _parse(unicodedata.name(ch, ""), ch)


def all_syllables() -> dict[str, Syllable]:
    out = {}
    for lo, hi in BLOCKS:
        for cp in range(lo, hi + 1):
            s = syllable(chr(cp))
            if s is not None:
                out[chr(cp)] = s
    return out


def with_order(ch: str, order: int) -> str:
    """The letter of the same consonant in another order (1..7) of the main rows: ት -> ተ (order 1)."""
    cp = ord(ch)
    if 0x1200 <= cp <= 0x135A and syllable(ch) is not None:
        target = chr(cp - (cp - 0x1200) % 8 + order - 1)
        if syllable(target) is not None and syllable(target).consonant == syllable(ch).consonant:
            return target
    return ch


# Letters Amharic pronounces alike, folded order by order into the common spelling.
def _fold_rows() -> dict[str, str]:
    rows = {0x1210: 0x1200, 0x1280: 0x1200, 0x1220: 0x1230, 0x12D0: 0x12A0, 0x1340: 0x1338}
    table = {}
    for src, dst in rows.items():
        for order in range(7):  # the 7 vowel orders; the rows' 8th letters differ in value
            a, b = chr(src + order), chr(dst + order)
            if unicodedata.name(a, "") and unicodedata.name(b, ""):
                table[a] = b
    table.update({"ኋ": "ሗ", "ሧ": "ሷ", "ፇ": "ጿ"})  # the labialized homophones: hʷa, sʷa, t͡sʼʷa
    table["ዓ"] = "አ"  # ዓመት and አመት are both written; አ is read ʔa already
    return {a: b for a, b in table.items() if a != b}


HOMOPHONES = _fold_rows()
