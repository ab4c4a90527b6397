"""Amharic text for the MMS-TTS engine, read as the base was trained to read it.

Meta trained its Amharic MMS-TTS voice on uroman's romanisation (`is_uroman: true` in its tokenizer_config.json):
the script becomes Latin letters (ሰላም ነው -> "salaame nawe"), lower-cased, reduced to the letters of its
vocab.json, with a blank (id 0) between every two letters (add_blank). This module does the same as transformers'
VitsTokenizer (tests/test_mms_model.py checks ids for ids), with two differences that matter here:

- the studio's normaliser runs first, so numbers, dates, currency and abbreviations are read out (uroman itself
  would leave "1987" as digits, which the vocabulary lacks: silently dropped);
- uroman is loaded once per process (VitsTokenizer builds it anew for every sentence: ~5 s each).

The curator's pronunciation dictionary (IPA segments a word) can only partly reach this reading: a word it holds
is respelled in uroman's letters (`respell`), so a changed consonant or vowel is heard; but uroman writes neither
gemination nor the difference between ejective and plain t / ch (ጠ and ተ are both "t"), and it writes the sixth
order's vowel "e" whether it is spoken or not: those parts of an entry cannot reach an MMS voice (DICTIONARY_NOTE,
shown on the G2P tab).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from utils.events import StudioError

# IPA consonants of utils.text.g2p -> the letters uroman writes for them (its Amharic table, checked against uroman)
CONSONANTS = {"h": "h", "l": "l", "m": "m", "s": "s", "r": "r", "ʃ": "sh", "kʼ": "q", "b": "b", "t": "t", "t͡ʃ": "ch",
              "n": "n", "ɲ": "ny", "ʔ": "", "k": "k", "w": "w", "z": "z", "ʒ": "zh", "j": "y", "d": "d", "d͡ʒ": "j",
              "ɡ": "g", "tʼ": "t", "t͡ʃʼ": "ch", "pʼ": "ph", "t͡sʼ": "ts", "f": "f", "p": "p", "v": "v"}
VOWELS = {"ə": "a", "a": "aa", "ɨ": "e", "e": "ee", "i": "i", "u": "u", "o": "o"}
SIXTH_ORDER = "e"  # uroman's vowel for a consonant written without one (ስ -> "se"), spoken or silent
DICTIONARY_NOTE = (
    "MMS-TTS voices read uroman's romanisation of the normalised text (ሰላም -> salaame), as Meta trained the base. "
    "A dictionary word is respelled in those letters, so what it changes in consonants and vowels is heard "
    "(ə a e i u o, ʃ ɲ ʒ, kʼ -> q, pʼ -> ph, labialised kʷ -> kw). What it cannot change for them: gemination (tː "
    "is read as t: uroman never writes length), ejective against plain t and t͡ʃ (ጠ and ተ are both t), and the "
    "sixth order's vowel, written e whether spoken or not. Numbers, dates and abbreviations are read out by the "
    "normaliser before any of this, as for every voice.")


@lru_cache(maxsize=1)
def _uroman():
    """The romaniser, built once per process (loading its tables takes seconds)."""
    try:
        import uroman
    except ImportError as exc:
        raise StudioError("The MMS engine needs the uroman package to read Amharic as its base was trained: "
                          "pip install uroman (it is in requirements.txt).") from exc
    return uroman.Uroman()


def romanize(text: str) -> str:
    """uroman's Latin spelling of a text (left as it is when it is ASCII already, as VitsTokenizer does)."""
    return _uroman().romanize_string(text) if any(ord(c) > 127 for c in text) else text


def respell(segments: list[str]) -> str:
    """A dictionary word's IPA segments -> uroman's letters for them ("s ə lː a m" -> "salaame"): length dropped,
    labialisation written w, a consonant without a following vowel given uroman's sixth-order "e"."""
    letters, pending = [], False  # pending: a consonant waiting for its vowel
    for segment in segments:
        seg = segment.replace("ː", "")
        labial = "ʷ" in seg
        seg = seg.replace("ʷ", "")
        if seg in VOWELS:
            letters.append(VOWELS[seg])
            pending = False
            continue
        if pending:
            letters.append(SIXTH_ORDER)
        letters.append(CONSONANTS.get(seg, "".join(c for c in seg if c.isascii())) + ("w" if labial else ""))
        pending = True
    return "".join(letters) + (SIXTH_ORDER if pending else "")


