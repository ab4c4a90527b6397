"""The MMS-TTS model a run starts from, and its one-time download.

Meta's Amharic MMS-TTS voice comes in two parts on the Hugging Face hub, both CC-BY-NC-4.0 (non-commercial):
- the generator, facebook/mms-tts-amh, in transformers' layout: config.json (VitsConfig), model.safetensors (or
  pytorch_model.bin), vocab.json and tokenizer_config.json (is_uroman: true);
- the discriminator, which transformers does not ship, in the original VITS training checkpoint:
  facebook/mms-tts, full_models/amh/D_100000.pth (a pickle of {"model": weights, "optimizer": ...}). The public
  fine-tuning recipe (finetune-hf-vits) starts from it; without it the discriminators start from random weights
  (about.NO_DISCRIMINATOR says what that costs).

The studio downloads them only after the curator said yes to the licence, once, into workspace/pretrained/
mms-tts-amh/ (the discriminator's weights kept as discriminator.safetensors: no pickle, no optimizer state), with
LICENSE.txt beside them. Offline, or on an air-gapped machine, a folder holding the same files works the same way
(`--init FOLDER`); the message of a failed download says which files and where.
"""
from __future__ import annotations

import time
from pathlib import Path

from utils.events import StudioError
from utils.hub import HubUnreachable, download_error, fetch_licensed, hub_reachable, install_folder
from utils.mms.about import (DISCRIMINATOR, DISCRIMINATOR_HUB, FOLDER, HUB_FILES, HUB_ID, LICENCE, NEEDS_BASE,
                             NO_DISCRIMINATOR, OFFLINE, SIZE_MB, WEIGHTS, WEIGHTS_BIN)
from utils.workspace import Workspace, atomic_write_text, read_json

FETCH_WAIT_HOURS = 2  # how long a run's other processes wait for the first one's download


def pretrained_dir(ws: Workspace) -> Path:
    return ws.root / "pretrained" / FOLDER


def is_hub_id(init: str) -> bool:
    return (init or "").strip() == HUB_ID


def complete(folder: Path) -> bool:
    """A base folder in the public layout with everything the generator needs (the discriminator is optional)."""
    return all((folder / name).is_file() for name in HUB_FILES) and any((folder / w).is_file()
                                                                        for w in (WEIGHTS, WEIGHTS_BIN))


def local_base(ws: Workspace, init: str, accept_licence: bool) -> tuple[str, str]:
    """(what the run starts from, its licence), settled before a run is queued: the hub id stays an id (the trainer
    downloads it in its own process, with progress in its log) and needs the licence's yes unless the workspace
    holds it already; a run or voice name becomes its checkpoint folder; a folder is checked where it is."""
    if is_hub_id(init):
        if complete(pretrained_dir(ws)):
            return str(pretrained_dir(ws)), describe_base(pretrained_dir(ws))["licence"]
        ready, why = obtainable(ws)
        if not ready:  # refused now, not after a queue and the download's retries
            raise HubUnreachable(why)
        if not accept_licence:
            raise StudioError(refusal())
        return init, LICENCE
    folder = start_folder(ws, init)
    return str(folder), describe_base(folder)["licence"]


def obtainable(ws: Workspace) -> tuple[bool, str]:
    """Whether a run can start from Meta's base now, and the line the Training tab shows: it is in the workspace, in
    this machine's hub cache, or the hub can be reached to download it; else what to do (OFFLINE)."""
    if complete(pretrained_dir(ws)):
        with_d = (pretrained_dir(ws) / DISCRIMINATOR).is_file() or any(pretrained_dir(ws).glob("D_*.pth"))
        return True, (f"Meta's MMS-TTS base is ready in this workspace (pretrained/{FOLDER}/, "
                      f"{'with' if with_d else 'without'} its discriminator).")
    if _cached():
        return True, "Meta's MMS-TTS base is in this machine's Hugging Face cache: Start copies it into the workspace."
    if hub_reachable():
        return True, (f"Meta's MMS-TTS base is not in this workspace yet: Start downloads it once (about {SIZE_MB} MB) "
                      "after the licence's yes.")
    return False, OFFLINE


def _cached() -> bool:
    """The generator's files in the hub's local cache, from which a download offline is answered."""
    from huggingface_hub import try_to_load_from_cache

    found = lambda name: isinstance(try_to_load_from_cache(HUB_ID, name), str)  # noqa: E731
    return all(found(name) for name in HUB_FILES) and (found(WEIGHTS) or found(WEIGHTS_BIN))


