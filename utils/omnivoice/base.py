"""The OmniVoice base: where it is (the workspace, a folder, the hub's cache), its one-time download after the
licence's yes, and the package's model loaded from it with its text tokenizer and codec.

The hub's layout (k2-fsa/OmniVoice) is kept as it is: config.json + model.safetensors (the Qwen3 backbone, audio
embeddings and heads), the text tokenizer's files, and audio_tokenizer/ (the Higgs Audio v2 codec, its own config,
weights and licence). A fine-tuned checkpoint or voice of this studio holds only the model's weights and names the
base folder whose tokenizer and codec it speaks with.
"""
from __future__ import annotations

import time
from pathlib import Path

from utils.events import StudioError
from utils.hub import HubUnreachable, download_error, fetch_licensed, hub_reachable
from utils.omnivoice.about import (BASE_FILES, CODEC_FILES, CODEC_FOLDER, FOLDER, HUB_ID, LICENCE, NEEDS_BASE,
                                   OFFLINE, SIZE_MB)
from utils.workspace import Workspace, atomic_write_text, read_json

FETCH_WAIT_HOURS = 2


def pretrained_dir(ws: Workspace) -> Path:
    return ws.root / "pretrained" / FOLDER


def complete(folder: Path) -> bool:
    """A folder in the hub's layout with the model, its tokenizer and the codec."""
    folder = Path(folder)
    return (all((folder / n).is_file() for n in BASE_FILES)
            and all((folder / CODEC_FOLDER / n).is_file() for n in CODEC_FILES))


def is_hub_id(init: str) -> bool:
    return (init or "").strip() == HUB_ID


def _cached_snapshot() -> Path | None:
    from huggingface_hub import constants

    cached = Path(constants.HF_HUB_CACHE) / f"models--{HUB_ID.replace('/', '--')}"
    ref = cached / "refs" / "main"
    snapshot = cached / "snapshots" / ref.read_text().strip() if ref.is_file() else None
    return snapshot if snapshot is not None and complete(snapshot) else None


def find_base(ws: Workspace | None = None) -> Path | None:
    """The base already on this machine: the workspace's pretrained/omnivoice/, else the hub's cache."""
    if ws is not None and complete(pretrained_dir(ws)):
        return pretrained_dir(ws)
    return _cached_snapshot()


def stored_base(base: Path, root: Path | None) -> dict:
    """How a voice or run names its base in config.json: `base` relative to the workspace when the base is inside it
    (so a workspace that moves, Colab to Lightning AI or a renamed Drive folder, takes its voices along), else the
    absolute folder; `base_path`, where it was when the voice was made (a voice copied out of its workspace)."""
    path = Path(base).resolve()
    try:
        named = str(path.relative_to(Path(root).resolve())) if root is not None else str(path)
    except ValueError:
        named = str(path)
    return {"base": named, "base_path": str(path)}


def base_of(folder: Path, config: dict) -> Path:
    """The base a voice, checkpoint or run folder speaks and trains with: the one it names, in its own workspace
    first (any folder above it), then where it was made, then any workspace's pretrained/omnivoice/ above it, then
    this machine's Hugging Face cache. Refused with every place looked in."""
    folder, model = Path(folder).resolve(), config.get("model") or {}
    named = Path(model.get("base") or FOLDER)
    above = [folder, *folder.parents]
    tails = [named] if not named.is_absolute() else _workspace_tails(named)
    tried = [up / tail for tail in tails for up in above]
    tried += [Path(p) for p in (model.get("base_path"), named if named.is_absolute() else None) if p]
    tried += [up / "pretrained" / FOLDER for up in above]
    for candidate in dict.fromkeys(tried):
        if complete(candidate):
            return candidate
    cached = _cached_snapshot()
    if cached is not None:
        return cached
    home = next((up for up in above if (up / "voices").is_dir() or (up / "runs").is_dir()), folder.parent)
    made = f", where it was made ({model['base_path']})" if model.get("base_path") else ""
    raise StudioError(f"{folder.name}: its OmniVoice base ({named}) is not on this machine. Looked in the workspace "
                      f"it is in ({home}){made} and in this machine's Hugging Face cache. Put the hub's {HUB_ID} "
                      f"(with its audio_tokenizer/) into {home / 'pretrained' / FOLDER}/.")


