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
from utils.text.normalize import fold, normalize, tokens
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
    rewritten as TYPED says and split into the longest symbols that match ("səlam"); within a part, a doubled
    consonant ("bunna", "tt") becomes the long one the model has ("nː", "tː"): typed that way it is one sound.
    Parts typed apart ("n n") are kept as typed."""
    import unicodedata

    known = word_symbols()
    longest_first = sorted(known, key=len, reverse=True)
    segments, unusable = [], []
    for part in unicodedata.normalize("NFC", ipa).split():
        for typed, symbol in TYPED:
            part = part.replace(typed, symbol)
        split = []
        while part:
            symbol = next((s for s in longest_first if part.startswith(s)), None)
            if symbol is None:
                unusable.append(part)
                break
            long = symbol[:-1] + "ːʷ" if symbol.endswith("ʷ") else symbol + "ː"
            if split and split[-1] == symbol and long in known:
                split[-1] = long
            else:
                split.append(symbol)
            part = part[len(symbol):]
        segments += split
    return segments, unusable


def usable_symbols_hint() -> str:
    """The symbols a dictionary entry can use, as a person reads them."""
    vowels = [s for s in word_symbols() if s in "əuiaeɨo"]
    consonants = [s for s in word_symbols() if s not in vowels and not s.endswith(("ː", "ʷ"))]
    return (f"vowels {' '.join(vowels)}; consonants {' '.join(consonants)}; add ː for a doubled consonant "
            "(tː) and ʷ for a rounded one (kʷ)")


def entry_word(word: str) -> tuple[str, str]:
    """A word as typed -> (its dictionary key, "" or why an entry under it would never be read). Entries are looked
    up (g2p.word_to_ipa) by the folded words normalize() leaves: punctuation dropped, numbers and abbreviations
    read out; an entry for a word it changes would be saved and never used."""
    key = fold(word.strip())
    said = [t for t in tokens(normalize(word, {key}).text) if t not in ".,?!"]
    if said == [key]:
        return key, ""
    if not said:
        return key, f"{word} has nothing the reader says (no letters)"
    if len(said) > 1:
        return key, f"{word} is read as {len(said)} words ({' '.join(said)}): add each word on its own"
    rest = iter(key)
    if all(ch in rest for ch in said[0]):  # only characters were dropped (ሰላም! -> ሰላም)
        dropped = " ".join(dict.fromkeys(ch for ch in key if ch not in said[0]))
        return key, f"{word} has characters the reader drops ({dropped}): add {said[0]}"
    return key, f"{word} is read as {said[0]}: add {said[0]}"


def entry(word, ipa) -> tuple[str, list[str], str]:
    """One entry as typed -> (its key, the model's segments, "" or why it is refused): a word the reader does not
    keep as one word (entry_word), or a symbol the model lacks, which training and inference would drop unsaid."""
    word, ipa = str(word or "").strip(), str(ipa or "").strip()
    if len(word.split()) > 1:
        return fold(word), [], (f"one word at a time: {word!r} is {len(word.split())} words (an entry is a word without "
                                "spaces; give each word its own)")
    if not word or not ipa:
        return fold(word), [], f"give one word and its IPA segments, e.g. ሰላም → s ə l a m (got {word!r}, {ipa!r})"
    key, refusal = entry_word(word)
    if refusal:
        return key, [], refusal
    segments, unusable = model_segments(ipa)
    if unusable:
        return key, segments, f"the model has no symbol for {', '.join(map(repr, unusable))}"
    return key, segments, ""


def dict_from_rows(rows) -> tuple[dict[str, list[str]], list[str]]:
    """Table rows [word, IPA] (the UI's editor) -> ({word: segments}, problems naming each refused row, see
    entry()). Blank rows are skipped."""
    mapping, problems = {}, []
    for number, row in enumerate(rows or [], 1):
        word, ipa = (str(v or "").strip() for v in (list(row) + ["", ""])[:2])
        if not word and not ipa:
            continue
        key, segments, problem = entry(word, ipa)
        if problem:
            problems.append(f"row {number}" + (f" ({word})" if word else "") + f": {problem}")
            continue
        mapping[key] = segments
    return mapping, problems