def import_base(ws: Workspace, files) -> Path:
    """Meta's base from files the curator uploads (a machine that cannot reach the hub): the generator's files and
    weights, and a discriminator (D_*.pth, kept as discriminator.safetensors) when given, checked to load, into
    pretrained/mms-tts-amh/ whole or not at all, in place of what was there. The uploads stay as they were."""
    import shutil

    picked = {Path(f).name: Path(f) for f in files or []}
    missing = [n for n in HUB_FILES if n not in picked]
    missing += [] if {WEIGHTS, WEIGHTS_BIN} & picked.keys() else [f"{WEIGHTS} (or {WEIGHTS_BIN})"]
    if missing:
        raise StudioError(f"Upload the MMS-TTS base's files together: {', '.join(missing)} missing (got "
                          f"{', '.join(sorted(picked)) or 'nothing'}).")
    critics = sorted(n for n in picked if n == DISCRIMINATOR or (n.startswith("D_") and n.endswith(".pth")))

    def fill(tmp: Path) -> None:
        for name in (*HUB_FILES, WEIGHTS, WEIGHTS_BIN):
            if name in picked:
                shutil.copyfile(picked[name], tmp / name)
        if critics:
            save_discriminator(load_discriminator_file(picked[critics[-1]]), tmp / DISCRIMINATOR)
        build_generator(describe_base(tmp))  # refuses files that are no VITS base, or weights that do not fit
        atomic_write_text(tmp / "LICENSE.txt", f"Source: https://huggingface.co/{HUB_ID}, uploaded on the Training "
                          f"tab\nLicence: {LICENCE}\nSupplied: {time.strftime('%Y-%m-%d %H:%M')} by the user.\n")

    return install_folder(pretrained_dir(ws), fill, complete, replace=True)


def start_folder(ws: Workspace, init: str) -> Path:
    """A run name (its best checkpoint, else its newest), a voice name, or a folder in the workspace."""
    from utils.voice_folders import resolve_voice

    name = init.strip()
    plain = "/" not in name and "\\" not in name
    if plain and ((ws.voices / name).is_dir() or (ws.runs / name).is_dir()):
        return resolve_voice(ws, name)
    return ws.inside(name)


def refusal() -> str:
    return (f"{LICENCE}. Fine-tuning starts by downloading about {SIZE_MB} MB of these weights (and the discriminator "
            "Meta trained with them): say yes to the licence (--accept-licence on the command line, the licence box "
            "on the Training tab) to go on.")


def offline_remedy() -> str:
    repo, path = DISCRIMINATOR_HUB
    return (f"on a machine that can, download {', '.join(HUB_FILES)} and {WEIGHTS} (or {WEIGHTS_BIN}) from "
            f"https://huggingface.co/{HUB_ID}, and {path} from https://huggingface.co/{repo} (the discriminator; "
            f"without it training starts from random discriminators), put them into the workspace's pretrained/"
            f"{FOLDER}/ folder (the Training tab's *MMS-TTS base files* box does it), where every MMS run looks first, "
            "and start again (or pass --init with that folder)")


# ------------------------------------------------------------------------------------ the download
def fetch_for_run(ws: Workspace, accept_licence: bool, dist, log=print) -> Path:
    """The base for a run of `dist.world_size` processes: the first process of each machine downloads, the others
    wait for it (utils.training.ddp.first_on_each_machine) and read its copy."""
    from utils.training.ddp import first_on_each_machine

    first_on_each_machine(lambda: fetch(ws, accept_licence, log), dist, FETCH_WAIT_HOURS)
    if not complete(pretrained_dir(ws)):
        raise StudioError("The first process on this machine could not download the MMS-TTS base (its reason is in "
                          "train.log).")
    return pretrained_dir(ws)


def fetch(ws: Workspace, accept_licence: bool = False, log=print) -> Path:
    """Download the base into workspace/pretrained/mms-tts-amh/ once (refused without the licence's yes); several
    processes at once leave one good copy (utils.hub.install_folder)."""
    return fetch_licensed(pretrained_dir(ws), complete, lambda tmp: _download(tmp, log), accept_licence, refusal())