def _workspace_tails(path: Path) -> list[Path]:
    """The part of an absolute base path below its workspace (from `pretrained/` on): where a voice made before
    bases were named relative to the workspace finds its base once the workspace has moved."""
    parts = path.parts
    return [Path(*parts[i:]) for i, part in enumerate(parts) if part == "pretrained"][-1:]


def obtainable(ws: Workspace) -> tuple[bool, str]:
    """Whether OmniVoice can start here now, and the line that says it."""
    if complete(pretrained_dir(ws)):
        return True, f"The OmniVoice base is ready in this workspace (pretrained/{FOLDER}/)."
    if _cached_snapshot():
        return True, "The OmniVoice base is in this machine's Hugging Face cache: it is used from there."
    if hub_reachable():
        return True, (f"The OmniVoice base is not on this machine yet: it is downloaded once (about "
                      f"{SIZE_MB / 1000:.1f} GB) after the licence's yes.")
    return False, OFFLINE


def refusal() -> str:
    return (f"{LICENCE}. OmniVoice starts by downloading about {SIZE_MB / 1000:.1f} GB of these weights: say yes to "
            "both licences (--accept-licence on the command line, the licence box in the browser) to go on.")


def base_folder(ws: Workspace, init: str = HUB_ID, accept_licence: bool = False, log=print) -> Path:
    """The base to speak or start from: the hub's (found on this machine, else downloaded after the licence's yes)
    or a folder in the hub's layout."""
    if not init or is_hub_id(init):
        found = find_base(ws)
        if found is not None:
            return found
        ready, why = obtainable(ws)
        if not ready:
            raise HubUnreachable(why)
        return fetch(ws, accept_licence, log)
    folder = ws.inside(init) if not Path(init).is_absolute() else Path(init)
    if not complete(folder):
        raise StudioError(f"{init}: not an OmniVoice base in the hub's layout (it needs {', '.join(BASE_FILES)} and "
                          f"{CODEC_FOLDER}/ with {', '.join(CODEC_FILES)}). {NEEDS_BASE}")
    return folder


def fetch(ws: Workspace, accept_licence: bool = False, log=print) -> Path:
    """Download the base into workspace/pretrained/omnivoice/ once (refused without the licence's yes)."""
    return fetch_licensed(pretrained_dir(ws), complete, lambda tmp: _download(tmp, log), accept_licence, refusal())


def _download(tmp: Path, log=print) -> None:
    from huggingface_hub import snapshot_download

    what = f"the OmniVoice base ({HUB_ID}, about {SIZE_MB / 1000:.1f} GB)"
    log(f"downloading {what}")
    try:
        snapshot_download(HUB_ID, local_dir=str(tmp))
    except Exception as exc:
        raise download_error(what, exc, OFFLINE) from exc
    atomic_write_text(tmp / "LICENSE.studio.txt", f"Source: https://huggingface.co/{HUB_ID}\nLicence: {LICENCE}\n"
                      f"Fetched: {time.strftime('%Y-%m-%d %H:%M')} after the user accepted it.\n")


