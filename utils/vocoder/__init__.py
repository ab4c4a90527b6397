"""Mel -> waveform: Griffin-Lim (no vocoder needed), loading/saving Vocos-style vocoders, and the
vocoder GAN trainer (`train_vocoder`, in utils/vocoder/training.py).

Every mel here is the model's feature: natural-log magnitude HTK mel from `utils.audio.log_mel`
(`FeatureConfig`, 24 kHz, n_fft 1024, hop 256, 100 bands, full band).

A vocoder on disk is one of
- our format: a folder with `model.safetensors` + `config.json` ({"kind": "vocos", "vocoder": {...},
  "features": {...}}), written by `save_vocoder` and by the trainer's checkpoints;
- the public Vocos format: a folder with `config.yaml` + `pytorch_model.bin` (e.g. a download of
  `charactr/vocos-mel-24khz`), or that `.bin` file alone;
- a Hugging Face hub id such as `charactr/vocos-mel-24khz`, downloaded only when online.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np

from utils.audio import FeatureConfig, mel_filterbank
from utils.events import StudioError
from utils.workspace import atomic_write_bytes, atomic_write_json

PUBLIC_VOCOS = "charactr/vocos-mel-24khz"
GRIFFIN_LIM_ITERS = 64


# ------------------------------------------------------------------------------- Griffin-Lim
@lru_cache(maxsize=4)
def _mel_inverse(cfg: FeatureConfig):
    """Pseudo-inverse of the HTK filterbank, [n_fft/2+1, n_mels], and the filterbank itself."""
    import torch

    fb = mel_filterbank(cfg).double()  # [n_freqs, n_mels], the matrix log_mel uses
    return torch.linalg.pinv(fb.T).float(), fb.float()


def mel_to_magnitude(logmel, cfg: FeatureConfig = FeatureConfig(), nnls_iters: int = 30):
    """Log-mel [.., n_mels, T] -> non-negative linear magnitude [.., n_fft/2+1, T].

    Least squares through the pseudo-inverse, clipped at zero, then a few multiplicative
    (non-negative least-squares) updates so the spectrum re-projects onto the given mel.
    """
    import torch

    pinv, fb = _mel_inverse(cfg)
    mel = torch.exp(torch.as_tensor(logmel, dtype=torch.float32))       # [.., M, T]
    mag = torch.clamp(pinv @ mel, min=1e-8)                              # [.., F, T]
    for _ in range(nnls_iters):  # Lee-Seung update for min ||fb^T mag - mel||, mag >= 0
        mag = mag * (fb @ mel) / (fb @ (fb.T @ mag) + 1e-10)
    return mag


def griffin_lim(logmel, cfg: FeatureConfig = FeatureConfig(), n_iter: int = GRIFFIN_LIM_ITERS) -> np.ndarray:
    """The no-vocoder path: log-mel [n_mels, T] (numpy or torch) -> float32 waveform [hop * (T - 1)]."""
    import torch

    mag = mel_to_magnitude(logmel, cfg)
    frames = mag.shape[-1]
    min_frames = cfg.n_fft // cfg.hop_length + 2  # the STFT inside pads n_fft/2 each side: needs a longer signal
    if frames < min_frames:  # a one-syllable utterance: pad with silence, trim after
        mag = torch.nn.functional.pad(mag, (0, min_frames - frames))
    with torch.no_grad():
        wave = phase_from_magnitude(mag, cfg, n_iter)
    return wave[..., : cfg.hop_length * max(frames - 1, 0)].cpu().numpy().astype(np.float32)


def phase_from_magnitude(mag, cfg: FeatureConfig, n_iter: int, momentum: float = 0.99):
    """Fast Griffin-Lim (Perraudin et al. 2013): magnitude [.., F, T] -> waveform [.., hop * (T - 1)].

    Starts from zero phase; each iteration projects onto consistent spectrograms and extrapolates with
    `momentum` (the same algorithm as librosa's and torchaudio's `griffinlim`, checked against librosa).
    """
    import torch

    window = torch.hann_window(cfg.win_length, device=mag.device, dtype=mag.dtype)
    length = cfg.hop_length * (mag.shape[-1] - 1)
    stft = dict(n_fft=cfg.n_fft, hop_length=cfg.hop_length, win_length=cfg.win_length, window=window, center=True)
    angles = torch.ones_like(mag, dtype=torch.complex64 if mag.dtype == torch.float32 else torch.complex128)
    previous = torch.zeros_like(angles)
    for _ in range(n_iter):
        wave = torch.istft(mag * angles, length=length, **stft)
        rebuilt = torch.stft(wave, pad_mode="reflect", return_complex=True, **stft)
        angles = rebuilt - previous * (momentum / (1 + momentum))
        angles = angles / (angles.abs() + 1e-16)
        previous = rebuilt
    return torch.istft(mag * angles, length=length, **stft)


# ------------------------------------------------------------------------------ load / save
def vocoder_config_dict(model, features: FeatureConfig = FeatureConfig(), **extra) -> dict:
    return {"kind": "vocos", "vocoder": model.cfg.to_dict(), "features": features.to_dict(), **extra}


def save_vocoder(model, folder: str | Path, features: FeatureConfig = FeatureConfig(), **extra) -> Path:
    """Write `model.safetensors` + `config.json` into `folder` (each file atomically)."""
    from safetensors.torch import save

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    atomic_write_bytes(folder / "model.safetensors", save(state))
    atomic_write_json(folder / "config.json", vocoder_config_dict(model, features, **extra))
    return folder


def load_vocoder(path_or_repo: str | Path, device: str = "cpu"):
    """A generator in eval mode from our folder, the public Vocos folder/file, or a hub id."""
    source = Path(path_or_repo).expanduser()
    if source.is_dir():
        if (source / "model.safetensors").exists():
            model = _load_ours(source)
        elif (source / "pytorch_model.bin").exists():
            model = _load_public(source / "pytorch_model.bin", source / "config.yaml")
        else:
            raise StudioError(f"{source} holds no vocoder: expected model.safetensors + config.json "
                              "(a checkpoint of this app) or config.yaml + pytorch_model.bin (Vocos format).")
    elif source.is_file():
        if source.suffix == ".safetensors":
            model = _load_ours(source.parent, source)
        else:
            model = _load_public(source, source.with_name("config.yaml"))
    elif _looks_like_repo_id(str(path_or_repo)):
        folder = _download(str(path_or_repo))
        model = _load_public(folder / "pytorch_model.bin", folder / "config.yaml")
    else:
        raise StudioError(f"Vocoder {path_or_repo!r} not found: give a folder, a weights file or a "
                          f"Hugging Face id such as {PUBLIC_VOCOS}.")
    return model.to(device).eval()


def vocode(model, logmel) -> np.ndarray:
    """Log-mel [n_mels, T] or [B, n_mels, T] -> float32 waveform(s) with a loaded vocoder."""
    import torch

    param = next(model.parameters())
    mel = torch.as_tensor(logmel, dtype=torch.float32, device=param.device)
    squeeze = mel.dim() == 2
    with torch.no_grad():  # not inference_mode: cached mel transforms must stay usable by autograd
        wave = model(mel.unsqueeze(0) if squeeze else mel)
    wave = wave.float().cpu().numpy()
    return wave[0] if squeeze else wave


def _load_ours(folder: Path, weights: Path | None = None):
    from models.vocoder import Vocoder, VocoderConfig
    from utils.safeload import load_safetensors

    weights = weights or folder / "model.safetensors"
    config = _read_config_json(folder / "config.json")
    if config.get("kind", "vocos") != "vocos" or "vocoder" not in config:
        raise StudioError(f"{folder / 'config.json'} does not describe a vocoder (it may be an acoustic-model "
                          "checkpoint); pick a vocoder folder.")
    model = Vocoder(VocoderConfig.from_dict(config["vocoder"]))
    state = load_safetensors(weights)
    _load_state(model, state, weights)
    return model


def _read_config_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StudioError(f"{path} is missing: a vocoder folder needs config.json beside model.safetensors.") from None
    except json.JSONDecodeError as exc:
        raise StudioError(f"{path} is not valid JSON ({exc.msg}, line {exc.lineno}).") from None


def public_config(config_yaml: Path):
    """The generator sizes from a Vocos `config.yaml` (mel-24khz defaults when the file is absent)."""
    from models.vocoder import VocoderConfig

    if not config_yaml.exists():
        return VocoderConfig()
    import yaml

    try:
        doc = yaml.safe_load(config_yaml.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise StudioError(f"{config_yaml} is not valid YAML ({exc}).") from None
    if not isinstance(doc, dict) or not {"feature_extractor", "backbone", "head"} & set(doc):
        raise StudioError(f"{config_yaml} is not a Vocos config.yaml: it has none of its feature_extractor, backbone "
                          "and head sections. Upload the config.yaml published beside the weights.")
    feats = (doc.get("feature_extractor") or {}).get("init_args") or {}
    backbone = doc.get("backbone") or {}
    head = doc.get("head") or {}
    b_args, h_args = backbone.get("init_args") or {}, head.get("init_args") or {}
    if "MelSpectrogramFeatures" not in str((doc.get("feature_extractor") or {}).get("class_path", "MelSpectrogramFeatures")) \
            or b_args.get("adanorm_num_embeddings") or "ISTFTHead" not in str(head.get("class_path", "ISTFTHead")):
        raise StudioError(f"{config_yaml}: only mel-input Vocos models with an ISTFT head are supported "
                          "(the EnCodec variant is not).")
    # the reference package's defaults when a key is absent: "center" for the mel extractor, "same" for the head
    head_padding, feat_padding = h_args.get("padding", "same"), feats.get("padding", "center")
    if head_padding != "center" or feat_padding != "center":
        unsaid = " (its head names none, which Vocos reads as 'same')" if "padding" not in h_args else ""
        raise StudioError(f"{config_yaml}: this vocoder pads its frames as {head_padding!r} (head){unsaid} and "
                          f"{feat_padding!r} (mel features); this app's mels and vocoder use 'center' padding, as "
                          "the public vocos-mel-24khz does, so its audio would come out shifted. Use a Vocos model "
                          "whose config.yaml says padding: center.")
    return VocoderConfig(
        n_mels=int(b_args.get("input_channels", feats.get("n_mels", 100))), dim=int(b_args.get("dim", 512)),
        intermediate_dim=int(b_args.get("intermediate_dim", 1536)), num_layers=int(b_args.get("num_layers", 8)),
        n_fft=int(h_args.get("n_fft", feats.get("n_fft", 1024))),
        hop_length=int(h_args.get("hop_length", feats.get("hop_length", 256))),
        sample_rate=int(feats.get("sample_rate", 24_000)))


def _load_public(weights: Path, config_yaml: Path):
    from models.vocoder import Vocoder
    from utils.safeload import load_torch_plain

    model = Vocoder(public_config(config_yaml))
    state = load_torch_plain(weights)  # a plain tensor dict loads; anything that would run code is refused
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]  # a Lightning training checkpoint of the original repo
    # The public file also carries the mel extractor's buffers; our features come from utils.audio.
    state = {k: v for k, v in state.items() if not k.startswith(("feature_extractor.", "discriminators.",
                                                                   "multiperioddisc.", "multiresddisc."))}
    _load_state(model, state, weights)
    return model


def _load_state(model, state: dict, where: Path) -> None:
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = sorted(k for k in set(expected) & set(state) if tuple(expected[k].shape) != tuple(state[k].shape))
    if missing or unexpected or wrong:
        parts = [f"missing {missing[:3]}" if missing else "", f"unexpected {unexpected[:3]}" if unexpected else "",
                 f"wrong shape {wrong[:3]}" if wrong else ""]
        raise StudioError(f"{where}: weights do not fit the vocoder described by its config "
                          f"({'; '.join(p for p in parts if p)}).")
    model.load_state_dict(state, strict=True)


def _looks_like_repo_id(text: str) -> bool:
    parts = text.split("/")
    return len(parts) == 2 and all(parts) and not text.startswith((".", "~"))


OFFLINE_REMEDY = ("upload its config.yaml and pytorch_model.bin, copied from a machine that has them, under Add Vocos "
                  "weights on the Inference tab (on the command line, give their folder as --vocoder)")


def _download(repo_id: str, tqdm_class=None, cache_only: bool = False) -> Path:
    """Fetch config.yaml + pytorch_model.bin from the hub cache, or the network when online (and not
    `cache_only`); `tqdm_class` receives the download's progress (utils/vocoder/default.py shows it)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise StudioError(f"Downloading {repo_id} needs the huggingface_hub package; or download the "
                          "folder elsewhere and give its path.") from None
    patterns = ["config.yaml", "pytorch_model.bin"]
    try:
        folder = Path(snapshot_download(repo_id, allow_patterns=patterns, local_files_only=True))
        if (folder / "pytorch_model.bin").exists():
            return folder
    except Exception:  # not in the local cache: try the network
        pass
    from utils.hub import download_error, unreachable

    if cache_only:  # HF_HUB_OFFLINE: the cache was the only place to look
        raise unreachable(f"the vocoder {repo_id}", OFFLINE_REMEDY)
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns, tqdm_class=tqdm_class))
    except Exception as exc:
        raise download_error(f"the vocoder {repo_id}", exc, OFFLINE_REMEDY) from exc