def _download(tmp: Path, log=print) -> None:
    from functools import partial

    from huggingface_hub import hf_hub_download

    from utils.f5.base import progress_lines  # a log line a tenth of the bytes: the Training tab shows the log
    from utils.hub import byte_progress

    what = f"the MMS-TTS Amharic base ({HUB_ID})"
    try:
        for name in HUB_FILES:
            _copy(hf_hub_download(HUB_ID, name), tmp / name)
        _copy_weights(partial(hf_hub_download, tqdm_class=byte_progress(progress_lines(SIZE_MB, log, what))), tmp)
    except StudioError:
        raise
    except Exception as exc:
        raise download_error(what, exc, offline_remedy()) from exc
    repo, path = DISCRIMINATOR_HUB
    try:
        log(f"downloading the discriminator Meta trained with it ({repo}, {path}; only its weights are kept)")
        save_discriminator(load_discriminator_file(Path(hf_hub_download(repo, path))), tmp / DISCRIMINATOR)
    except Exception as exc:  # the generator is here: a run can go on with random discriminators, and says so
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        log(f"warning: the discriminator could not be downloaded ({reason}): {NO_DISCRIMINATOR}")
    atomic_write_text(tmp / "LICENSE.txt", f"Source: https://huggingface.co/{HUB_ID} and https://huggingface.co/"
                      f"{repo} ({path})\nLicence: {LICENCE}\nFetched: {time.strftime('%Y-%m-%d %H:%M')} after the "
                      "user accepted it.\n")


def _copy_weights(hf_hub_download, tmp: Path) -> None:
    """model.safetensors, else pytorch_model.bin read without running code and kept as safetensors."""
    from huggingface_hub.errors import EntryNotFoundError

    try:
        _copy(hf_hub_download(HUB_ID, WEIGHTS), tmp / WEIGHTS)
    except EntryNotFoundError:
        from utils.safeload import load_torch_plain, save_safetensors

        weights = load_torch_plain(hf_hub_download(HUB_ID, WEIGHTS_BIN))
        save_safetensors({k: v.contiguous() for k, v in weights.items()}, tmp / WEIGHTS)


def _copy(cached: str, dest: Path) -> None:
    import shutil

    shutil.copyfile(Path(cached).resolve(), dest)  # the hub cache's entries are links to its blobs


# ------------------------------------------------------------------------------------ what a folder holds
def describe_base(folder) -> dict:
    """What a run starts from, read without loading a weight:
    - one of this studio's MMS checkpoints or voices (config.json with "engine": "mms"): {"finetune": True,
      "model" (the VitsConfig dict), "text", "weights", "discriminator" (its trainer_state.pt or None), "licence"};
    - a base in the public layout: {"finetune": False, "model", "text", "weights", "discriminator" (its file or
      None), "licence"} (LICENSE.txt's licence, else Meta's).
    Raises a StudioError naming what is missing."""
    from utils.mms.text import MmsText

    folder = Path(folder)
    config = read_json(folder / "config.json", None) if folder.is_dir() else None
    if isinstance(config, dict) and config.get("engine") == "mms":
        return {"finetune": True, "model": config["model"], "text": MmsText.from_dict(config["text"]),
                "weights": folder / "model.safetensors", "discriminator": trained_discriminator(folder, config),
                "licence": config.get("licence") or LICENCE}
    if isinstance(config, dict) and config.get("engine") not in (None, "mms"):
        raise StudioError(f"{folder} is a checkpoint of the {config['engine']} engine: the MMS engine continues only "
                          "MMS checkpoints (a run of --engine mms, or its exported voice).")
    if not (isinstance(config, dict) and config.get("model_type") == "vits") or not complete(folder):
        raise StudioError(f"{folder} is not an MMS-TTS base: it needs transformers' VITS files side by side "
                          f"({', '.join(HUB_FILES)} and {WEIGHTS} or {WEIGHTS_BIN}), as {HUB_ID} publishes them. "
                          + NEEDS_BASE)
    weights = folder / WEIGHTS if (folder / WEIGHTS).is_file() else folder / WEIGHTS_BIN
    found = [folder / DISCRIMINATOR] if (folder / DISCRIMINATOR).is_file() else sorted(folder.glob("D_*.pth"))
    return {"finetune": False, "model": config, "text": MmsText.from_folder(folder), "weights": weights,
            "discriminator": found[-1] if found else None, "licence": _licence_of(folder)}