def full_size(init: str, workspace: str) -> bool:
    """Whether a run starts from the full-size base (the hub's, its folder, or a fine-tune of it) rather than a tiny
    one, read from the base's config.json (nothing loaded). What is not found yet counts as full size."""
    if not init or is_hub_id(init):
        return True
    folder = Path(init) if Path(init).is_absolute() else Path(workspace or ".") / init
    root = Path(workspace or ".")
    if "/" not in init and ((root / "runs" / init).is_dir() or (root / "voices" / init).is_dir()):
        from utils.voice_folders import resolve_voice  # a run or voice to continue: its checkpoint folder

        try:
            folder = resolve_voice(Workspace(root.resolve()), init)
        except StudioError:
            return True
    config = read_json(folder / "config.json", {}) or {}
    if isinstance(config.get("model"), dict) and config["model"].get("base"):  # a fine-tune: its base's size
        try:
            config = read_json(base_of(folder, config) / "config.json", {}) or {}
        except StudioError:
            return True
    return int((config.get("llm_config") or {}).get("hidden_size", 1024)) >= 512


# ------------------------------------------------------------------------------------ the package's model
def attention_for(device: str, precision: str) -> str:
    """SDPA everywhere: the package's training default, flex_attention, needs bf16 and fails on an L4's shared
    memory; SDPA runs on every card and on the CPU."""
    return "sdpa"


def load_package_model(base: Path, device: str = "cpu", precision: str = "fp32", weights: dict | None = None,
                       for_training: bool = False):
    """omnivoice.OmniVoice from a base folder, `weights` (a fine-tune's) put over the base's, on `device`. For
    speech it also carries its text tokenizer, codec and duration rules, set as the package's from_pretrained sets
    them (that call's device_map needs accelerate, which the studio does not install)."""
    import torch

    from utils.omnivoice.runtime import activate

    activate()
    from omnivoice import OmniVoice
    from transformers import AutoTokenizer

    model = OmniVoice.from_pretrained(str(base), train=True, attn_implementation=attention_for(device, precision))
    if weights:
        put_weights(model, weights, base)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    model.to(device=device, dtype=dtype if (dtype and not for_training) else None)
    model.text_tokenizer = AutoTokenizer.from_pretrained(str(base))
    if not for_training:
        attach_speech(model, base, device)
    return model


def attach_speech(model, base: Path, device: str = "cpu", codec=None) -> None:
    """What the package's `generate` needs beside the model: the codec, its feature extractor and sample rate, the
    duration rules. `codec`: one already loaded (a training run's, for its evaluations), kept outside the model's
    modules so that it is never trained, averaged or saved with the model; else the base's, loaded as a submodule
    (moving the model moves it)."""
    from omnivoice.utils.duration import RuleDurationEstimator
    from transformers import AutoFeatureExtractor

    if codec is None:
        model.audio_tokenizer = load_codec(base, device)
    else:
        object.__setattr__(model, "audio_tokenizer", codec)  # not nn.Module's setattr: no submodule
    model.feature_extractor = AutoFeatureExtractor.from_pretrained(str(Path(base) / CODEC_FOLDER))
    model.sampling_rate = model.feature_extractor.sampling_rate
    model.duration_estimator = RuleDurationEstimator()


def put_weights(model, weights: dict, source) -> None:
    """A fine-tune's weights over the base's; what differs in name or shape is refused by name."""
    own = model.state_dict()
    unknown = sorted(set(weights) - set(own))
    wrong = sorted(k for k in set(weights) & set(own) if tuple(weights[k].shape) != tuple(own[k].shape))
    if unknown or wrong:
        raise StudioError(f"{source}: these weights are not this OmniVoice base's "
                          f"({', '.join((unknown + wrong)[:4])}{' ...' if len(unknown + wrong) > 4 else ''}); "
                          "speak it with the base it was fine-tuned from.")
    model.load_state_dict({k: v.to(own[k].dtype) for k, v in weights.items()}, strict=False)


def load_codec(base: Path, device: str = "cpu"):
    """The Higgs Audio v2 codec alone (token extraction), in eval mode on `device`."""
    from utils.omnivoice.runtime import activate

    activate()
    from transformers import HiggsAudioV2TokenizerModel

    return HiggsAudioV2TokenizerModel.from_pretrained(str(Path(base) / CODEC_FOLDER)).to(device).eval()
