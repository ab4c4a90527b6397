"""Greedy CTC recognition with a transformers model from a folder: omniASR CTC (`OmniASRForCTC`) or wav2vec 2.0
(`Wav2Vec2ForCTC`, MMS with a language adapter). Both are a convolutional front end at 16 kHz, a transformer and a
linear head over a vocabulary whose blank is one id; the text is argmax per frame, repeats collapsed, blanks
dropped, then the tokenizer's own decode (what transformers' `generate` + `processor.decode` give, tested).

Long clips are cut at their quietest moment below MAX_CHUNK_S (omniASR takes under 40 s; attention memory grows
with the square of the length for both), recognised piece by piece and joined.
"""
from __future__ import annotations

import json
from itertools import groupby
from pathlib import Path

import numpy as np

from utils.events import StudioError
from utils.workspace import read_json

SAMPLE_RATE = 16_000  # what both families hear
MAX_CHUNK_S = 30.0    # a longer clip is cut into pieces no longer than this
SEARCH_S = 5.0        # ... at the quietest 20 ms within this much before the limit
OMNIASR = "omniasr_ctc"
TRANSFORMERS_FLOOR = "5.24"  # the first transformers release with omniasr_ctc


def model_type(folder: Path) -> str:
    """config.json's model_type ("omniasr_ctc", "wav2vec2", ...); "" when unreadable."""
    try:
        return json.loads((Path(folder) / "config.json").read_text(encoding="utf-8")).get("model_type", "")
    except (OSError, ValueError):
        return ""


def chunks(wave: np.ndarray, sample_rate: int = SAMPLE_RATE, max_s: float = MAX_CHUNK_S,
           search_s: float = SEARCH_S) -> list[np.ndarray]:
    """The wave in pieces of at most max_s seconds, each cut in the quietest 20 ms of the last search_s seconds
    before the limit (a pause, where a word is least likely to be split; the middle of a silence)."""
    limit, search, win = int(max_s * sample_rate), int(search_s * sample_rate), sample_rate // 50
    pieces, start = [], 0
    while len(wave) - start > limit:
        lo = start + limit - search
        region = np.asarray(wave[lo:start + limit], np.float32)
        energy = np.convolve(region ** 2, np.ones(win, np.float32), mode="valid")  # [search - win + 1]
        quietest = np.flatnonzero(energy <= energy.min() * (1 + 1e-6) + 1e-12)  # a silent stretch: its middle
        cut = lo + int(quietest[len(quietest) // 2]) + win // 2
        pieces.append(wave[start:cut])
        start = cut
    pieces.append(wave[start:])
    return pieces


def collapse(ids, blank: int) -> list[int]:
    """CTC's greedy path to symbols: runs of one id become one, then blanks go (a blank between two equal symbols
    keeps both)."""
    return [i for i, _ in groupby(int(x) for x in ids) if i != blank]


def output_frames(n_samples: int, kernels, strides) -> int:
    """Frames the convolutional front end makes of n_samples (no padding: floor((n - k) / s) + 1 per layer)."""
    for k, s in zip(kernels, strides):
        n_samples = (n_samples - k) // s + 1
    return max(int(n_samples), 0)


def _load(folder: Path, lang: str | None):
    """(feature extractor, tokenizer, model, its conv config, blank id) from a saved folder."""
    if model_type(folder) == OMNIASR:
        try:
            from transformers import AutoProcessor, OmniASRForCTC
        except ImportError as exc:
            raise StudioError(f"omniASR needs transformers {TRANSFORMERS_FLOOR} or newer: "
                              f"pip install -U 'transformers>={TRANSFORMERS_FLOOR}'") from exc
        processor = AutoProcessor.from_pretrained(str(folder))
        model = OmniASRForCTC.from_pretrained(str(folder))
        return processor.feature_extractor, processor.tokenizer, model, model.config.audio_config, \
            model.config.blank_token_id
    from transformers import Wav2Vec2ForCTC, Wav2Vec2Processor

    processor = Wav2Vec2Processor.from_pretrained(str(folder))
    kw = {"target_lang": lang, "ignore_mismatched_sizes": True} if lang else {}
    model = Wav2Vec2ForCTC.from_pretrained(str(folder), **kw)
    if lang:
        processor.tokenizer.set_target_lang(lang)
    return processor.feature_extractor, processor.tokenizer, model, model.config, processor.tokenizer.pad_token_id


class Recognizer:
    """A CTC recognizer from a workspace folder; greedy decoding with a confidence."""

    def __init__(self, folder: Path, device: str = "cpu"):
        try:
            import transformers  # noqa: F401
        except ImportError as exc:
            raise StudioError("The speech recognizer needs the transformers package: pip install transformers") from exc
        import torch

        from utils.hardware import inference_precision

        lang = (read_json(Path(folder) / "studio.json", default={}) or {}).get("lang") or None  # MMS's adapter
        self.extractor, self.tokenizer, model, conv, self.blank = _load(Path(folder), lang)
        self.conv = (tuple(conv.conv_kernel), tuple(conv.conv_stride))
        # half precision on a GPU: a 1 B model takes ~2 GB instead of ~4 beside a training run (a T4 has 15)
        self.dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(inference_precision(device), torch.float32)
        self.model = model.to(device, self.dtype).eval()
        self.device = device

    def logits(self, pieces: list[np.ndarray]):
        """[B, T, vocab] float32 logits of one padded batch of 16 kHz pieces."""
        import torch

        inputs = self.extractor([np.asarray(p, np.float32) for p in pieces], sampling_rate=SAMPLE_RATE,
                                padding=True, return_tensors="pt")
        feed = {k: v.to(self.device, self.dtype) if k == "input_values" else v.to(self.device)
                for k, v in inputs.items()}
        with torch.no_grad():
            return self.model(**feed).logits.float()

    def transcribe(self, waves: list[np.ndarray]) -> list[tuple[str, float]]:
        """16 kHz mono waves (one padded batch; a long one in pieces) -> [(text, confidence)]. Confidence: the mean
        probability of the frames the greedy path gives a symbol (blanks aside), 0 when it gives none."""
        pieces, owner = [], []
        for i, w in enumerate(waves):
            for piece in chunks(np.asarray(w, np.float32)):
                pieces.append(piece)
                owner.append(i)
        probs, ids = (t.cpu() for t in self.logits(pieces).softmax(-1).max(-1))  # [B, T] each, one copy
        texts: list[list[str]] = [[] for _ in waves]
        heard: list[list[float]] = [[] for _ in waves]
        for b, piece in enumerate(pieces):
            n = output_frames(len(piece), *self.conv)
            path = ids[b, :n]
            text = self.tokenizer.decode(collapse(path.tolist(), self.blank), skip_special_tokens=True,
                                         group_tokens=False).strip()
            if text:
                texts[owner[b]].append(text)
            heard[owner[b]] += probs[b, :n][path != self.blank].tolist()
        return [(" ".join(t), float(np.mean(h)) if h else 0.0) for t, h in zip(texts, heard)]
