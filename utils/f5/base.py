"""The pretrained F5-TTS base: its licence, the one-time download into the workspace, and building the model a run
starts from (the public base, a run's own checkpoint, or a tiny random F5).

F5-TTS v1 Base (SWivid/F5-TTS, about 337 M parameters, trained on about 95k hours of Chinese and English): code MIT,
weights CC-BY-NC-4.0, non-commercial use only. The studio downloads them only after the curator said yes to that
licence (`--accept-licence`, or the Training tab's checkbox), into workspace/pretrained/f5tts-v1-base/ with the
licence beside them. A local folder holding a model file (.safetensors or .pt, the public layouts) and vocab.txt
works the same way, offline: air-gapped machines and the tests.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path

import torch

from utils.events import StudioError
from utils.workspace import Workspace, atomic_write_text

from utils.f5 import HUB_ID, LICENCE, SIZE_MB

HUB_FILES = {"model": "F5TTS_v1_Base/model_1250000.safetensors", "vocab": "F5TTS_v1_Base/vocab.txt"}
FOLDER = "f5tts-v1-base"


def pretrained_dir(ws: Workspace) -> Path:
    return ws.root / "pretrained" / FOLDER


def looks_like_hub_id(text: str) -> bool:
    return text.count("/") == 1 and not Path(text).expanduser().exists() and " " not in text


def local_base(ws: Workspace, init: str, accept_licence: bool = False) -> tuple[str, str]:
    """(what the run starts from, the licence accepted). A hub id stays an id (the trainer downloads it, in its own
    process, with progress in its log) and needs the licence's yes now; a folder is checked where it is."""
    if looks_like_hub_id(init):
        if (pretrained_dir(ws) / "vocab.txt").is_file():
            return str(pretrained_dir(ws)), LICENCE
        if not accept_licence:
            raise StudioError(refusal())
        return init, LICENCE
    folder = ws.inside(init)
    return str(folder), describe_base(folder)["licence"]  # refuses a folder without a model file and vocab.txt


def refusal() -> str:
    return (f"{LICENCE}. Fine-tuning starts by downloading about {SIZE_MB} MB of these weights: say yes to the "
            "licence (--accept-licence on the command line, the licence box on the Training tab) to go on.")


def fetch(ws: Workspace, repo_id: str = HUB_ID, accept_licence: bool = False) -> Path:
    """Download the base's model and vocabulary into the workspace, once; refuses without the licence's yes."""
    target = pretrained_dir(ws)
    if (target / "vocab.txt").is_file() and any(target.glob("model*.safetensors")):
        return target
    if not accept_licence:
        raise StudioError(refusal())
    from huggingface_hub import hf_hub_download

    tmp = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        for key, name in HUB_FILES.items():
            path = hf_hub_download(repo_id, name)
            shutil.copyfile(path, tmp / Path(name).name)
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise StudioError(f"Could not download the F5-TTS base from {repo_id} ({type(exc).__name__}: {exc}). "
                          "Check the connection, or put a copy (model file + vocab.txt) in a workspace folder "
                          "and give that folder as the starting point.") from exc
    atomic_write_text(tmp / "LICENSE.txt", f"Source: https://huggingface.co/{repo_id}\nLicence: {LICENCE}\n"
                                           f"Fetched: {time.strftime('%Y-%m-%d %H:%M')} after the user accepted it.\n")
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return target


def describe_base(folder) -> dict:
    """{"weights", "vocab_file", "licence"} of a base folder; a clear message when something is missing."""
    folder = Path(folder)
    weights = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.pt"))
    vocab = folder / "vocab.txt"
    if not folder.is_dir() or not weights or not vocab.is_file():
        raise StudioError(f"{folder} is not an F5-TTS base: it needs a model file (.safetensors or .pt, as published "
                          "by SWivid/F5-TTS) and vocab.txt side by side.")
    notice = folder / "LICENSE.txt"
    licence = LICENCE if not notice.is_file() else notice.read_text(encoding="utf-8").splitlines()[1][9:]
    return {"weights": str(weights[0]), "vocab_file": str(vocab), "licence": licence}


def build_model(base: dict | None, preset: str, resume_from: Path | None, text, added: dict, log):
    """The F5 model a run starts from, its text table grown to `text`'s symbols (new rows from `added`)."""
    from models.f5 import PRESETS, F5Config, F5TTS
    from models.f5_checkpoint import check_state_dict, public_state_dict
    from utils.training import checkpoint as ckpt

    if resume_from is not None:
        model = F5TTS(F5Config.from_dict(base["model"]))
        model.load_state_dict(model_weights(ckpt.load_weights(resume_from)))
    elif base is not None:
        weights = _public_weights(base["weights"], public_state_dict)
        model = F5TTS(_config_of(weights, PRESETS, F5Config))
        try:
            check_state_dict(weights, model.state_dict(), Path(base["weights"]).name)
        except ValueError as exc:
            raise StudioError(f"{base['weights']} does not match the F5-TTS v1 Base layout: {exc}") from exc
        model.load_state_dict(weights)
        model.licence = base["licence"]
    else:
        if preset != "tiny":
            raise StudioError("The F5 engine fine-tunes the pretrained base (--init SWivid/F5-TTS, or a folder with "
                              "its files); from zero it trains only the tiny test configuration (--preset tiny).")
        model = F5TTS(F5Config.from_dict({**PRESETS["tiny"].to_dict(), "text_num_embeds": len(text.symbols)}))
        return model
    _grow(model, text, added, log)
    return model


def model_weights(weights: dict) -> dict:
    """A checkpoint's model tensors, without the voice's prompt ("prompt.*") stored beside them."""
    return {k: v for k, v in weights.items() if not k.startswith("prompt.")}


def _config_of(weights: dict, presets: dict, config_class):
    """The preset whose shapes the file has (the text table's size from the file), built on the meta device so
    trying the 337 M model costs nothing. None fits: the closest, whose check then names what differs."""
    from models.f5 import F5TTS

    rows = weights["transformer.text_embed.text_embed.weight"].shape[0] if \
        "transformer.text_embed.text_embed.weight" in weights else 1
    found = {k: tuple(v.shape) for k, v in weights.items()}

    def differences(cfg) -> int:
        with torch.device("meta"):
            shapes = {k: tuple(v.shape) for k, v in F5TTS(cfg).state_dict().items()}
        return sum(shapes.get(k) != found.get(k) for k in set(shapes) | set(found))

    candidates = [config_class.from_dict({**p.to_dict(), "text_num_embeds": rows - 1}) for p in presets.values()]
    return min(candidates, key=differences)


def _public_weights(path: str, reader) -> dict:
    try:
        return reader(path)
    except ValueError as exc:  # models/ says what differs; the user learns which file
        raise StudioError(f"{path}: {exc}") from exc


def _grow(model, text, added: dict, log) -> None:
    """New rows for the symbols the table lacks, each the mean of the base rows of its Latin spelling."""
    table = model.transformer.text_embed.text_embed.weight.detach()
    n_new = len(text.symbols) + 1 - table.shape[0]  # + 1: row 0 is the filler
    if n_new <= 0:
        return
    mean = table[1:].mean(0)
    rows = []
    for index in range(len(text.symbols) - n_new, len(text.symbols)):
        sources = [i + 1 for i in added.get(index, [])]
        rows.append(table[sources].mean(0) if sources else mean)
    model.grow_text_embedding(len(text.symbols), torch.stack(rows))
    log(f"text: {n_new} symbols added to the base's table, each starting from its nearest Latin spelling's rows")