@dataclass
class MmsText:
    """The base's vocabulary (letter -> id) and its tokenizer settings, saved in every checkpoint as "text"."""
    vocab: dict = field(default_factory=dict)
    add_blank: bool = True
    lowercase: bool = True  # tokenizer_config's "normalize"

    @classmethod
    def from_folder(cls, folder) -> "MmsText":
        """vocab.json and tokenizer_config.json of a base in the public layout."""
        from utils.workspace import read_json

        folder = Path(folder)
        vocab = read_json(folder / "vocab.json", None)
        settings = read_json(folder / "tokenizer_config.json", None) or {}
        if not isinstance(vocab, dict) or not vocab:
            raise StudioError(f"{folder} has no vocab.json (the base's letters and their ids).")
        if not settings.get("is_uroman", False):
            raise StudioError(f"{folder}: its tokenizer_config.json does not say is_uroman: true; the MMS engine "
                              "reads Amharic through uroman, as Meta's Amharic checkpoint does.")
        if settings.get("phonemize"):
            raise StudioError(f"{folder}: its tokenizer phonemizes English text (phonemize: true); that is not the "
                              "Amharic MMS-TTS checkpoint.")
        return cls({str(k): int(v) for k, v in vocab.items()}, bool(settings.get("add_blank", True)),
                   bool(settings.get("normalize", True)))

    def to_dict(self) -> dict:
        return {"vocab": dict(self.vocab), "add_blank": self.add_blank, "lowercase": self.lowercase}

    @classmethod
    def from_dict(cls, d: dict) -> "MmsText":
        return cls(dict(d["vocab"]), bool(d.get("add_blank", True)), bool(d.get("lowercase", True)))

    def latin(self, text: str, user_dict: dict | None = None) -> str:
        """Amharic text -> the studio's normalised reading -> uroman's letters, lower-cased; the dictionary's words
        respelled from their segments (looked up as the Matcha reader looks them up: a Latin word as written, else
        in any case, utils.text.normalize.dictionary_key)."""
        from utils.text import normalize
        from utils.text.normalize import dictionary_key

        normalized = normalize(text, user_dict or ()).text
        case = str.lower if self.lowercase else (lambda s: s)
        words = normalized.split(" ")
        if not user_dict or not any(dictionary_key(_bare(w), user_dict) for w in words):
            return romanize(case(normalized))
        return " ".join(_respelled(w, user_dict) if dictionary_key(_bare(w), user_dict) else romanize(case(w))
                        for w in words)

    def units(self, text: str, user_dict: dict | None = None) -> list[str]:
        """The letters of the romanisation, those the vocabulary lacks included (the Voice reports them skipped);
        punctuation only where the vocabulary has it (elsewhere it is no loss: pauses come from the sentences)."""
        return [c for c in self.latin(text, user_dict) if c in self.vocab or c.isalnum() or c.isspace()]

    def encode(self, text: str, user_dict: dict | None = None) -> list[int]:
        """Ids as VitsTokenizer makes them: letters outside the vocabulary dropped, the ends stripped, a blank (id 0)
        between every two and at both ends."""
        kept = "".join(c for c in self.latin(text, user_dict) if c in self.vocab).strip()
        ids = [self.vocab[c] for c in kept]
        if not self.add_blank or not ids:
            return ids
        spaced = [0] * (2 * len(ids) + 1)
        spaced[1::2] = ids
        return spaced


def _bare(word: str) -> str:
    return word.strip(".,?!;:")


def _respelled(word: str, user_dict: dict) -> str:
    from utils.text.normalize import dictionary_key

    bare = _bare(word)
    return word.replace(bare, respell(user_dict[dictionary_key(bare, user_dict)]), 1)


class MmsTokenizer:
    """The Voice's tokenizer calls (utils/inference/speech.py) on an MMS text table."""
    kind = "uroman"

    def __init__(self, text: MmsText):
        self.text = text
        self.symbols = list(text.vocab)

    def units(self, sentence: str, user_dict: dict | None = None) -> list[str]:
        return self.text.units(sentence, user_dict)

    def encode(self, sentence: str, user_dict: dict | None = None) -> list[int]:
        return self.text.encode(sentence, user_dict)

    @staticmethod
    def shown(units: list[str]) -> str:
        """What the Inference tab's table shows as spoken: the romanised text itself."""
        return "".join(units)