def trained_discriminator(folder: Path, config: dict) -> Path | None:
    """The discriminator a continued fine-tune starts from, the closest trained one there is: the checkpoint's own
    trainer state; else the newest one of the same run (only the newest checkpoint keeps trainer state; a voice
    keeps none); else the discriminator of the base the run started from (Meta's D_100000.pth in pretrained/). A
    trained generator beside random discriminators is roughened by their first, untrained gradients."""
    from utils.training.checkpoint import step_folders

    if (folder / "trainer_state.pt").is_file():
        return folder / "trainer_state.pt"
    if folder.parent.name == "checkpoints":
        kept = [f / "trainer_state.pt" for _, f in step_folders(folder.parent) if (f / "trainer_state.pt").is_file()]
        if kept:
            return kept[-1]
    init = str((config.get("train") or {}).get("init") or "")
    starts = [Path(init)] + [p / init for p in folder.parents if (p / "pretrained").is_dir()][:1] if init else []
    found = [d for start in starts if start.is_dir() for d in sorted(start.glob("D_*.pth"))]
    return found[-1] if found else None


def _licence_of(folder: Path) -> str:
    notice = folder / "LICENSE.txt"
    if notice.is_file():  # ours: "Licence: ..." on a line of its own
        return next((line[9:] for line in notice.read_text(encoding="utf-8").splitlines()
                     if line.startswith("Licence: ")), f"as {notice} says")
    return LICENCE  # a copy put there by hand: Meta's weights, Meta's licence


# ------------------------------------------------------------------------------------ building the networks
def build_generator(base: dict):
    """transformers' VitsModel: a public base through the library's own loader (its legacy names, a .bin read as
    weights only); one of this studio's checkpoints from its config.json's "model" and its model.safetensors
    (VitsModel's own state dict). Weights that leave any parameter unset are refused, never trained from random.
    No layer drop: VITS never had it (transformers' config adds it), and its numpy draws would escape every seed
    (a resume would not retrace its run, a test would skip a layer one time in ten)."""
    from transformers import VitsConfig, VitsModel

    from utils.safeload import load_safetensors

    path = Path(base["weights"])
    if not base.get("finetune"):
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # its loading bar would fill the run's log
        model, info = VitsModel.from_pretrained(path.parent, output_loading_info=True)
        missing, unexpected = info.get("missing_keys", []), info.get("unexpected_keys", [])
    else:
        model = VitsModel(VitsConfig(**{k: v for k, v in base["model"].items() if k != "transformers_version"}))
        missing, unexpected = model.load_state_dict(load_safetensors(path), strict=False)
    if missing or unexpected:
        raise StudioError(f"{path} does not fit transformers' VitsModel of its config: "
                          + "; ".join(filter(None, [f"missing {', '.join(sorted(missing)[:5])}" if missing else "",
                                                    f"unexpected {', '.join(sorted(unexpected)[:5])}" if unexpected
                                                    else ""])))
    model.text_encoder.encoder.layerdrop = 0.0
    return model


def build_discriminator(base: dict, log=print):
    """The discriminator a run starts from: the base's (Meta's, or a fine-tune's from its trainer state), else
    random weights of the published size, with the warning that says what that costs."""
    from models.vits_discriminator import VitsDiscriminator, original_state_dict, sizes_of

    path = base.get("discriminator")
    if path is None:
        log(f"warning: {NO_DISCRIMINATOR}")
        return VitsDiscriminator()
    state = load_discriminator_file(Path(path))
    model = VitsDiscriminator(**sizes_of(state))
    try:
        model.load_state_dict(original_state_dict(state))
    except RuntimeError as exc:
        raise StudioError(f"{path} is not a VITS discriminator this engine can load ({str(exc).splitlines()[0][:300]}); "
                          "remove it to start from random discriminators.") from None
    log(f"discriminator: {Path(path).name} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters)")
    return model


def load_discriminator_file(path: Path) -> dict:
    """Discriminator weights from Meta's D_*.pth ({"model": ...}, unpickled as plain tensors only), this studio's
    discriminator.safetensors, or a run's trainer_state.pt (its "modules"["discriminator"])."""
    from utils.safeload import load_safetensors, load_torch_plain

    if path.suffix == ".safetensors":
        return load_safetensors(path)
    state = load_torch_plain(path)
    if isinstance(state, dict) and "modules" in state:
        state = state["modules"].get("discriminator")
    elif isinstance(state, dict) and "model" in state:
        state = state["model"]
    if not isinstance(state, dict) or not any(str(k).startswith("discriminators.") for k in state):
        raise StudioError(f"{path} holds no VITS discriminator weights (discriminators.N...).")
    return state


def save_discriminator(state: dict, path: Path) -> None:
    from utils.safeload import save_safetensors

    save_safetensors({k: v.contiguous() for k, v in state.items()}, path)
