"""Per-clip signals of how well a transcript fits its audio, read off the voice model's own alignment.

A short training on the dataset teaches the tiny acoustic model what each sound looks like in a mel
spectrogram. Then, for every clip, monotonic alignment search (MAS) lays the text over the audio.
A transcript that is not what was said leaves marks a correct one does not:

    misfit       how much worse each frame fits the sound the text gives it than the best-fitting sound of
                 the whole dataset (a goodness-of-pronunciation score: the frame's own difficulty, noise or
                 voice cancels out): the aligned sounds do not match the audio (swapped text)
    length       log(predicted speech length / real length): text far longer or shorter than the speech
    end_squeeze  the text's last quarter gets almost no time (MAS crams unheard words into the last frames)
    start_squeeze  the same at the start
    stretch      one symbol holds a long stretch of audio (speech that has no text)
    dur          the duration predictor disagrees with MAS all along (rhythm unlike the rest of the data)
    nll          the mean prior loss, from which scoring.py's "contrast" is made: the clip aligned with other
                 transcripts of its length must fit clearly worse than with its own

Each is one number per clip; `ranking.py` compares them across the dataset.
"""
from __future__ import annotations

import math

import numpy as np
import torch


def fold_to_symbols(values: torch.Tensor, blank: torch.Tensor) -> np.ndarray:
    """Per-token frame counts [N'] -> per-symbol counts [n]: a blank's frames join the symbol before it."""
    if not bool(blank.any()):
        return values.cpu().numpy().astype(float)
    from models.matcha import fold_blank_durations

    return fold_blank_durations(values.clone()).cpu().numpy().astype(float)


CODEBOOK_CLIPS, CODEBOOK_SIZE = 64, 4096


@torch.no_grad()
def codebook(model, encoded: list[tuple[list[int], int]]) -> torch.Tensor:
    """The sounds of the dataset as the model predicts them: encoder means [F, K] of up to 64 transcripts."""
    gen = torch.Generator().manual_seed(0)
    pick = torch.randperm(len(encoded), generator=gen, device=gen.device)[:CODEBOOK_CLIPS].tolist()
    device = next(model.parameters()).device
    mus = []
    for i in pick:
        tokens, speaker = encoded[i]
        ids = torch.as_tensor(tokens, dtype=torch.long, device=device)[None]
        mu, _, _, _ = model.encode(ids, torch.tensor([ids.shape[1]]), torch.tensor([speaker], device=device))
        mus.append(mu[0].float())
    book = torch.cat(mus, dim=1)
    return book[:, torch.randperm(book.shape[1], generator=gen, device=gen.device)[:CODEBOOK_SIZE].to(book.device)]


def free_nll(y: torch.Tensor, book: torch.Tensor) -> torch.Tensor:
    """Per frame [T], the prior loss under the best-fitting sound of the codebook, in any order."""
    sq = (y ** 2).sum(0)[None, :] - 2 * book.T @ y + (book ** 2).sum(0)[:, None]  # [K, T]
    return 0.5 * sq.min(0).values / y.shape[0] + 0.5 * math.log(2 * math.pi)


def third_nll(frame_nll: np.ndarray, token_of_frame: np.ndarray, n_tokens: int) -> list[float]:
    """Mean frame prior loss over the frames aligned to the first, middle and last third of the text."""
    part = np.minimum(token_of_frame * 3 // max(n_tokens, 1), 2)
    return [float(frame_nll[part == k].mean()) if (part == k).any() else float(frame_nll.mean()) for k in range(3)]


def clip_signals(align: dict, y: torch.Tensor, book: torch.Tensor) -> dict:
    """The output of `MatchaTTS.align` for one clip, its normalised mel y [F, T] and the dataset's `codebook`
    -> plain floats (see the module docstring)."""
    frames = align["durations"]
    blank = align["blank"]
    symbols = fold_to_symbols(frames, blank)  # frames per written symbol
    n = len(symbols)
    typical = float(np.median(symbols)) if n else 1.0
    quarter = max(2, n // 4)
    frame_nll = align["frame_nll"].cpu().numpy()
    excess = (align["frame_nll"] - free_nll(y.float(), book)).cpu().numpy()  # >= 0 up to the codebook's reach
    thirds = third_nll(excess, align["token_of_frame"].cpu().numpy(), len(frames))
    real = float(frames.sum())
    predicted = float(align["predicted"].sum())
    return {
        "nll": float(frame_nll.mean()),
        "misfit": float(excess.mean()),
        "thirds": thirds,
        "length": math.log(max(predicted, 1.0) / max(real, 1.0)),
        "end_squeeze": -math.log(max(float(symbols[-quarter:].mean()), 1e-3) / max(typical, 1.0)) if n >= 4 else 0.0,
        "start_squeeze": -math.log(max(float(symbols[:quarter].mean()), 1e-3) / max(typical, 1.0)) if n >= 4 else 0.0,
        "stretch": math.log(float(symbols.max()) / max(typical, 1.0)) if n else 0.0,
        "stretch_at": float(np.argmax(symbols) / max(n - 1, 1)) if n else 0.0,
        "dur": float(align["dur_err"][~blank].mean()) if bool((~blank).any()) else float(align["dur_err"].mean()),
        "frames": int(real),
        "symbols": n,
    }
