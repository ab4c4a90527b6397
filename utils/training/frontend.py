"""Rows -> symbol ids for the acoustic model: utils.text's tokenizer (phonemes by default). The symbol table is
saved in every checkpoint and grown, never reordered, when fine-tuning meets new symbols."""
from __future__ import annotations


class Frontend:
    """Rows -> ids through utils.text's Tokenizer (phoneme | char | bpe). The table goes into every
    checkpoint's config.json as "frontend" and only ever grows (existing ids never move)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    @property
    def kind(self) -> str:
        return self.tokenizer.kind

    @property
    def symbols(self) -> list[str]:
        return self.tokenizer.symbols

    @classmethod
    def create(cls, kind: str, rows: list[dict], saved: dict | None = None) -> "Frontend":
        """The saved frontend (fine-tuning / resume) or a new one of `kind`, grown for `rows`."""
        from utils.text.tokenizers import Tokenizer, make_tokenizer

        if saved:
            tok = Tokenizer.from_dict(saved.get("tokenizer", saved))
        else:
            kind = "phoneme" if kind == "auto" else kind
            texts = [r.get("normalized") or r.get("text") or "" for r in rows]
            tok = make_tokenizer(kind, texts=texts if kind != "phoneme" else None)
        front = cls(tok)
        front.grow_for(rows)
        return front

    def units(self, row: dict) -> list[str]:
        """The manifest's reviewed phonemes when present ('|' = word boundary), else the tokenizer's own units."""
        if self.kind == "phoneme" and row.get("phonemes"):
            from utils.text.inventory import WORD_BOUNDARY

            return [WORD_BOUNDARY if s == "|" else s for s in row["phonemes"].split()]
        return self.tokenizer.units(row.get("normalized") or row.get("text") or "")

    def grow_for(self, rows: list[dict]) -> list[str]:
        """Append the symbols `rows` use that the table lacks; returns them."""
        if self.kind == "bpe":
            return []
        return self.tokenizer.grow([u for r in rows for u in self.units(r)])

    def encode_row(self, row: dict) -> list[int]:
        return self.tokenizer.encode_units(self.units(row))

    def to_dict(self) -> dict:
        return {"kind": self.kind, "symbols": list(self.symbols), "tokenizer": self.tokenizer.to_dict()}
