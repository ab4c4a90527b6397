"""Evaluation during training: validation loss, mel-cepstral distortion of synthesised held-out
clips against their recordings, rendered audio samples, and (when the workspace has a speech
recognizer, utils.transcripts.asr) the character error rate of what it hears in the synthesised clips.

Vocoding and MCD come from the vocoder/evaluation engineer's modules (utils.vocoder.griffin_lim,
utils.evaluation.mcd / logmel_mcd), reached only through `vocode` and `distortion` below.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from utils.audio import FeatureConfig, load_audio, save_audio


def vocode(logmel: torch.Tensor, feat_cfg: FeatureConfig, vocoder=None) -> np.ndarray:
    """Denormalised log-mel [n_mels, T] -> waveform at feat_cfg.sample_rate: the given vocoder, else Griffin-Lim
    (which needs none)."""
    from utils import vocoder as vocoders

    if vocoder is not None:
        return vocoders.vocode(vocoder, logmel.float())
    return vocoders.griffin_lim(logmel.float().cpu(), feat_cfg)


def load_eval_vocoder(ws, name: str, device: str, feat_cfg: FeatureConfig):
    """The vocoder a run evaluates through (TrainConfig.eval_vocoder), or None for Griffin-Lim. Checked before
    training starts: a wrong name or a vocoder of other features fails now, not at the first evaluation."""
    from utils.vocoder.choice import check_features_match, resolve, vocoder_source

    name = resolve(ws, name)  # "auto": the workspace's default vocoder (prepare_run has usually fixed it already)
    if name in ("", "griffin-lim"):
        return None
    from utils.events import StudioError
    from utils.vocoder import load_vocoder

    try:
        model = load_vocoder(vocoder_source(ws, name), device)
        check_features_match(feat_cfg, model.cfg, "the model", name)
    except StudioError as exc:
        raise StudioError(f"eval_vocoder: {exc}") from exc
    return model


def distortion(kind: str, ref_wave, ref_sr, ref_logmel, wave, sr, logmel) -> float:
    """MCD in dB: "world" = the project's WORLD/SPTK definition on audio; "logmel" = fast proxy on mels."""
    from utils import evaluation

    if kind == "world":
        return float(evaluation.mcd(ref_wave, ref_sr, wave, sr))
    return float(evaluation.logmel_mcd(ref_logmel, logmel))


@torch.no_grad()
def validation_loss(model, batches: list[dict], device: str, autocast_ctx, seed: int) -> dict[str, float]:
    """Mean losses over held-out batches, with its own RNG so the training stream is untouched."""
    was_training = model.training
    model.eval()
    totals: dict[str, float] = {}
    n = 0
    devices = [torch.device(device).index or 0] if device.startswith("cuda") else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        for b in batches:
            with autocast_ctx:
                losses = model(b["tokens"].to(device), b["token_lens"].to(device), b["mels"].to(device),
                               b["mel_lens"].to(device), b["speakers"].to(device))
            k = b["tokens"].shape[0]
            for name, v in losses.items():
                totals[name] = totals.get(name, 0.0) + float(v) * k
            n += k
    model.train(was_training)
    return {f"val_{k}": v / max(n, 1) for k, v in totals.items()}


@torch.no_grad()
def synthesis_quality(model, items, ws, dataset: str, feat_cfg: FeatureConfig, mcd_kind: str, ode_steps: int,
                      sample_dir: Path | None, n_samples: int, seed: int, features_fn, vocoder=None) -> dict:
    """Synthesise each item's text (predicted durations), measure MCD against its recording, and
    write the first `n_samples` as WAV under sample_dir. Returns {"mcd": mean, "mcd_per_clip": [...]}, and
    "cer" and "cer_recorded" (the recognizer's character error rate on the synthesised clips and on their
    recordings) when the workspace has a recognizer."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    scores, heard = [], recognizer_available(ws)
    waves, texts = [], []
    for i, it in enumerate(items):
        gen = torch.Generator(device=device).manual_seed(seed + i)
        out = model.synthesise(it.tokens, speaker=it.speaker, n_steps=ode_steps, temperature=0.667,
                               generator=gen)
        logmel = out["mel"][0]  # [n_mels, T]
        ref_logmel = features_fn(ws, dataset, it.row, feat_cfg)
        need_audio = mcd_kind == "world" or (sample_dir is not None and i < n_samples) or heard
        wave = vocode(logmel, feat_cfg, vocoder) if need_audio else None
        if heard:
            waves.append(wave)
            texts.append(spoken_text(it.row))
        ref_wave, ref_sr = (load_audio(ws.dataset_dir(dataset) / it.row["audio"]) if mcd_kind == "world"
                            else (None, None))
        scores.append(distortion(mcd_kind, ref_wave, ref_sr, ref_logmel, wave, feat_cfg.sample_rate, logmel.cpu()))
        if sample_dir is not None and i < n_samples:
            save_audio(Path(sample_dir) / f"{it.row['id']}.wav", wave, feat_cfg.sample_rate)
    model.train(was_training)
    out = {"mcd": float(np.mean(scores)) if scores else float("nan"), "mcd_per_clip": scores}
    return {**out, **intelligibility(ws, waves, feat_cfg.sample_rate, texts, str(device),
                                     (dataset, [it.row for it in items]))}


def recognizer_available(ws) -> bool:
    """Whether the workspace holds a speech recognizer (fetched once; see utils.transcripts.asr)."""
    from utils.transcripts.asr import available

    return ws is not None and available(ws) is not None


def spoken_text(row: dict) -> str:
    """What a held-out clip says, as the recognizer's output is compared with it."""
    return row.get("normalized") or row.get("text") or ""


_SAID_NO_RECOGNIZER: set[str] = set()  # the workspaces whose missing recognizer this process has said


def intelligibility(ws, waves, sample_rate: int, texts: list[str], device: str,
                    recorded: tuple[str, list[dict]] | None = None) -> dict:
    """{"cer": ..., "cer_recorded": ...} from the workspace's recognizer, for every engine's evaluation (`recorded`:
    the dataset and the held-out rows spoken); without one, {} and a line in the log that says so. Whatever the
    recognizer raises (a damaged folder, a CUDA out-of-memory beside the training...) costs this evaluation its
    CER and one warning line, never the MCD or the run. A workspace without a recognizer is said once a process (a
    run), not at every evaluation of the raw and the averaged weights."""
    from utils.transcripts.asr import failure
    from utils.transcripts.asr import intelligibility as cer_of

    if ws is None:
        return {}
    if not recognizer_available(ws):
        if str(ws.root) not in _SAID_NO_RECOGNIZER:
            _SAID_NO_RECOGNIZER.add(str(ws.root))
            print("evaluation: no character error rate: no speech recognizer in this workspace (get one on the "
                  "Dataset tab, Get recognizer; or on the command line: python app.py transcribe --dataset NAME)",
                  flush=True)  # the log is read on the Training tab and in a terminal alike
        return {}
    try:
        return cer_of(ws, waves, sample_rate, texts, device, recorded)
    except Exception as exc:
        print(f"warning: evaluation: no character error rate this time: the speech recognizer failed "
              f"({failure(exc)})", flush=True)
        return {}
