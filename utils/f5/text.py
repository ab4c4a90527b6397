"""Amharic text for the F5-TTS engine: the symbols fed to the model, and the rows they add to the pretrained
base's character table.

The public F5-TTS v1 Base reads characters of Chinese pinyin and English (its vocab.txt: one symbol a line,
index = line number, id 0 of the embedding is the filler). It has no Ethiopic symbol. Two choices:

- "phoneme" (the default): the studio's phonemes (utils.text.g2p), gemination included ("sː"), a space between
  words, pause punctuation kept. Amharic script does not write gemination, and doubling changes meaning (ዋና
  wana "swimming" / wanna "main"); the phonemes also carry the epenthetic ɨ the script leaves implicit. Most
  segments are Latin letters the base already knows from English, so they reuse its rows as they are.
- "char": the normalised Ethiopic characters (one syllable = one symbol), as community fine-tunes of other
  scripts do; simpler to read, but gemination is left for the model to guess.

A new symbol's row starts at the mean of the base rows of its nearest Latin spelling (ʃ -> "sh", ə -> "e",
ሸ -> "she"), not at random: the base then already speaks something close to it, and fine-tuning moves it
from there. The table (base symbols + added ones) is saved with every checkpoint and voice.
"""
from __future__ import annotations

from dataclasses import dataclass, field

KINDS = ("phoneme", "char")
# IPA (and the studio's marks) -> the Latin letters of the nearest English/pinyin spelling
LATIN = {"ə": "e", "ɨ": "i", "ʃ": "sh", "ʒ": "zh", "ɲ": "ny", "ŋ": "ng", "ʔ": "", "ʼ": "", "\u0361": "", "ʷ": "w",
         "ɡ": "g", "j": "y", "ː": ":"}


def latin_spelling(symbol: str) -> str:
    """ʃː -> "shsh", t͡ʃʼ -> "tsh", ሸ -> "she" (through the syllable's IPA): the base rows a new row starts from."""
    from utils.text.ethiopic import is_ethiopic, syllable

    if len(symbol) == 1 and is_ethiopic(symbol):
        s = syllable(symbol)
        symbol = (s.consonant + (s.vowel or "ɨ")) if s else ""
    pieces: list[str] = []
    for ch in symbol:
        spelled = LATIN.get(ch, ch)
        pieces.append(pieces[-1] if spelled == ":" and pieces else "" if spelled == ":" else spelled)  # ː doubles
    return "".join(pieces)


@dataclass
class F5Text:
    """The symbol table (index = vocab line) and how rows become symbols."""
    kind: str = "phoneme"
    symbols: list[str] = field(default_factory=lambda: [" "])
    base_size: int = 1  # symbols that came with the pretrained base (the rest were added for Amharic)

    @classmethod
    def from_vocab_file(cls, path, kind: str) -> "F5Text":
        symbols = [line.rstrip("\n") for line in open(path, encoding="utf-8")]
        symbols = [s if s else " " for s in symbols]
        return cls(kind=kind, symbols=symbols, base_size=len(symbols))

    def to_dict(self) -> dict:
        return {"kind": self.kind, "symbols": list(self.symbols), "base_size": self.base_size}

    @classmethod
    def from_dict(cls, d: dict) -> "F5Text":
        return cls(kind=d["kind"], symbols=list(d["symbols"]), base_size=int(d.get("base_size", len(d["symbols"]))))

    def units(self, row: dict | str, user_dict: dict | None = None) -> list[str]:
        """A manifest row (its reviewed phonemes when present) or a text -> the model's symbols; `user_dict` (the
        workspace's pronunciations, word -> segments) overrides the rules for the words it holds, as for Matcha."""
        from utils.text import normalize
        from utils.text.g2p import phonemize

        if isinstance(row, dict) and self.kind == "phoneme" and row.get("phonemes"):
            return [" " if s == "|" else s for s in row["phonemes"].split()]
        text = row if isinstance(row, str) else (row.get("normalized") or row.get("text") or "")
        if self.kind == "phoneme":
            return phonemize(text, user_dict)
        return list(normalize(text).text)

    def grow(self, rows: list) -> dict[int, list[int]]:
        """Add the symbols `rows` use that the table lacks; returns {new index: base indices to average}."""
        index = {s: i for i, s in enumerate(self.symbols)}
        added: dict[int, list[int]] = {}
        for row in rows:
            for unit in self.units(row):
                if unit in index:
                    continue
                index[unit] = len(self.symbols)
                self.symbols.append(unit)
                base = [index[c] for c in latin_spelling(unit) if c in index and index[c] < self.base_size]
                added[index[unit]] = base
        return added

    def encode_row(self, row: dict | str) -> list[int]:
        return self.encode(row)

    def encode(self, row: dict | str) -> list[int]:
        """Symbol ids; a symbol the table lacks (text typed at inference that training never saw) is the space."""
        index = {s: i for i, s in enumerate(self.symbols)}
        space = index.get(" ", 0)
        return [index.get(u, space) for u in self.units(row)]
