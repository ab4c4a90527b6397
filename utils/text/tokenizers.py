"""Text -> symbol ids for the acoustic model: phonemes (default), characters, or SentencePiece BPE.

Every tokenizer has `.symbols` (index 0 is padding), `.encode(text)`, `.to_dict()` /
`Tokenizer.from_dict()` (a checkpoint's config holds the whole table, BPE model included) and
`.grow(new_symbols)` for fine-tuning on data with new symbols (existing ids never move).
Unknown symbols never crash: they are skipped and reported by `coverage`.
"""
from __future__ import annotations

import base64
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from utils.events import StudioError
from utils.text.ethiopic import all_syllables
from utils.text.g2p import phonemize
from utils.text.inventory import PAUSE_TOKENS, phoneme_inventory
from utils.text.normalize import normalize

PAD = "<pad>"
KINDS = ("phoneme", "char", "bpe")
@dataclass
class Tokenizer:
    kind: str
    symbols: list[str]
    model: bytes | None = field(default=None, repr=False)    # SentencePiece model (BPE only)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise StudioError(f"Unknown tokenizer kind {self.kind!r}: use one of {', '.join(KINDS)}.")
        if not self.symbols or self.symbols[0] != PAD:
            self.symbols = [PAD] + [s for s in self.symbols if s != PAD]
        self._ids = {s: i for i, s in enumerate(self.symbols)}
        self._sp = None

    # ------------------------------------------------------------------ text -> units -> ids
    def units(self, text: str, user_dict: dict | None = None) -> list[str]:
        """The symbols `text` becomes before lookup (unknown ones included)."""
        if self.kind == "phoneme":
            return phonemize(text, user_dict)
        normalized = normalize(text).text
        if self.kind == "char":
            return list(normalized)
        return self._processor().encode(normalized, out_type=str)

    def encode(self, text: str, user_dict: dict | None = None) -> list[int]:
        """Text -> ids; symbols missing from the vocabulary are skipped (see `coverage`)."""
        return [self._ids[u] for u in self.units(text, user_dict) if u in self._ids]

    def encode_units(self, units: list[str]) -> list[int]:
        """Already phonemized units (a manifest's `phonemes`) -> ids, unknown ones skipped."""
        return [self._ids[u] for u in units if u in self._ids]

    def decode(self, ids: list[int]) -> list[str]:
        return [self.symbols[i] for i in ids if 0 < i < len(self.symbols)]

    def grow(self, new_symbols) -> list[str]:
        """Append symbols not yet known (existing ids unchanged); returns those added."""
        added = [s for s in dict.fromkeys(new_symbols) if s not in self._ids]
        for s in added:
            self._ids[s] = len(self.symbols)
            self.symbols.append(s)
        return added

    def __len__(self) -> int:
        return len(self.symbols)

    # ---------------------------------------------------------------------- serialization
    def to_dict(self) -> dict:
        d = {"kind": self.kind, "symbols": list(self.symbols)}
        if self.model is not None:
            d["sentencepiece_model"] = base64.b64encode(self.model).decode("ascii")
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Tokenizer":
        model = d.get("sentencepiece_model")
        return cls(d["kind"], list(d["symbols"]), base64.b64decode(model) if model else None)

    def _processor(self):
        if self._sp is None:
            import sentencepiece as spm

            if self.model is None:
                raise StudioError("This BPE tokenizer has no SentencePiece model; train it with make_tokenizer('bpe', texts).")
            self._sp = spm.SentencePieceProcessor(model_proto=self.model)
        return self._sp


def _char_symbols(texts) -> list[str]:
    base = [" ", *PAUSE_TOKENS, *sorted(all_syllables())]
    seen = Counter(ch for t in texts or [] for ch in normalize(t).text)
    return base + sorted(ch for ch in seen if ch not in set(base))


def _train_bpe(texts, workdir, vocab_size: int) -> tuple[list[str], bytes]:
    import sentencepiece as spm

    lines = [normalize(t).text for t in texts or []]
    lines = [l for l in lines if l.strip()]
    if not lines:
        raise StudioError("A BPE tokenizer is trained on the dataset's transcripts: give at least one non-empty text.")
    chars = len(set("".join(lines)))
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        corpus = Path(tmp) / "corpus.txt"
        corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
        prefix = str(Path(tmp) / "bpe")
        size = vocab_size
        while True:  # small datasets cannot fill a large vocabulary: shrink until SentencePiece agrees
            try:
                spm.SentencePieceTrainer.train(
                    input=str(corpus), model_prefix=prefix, model_type="bpe", vocab_size=size,
                    character_coverage=1.0, pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
                    pad_piece=PAD, unk_piece="<unk>", user_defined_symbols=list(PAUSE_TOKENS),
                    num_threads=1, minloglevel=2)
                break
            except RuntimeError as exc:
                if "vocab_size" not in str(exc) or size <= chars + 8:
                    raise StudioError(f"SentencePiece could not train a BPE model: {exc}") from exc
                size = max(chars + 8, size * 2 // 3)
        model = Path(prefix + ".model").read_bytes()
    sp = spm.SentencePieceProcessor(model_proto=model)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())], model


def make_tokenizer(kind: str = "phoneme", texts=None, workdir=None, vocab_size: int = 512) -> Tokenizer:
    """phoneme: the fixed inventory (any dataset maps); char: normalized characters (the whole
    Ethiopic syllabary plus what `texts` use); bpe: SentencePiece trained on `texts`."""
    if kind == "phoneme":
        return Tokenizer("phoneme", [PAD, *phoneme_inventory()])
    if kind == "char":
        return Tokenizer("char", [PAD, *_char_symbols(texts)])
    if kind == "bpe":
        symbols, model = _train_bpe(texts, workdir, vocab_size)
        return Tokenizer("bpe", symbols, model)
    raise StudioError(f"Unknown tokenizer kind {kind!r}: use one of {', '.join(KINDS)}.")


@dataclass
class Coverage:
    missing: dict[str, int]                         # symbol -> how often texts use it
    examples: dict[str, str]                        # symbol -> first text that uses it
    total_units: int = 0

    @property
    def ok(self) -> bool:
        return not self.missing

    def summary(self) -> str:
        if self.ok:
            return f"All {self.total_units} symbols are in the vocabulary."
        shown = ", ".join(f"{s!r} ×{n}" for s, n in sorted(self.missing.items(), key=lambda kv: -kv[1]))
        return f"{sum(self.missing.values())} of {self.total_units} symbols are not in the vocabulary and are skipped: {shown}"


def coverage(tokenizer: Tokenizer, texts, user_dict: dict | None = None) -> Coverage:
    """Which symbols the texts use that the vocabulary lacks (they would be skipped by encode)."""
    missing, examples, total = Counter(), {}, 0
    for text in texts:
        for unit in tokenizer.units(text, user_dict):
            total += 1
            if unit not in tokenizer._ids:
                missing[unit] += 1
                examples.setdefault(unit, text)
    return Coverage(dict(missing), examples, total)
