"""Word lists the G2P consults before its rules: the shipped gemination lexicon and the user's
pronunciation dictionary (word -> IPA segments) that curators edit in the UI.

The user dictionary lives at `Workspace.pronunciations` (a TSV, word<TAB>space-separated IPA
segments), so training and inference read the same file.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from utils.events import StudioError
from utils.text.ethiopic import GEMINATION_MARKS
from utils.text.inventory import phoneme_inventory
from utils.text.normalize import fold
from utils.workspace import Workspace, atomic_write_text

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "text"


@lru_cache(maxsize=None)
def gemination_lexicon() -> dict[str, frozenset[int]]:
    """word -> indices of its letters whose consonant is doubled (an empty set: none is)."""
    lexicon = {}
    for line in (ASSETS / "gemination.tsv").read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        letters, doubled = [], set()
        for ch in fold(line):
            if ch in GEMINATION_MARKS:
                doubled.add(len(letters) - 1)
            else:
                letters.append(ch)
        lexicon["".join(letters)] = frozenset(doubled)
    return lexicon


def parse_user_dict(text: str) -> tuple[dict[str, list[str]], list[str]]:
    """TSV text -> ({word: segments}, problems). Blank lines and # comments are skipped."""
    mapping, problems = {}, []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        word, sep, ipa = line.partition("\t")
        word, segments = fold(word.strip()), ipa.split()
        if not sep or not word or not segments:
            problems.append(f"line {number}: expected 'word<TAB>IPA segments separated by spaces', got {line!r}")
            continue
        mapping[word] = segments
    return mapping, problems


def format_user_dict(mapping: dict[str, list[str] | str]) -> str:
    lines = []
    for word, ipa in sorted(mapping.items()):
        segments = ipa.split() if isinstance(ipa, str) else list(ipa)
        if word.strip() and segments:
            lines.append(f"{word.strip()}\t{' '.join(segments)}")
    return "".join(line + "\n" for line in lines)


def load_user_dict(ws: Workspace) -> dict[str, list[str]]:
    """The workspace's pronunciation dictionary; {} when there is none yet."""
    return read_user_dict(ws.pronunciations)


def read_user_dict(path: Path) -> dict[str, list[str]]:
    """A pronunciation dictionary file (the workspace's, or the copy an exported voice carries); {} when absent."""
    path = Path(path)
    if not path.exists():
        return {}
    mapping, problems = parse_user_dict(path.read_text(encoding="utf-8"))
    if problems:
        raise StudioError(f"{path}: " + "; ".join(problems[:5]) + " Fix or delete those lines.")
    return mapping


def dictionary_stamp(mapping: dict) -> str:
    """What a dictionary reads, as a short digest ("" for none): a dataset's transcripts read with another one are
    read again before a run trains on them."""
    import hashlib

    text = format_user_dict(mapping)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16] if text else ""


def save_user_dict(ws: Workspace, mapping: dict[str, list[str] | str]) -> Path:
    """Write the dictionary atomically (values: segment lists or space-separated strings)."""
    atomic_write_text(Path(ws.pronunciations), format_user_dict(mapping))
    return Path(ws.pronunciations)


# What people type for the model's symbols, in the order it is rewritten: ASCII lookalikes (g, colon,
# apostrophes), affricates written as one letter, with the lower tie or with no tie at all, and the
# labialization mark before the length mark.
TYPED = (("g", "ɡ"), (":", "ː"), ("ˑ", "ː"), ("'", "ʼ"), ("’", "ʼ"), ("ʾ", "ʼ"), ("ʧ", "t͡ʃ"), ("ʤ", "d͡ʒ"),
         ("ʦ", "t͡s"), ("\u035c", "\u0361"), ("tʃ", "t͡ʃ"), ("dʒ", "d͡ʒ"), ("tsʼ", "t͡sʼ"), ("ʷː", "ːʷ"))


def word_symbols() -> list[str]:
    """The symbols a dictionary word can use: the phoneme tokenizer's, less word boundaries and pauses."""
    return [s for s in phoneme_inventory() if s not in " ,.?!"]


def model_segments(ipa: str) -> tuple[list[str], list[str]]:
    """What a person typed -> (the model's segments, the parts it cannot use). Each space-separated part is
    rewritten as TYPED says; a doubled consonant ("tt") becomes a long one ("tː"); a part typed without
    spaces ("səlam") is split into the longest symbols that match."""
    import unicodedata

    known = word_symbols()
    longest_first = sorted(known, key=len, reverse=True)
    segments, unusable = [], []
    for part in unicodedata.normalize("NFC", ipa).split():
        for typed, symbol in TYPED:
            part = part.replace(typed, symbol)
        half = part[: len(part) // 2]
        if half * 2 == part and half + "ː" in known:
            part = half + "ː"
        while part:
            symbol = next((s for s in longest_first if part.startswith(s)), None)
            if symbol is None:
                unusable.append(part)
                break
            segments.append(symbol)
            part = part[len(symbol):]
    return segments, unusable


def usable_symbols_hint() -> str:
    """The symbols a dictionary entry can use, as a person reads them."""
    vowels = [s for s in word_symbols() if s in "əuiaeɨo"]
    consonants = [s for s in word_symbols() if s not in vowels and not s.endswith(("ː", "ʷ"))]
    return (f"vowels {' '.join(vowels)}; consonants {' '.join(consonants)}; add ː for a doubled consonant "
            "(tː) and ʷ for a rounded one (kʷ)")


def dict_from_rows(rows) -> tuple[dict[str, list[str]], list[str]]:
    """Table rows [word, IPA] (the UI's editor) -> ({word: segments}, problems). Blank rows are skipped.
    The IPA is turned into the model's own symbols (model_segments): a symbol the model lacks would be
    dropped without a word at training and inference, so a row with one is refused, naming it."""
    mapping, problems = {}, []
    for number, row in enumerate(rows or [], 1):
        word, ipa = (list(row) + ["", ""])[:2]
        word, ipa = str(word or "").strip(), str(ipa or "").strip()
        if not word and not ipa:
            continue
        if not word or not ipa or len(word.split()) != 1:
            problems.append(f"row {number}: give one word and its IPA segments separated by spaces (got {word!r}, {ipa!r})")
            continue
        segments, unusable = model_segments(ipa)
        if unusable:
            problems.append(f"row {number} ({word}): the model has no symbol for {', '.join(map(repr, unusable))}")
            continue
        mapping[fold(word)] = segments
    return mapping, problems
