"""The F5 model a run starts from: the pretrained base (the public F5-TTS v1 Base by default, any F5-format model on
the hub or in a folder), one of this studio's own F5 fine-tunes to continue, or a tiny random F5; its licence, the
one-time download into the workspace, and building the model.

F5-TTS v1 Base (SWivid/F5-TTS, about 337 M parameters, trained on about 95k hours of Chinese and English): code MIT,
weights CC-BY-NC-4.0, non-commercial use only. The studio downloads a hub base only after the curator said yes to
its licence (`--accept-licence`, or the Training tab's checkbox; for another repo, the licence its model card
declares), into workspace/pretrained/<its folder>/ (utils/f5/hub.py) with the licence beside it. A local folder
holding a model file (.safetensors or .pt, the public layouts) and vocab.txt works the same way, offline:
air-gapped machines and the tests. Each line of vocab.txt is a row of the model's text table: the two are compared
before any weight is loaded (`check_table`), the F5-TTS community's most common failure otherwise.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import torch

from utils.events import StudioError
from utils.hub import byte_progress, download_error, install_folder
from utils.workspace import Workspace, atomic_write_text, read_json

from utils.f5.about import HUB_ID, LICENCE, NEEDS_BASE, SIZE_MB
from utils.f5.request import safetensors_header
from utils.f5.hub import DEFAULT_FOLDER as FOLDER  # noqa: F401  (the public base's names, read here before)
from utils.f5.hub import HUB_FILES  # noqa: F401
from utils.f5.hub import HubBase, base_files, base_licence, offline_remedy, pick_weights, refusal

TABLE = "transformer.text_embed.text_embed.weight"  # the text table's key in a state dict
FETCH_WAIT_HOURS = 6  # how long a run's other processes wait for the first one's download (1.35 GB)
WORKSPACE_FOLDERS = ("runs", "voices", "pretrained", "datasets", "exports", "uploads", "vocoders")
VOCAB_FAILURES = "F5-TTS issues #1181, #915 and #432"  # a vocab.txt that is not the checkpoint's own


def pretrained_dir(ws: Workspace, hub: HubBase | None = None) -> Path:
    return ws.root / "pretrained" / (hub or HubBase(HUB_ID)).folder


def looks_like_hub_id(text: str, root: Path | None = None) -> bool:
    """"owner/repo" or "owner/repo:subfolder" that is no folder here (nor in the workspace `root`, whose own folders
    are never taken for an owner: a mistyped runs/NAME is a missing folder, not a repo)."""
    if HubBase.parse(text) is None or Path(text).expanduser().exists() or text.split("/")[0] in WORKSPACE_FOLDERS:
        return False
    return root is None or not (Path(root) / text).exists()


def local_base(ws: Workspace, init: str, accept_licence: bool = False) -> tuple[str, str]:
    """(what the run starts from, its licence). A hub id stays an id (the trainer downloads it, in its own process,
    with progress in its log) and needs the licence's yes now, unless the workspace holds it already; a run or voice
    name becomes its checkpoint folder; a folder is checked where it is (its vocabulary against its weights too)."""
    if looks_like_hub_id(init, ws.root):
        hub = HubBase.parse(init)
        folder = pretrained_dir(ws, hub)
        if _complete(folder):
            return str(folder), describe_base(folder, hub)["licence"]
        licence = base_licence(hub)
        if not accept_licence:
            raise StudioError(refusal(hub, licence))
        return init, licence
    folder = finetune_folder(ws, init)
    return str(folder), describe_base(folder)["licence"] or ""  # refuses a folder without a model file and vocab.txt


def finetune_folder(ws: Workspace, init: str) -> Path:
    """A run name (its best checkpoint, else its newest), a voice name, a run's folder, or any folder in the
    workspace -> the folder a run starts from."""
    from utils.voice_folders import best_checkpoint

    name = init.strip()
    plain = "/" not in name and "\\" not in name
    if plain and (ws.voices / name).is_dir():
        return ws.voice_dir(name)
    folder = ws.run_dir(name) if plain and (ws.runs / name).is_dir() else ws.inside(name)
    if folder.parent == ws.runs and (folder / "checkpoints").is_dir():  # a run: its best checkpoint, else newest
        found = best_checkpoint(ws, folder.name)
        if found is None:
            raise StudioError(f"Run {folder.name} has no checkpoint yet to continue from.")
        return found
    return folder


def fetch_for_run(ws: Workspace, repo_id: str, accept_licence: bool, dist, log=print, licence: str = "") -> Path:
    """The base for a run of `dist.world_size` processes. Every torchrun process builds the adapter, but only the
    first process of each machine (local rank 0) downloads; the others wait at a barrier and then read its copy.
    The wait has hours of patience: NCCL's own 10 minutes is shorter than a slow download (ddp.first_on_each_machine)."""
    from utils.training.ddp import first_on_each_machine

    first_on_each_machine(lambda: fetch(ws, repo_id, accept_licence, log, licence), dist, FETCH_WAIT_HOURS)
    hub = _hub(repo_id)
    if not _complete(pretrained_dir(ws, hub)):
        raise StudioError(f"The first process on this machine could not download {hub.what} "
                          "(its reason is in train.log).")
    return pretrained_dir(ws, hub)


def fetch(ws: Workspace, repo_id: str = HUB_ID, accept_licence: bool = False, log=print, licence: str = "") -> Path:
    """Download the base's model and vocabulary into the workspace, once; refuses without the licence's yes.
    `licence`: the one the curator said yes to (else read again from the model card), written to LICENSE.txt.
    Safe with several processes at once (the ranks of runs on several machines sharing a disk, two runs started
    together): each downloads into its own temporary folder and renames it into place, and one that finds a
    complete copy there already (another finished first) uses that one."""
    hub = _hub(repo_id)
    target = pretrained_dir(ws, hub)
    if _complete(target):
        return target
    if not accept_licence:
        raise StudioError(refusal(hub))
    return install_folder(target, lambda tmp: _download(hub, tmp, log, licence), _complete)


def _hub(repo_id: str) -> HubBase:
    hub = HubBase.parse(repo_id)
    if hub is None:
        raise StudioError(f"{repo_id!r} is not a Hugging Face model id: owner/repo, or owner/repo:folder.")
    return hub


def _complete(folder: Path) -> bool:
    return (folder / "vocab.txt").is_file() and folder.is_dir() and pick_weights([p.name for p in folder.iterdir()]) \
        is not None


def _download(hub: HubBase, tmp: Path, log=print, licence: str = "") -> None:
    from huggingface_hub import snapshot_download

    try:
        licence = licence or base_licence(hub)
        model, vocab, mb = base_files(hub)
        report = progress_lines(mb or SIZE_MB, log, hub.what)
        folder = Path(snapshot_download(hub.repo, allow_patterns=[model, vocab], tqdm_class=byte_progress(report)))
        for name in (model, vocab):
            _place(folder / name, tmp / Path(name).name)
    except StudioError:
        raise  # ours already says what to do (a repo without vocab.txt, the hub offline while listing)
    except Exception as exc:
        raise download_error(hub.what, exc, offline_remedy(hub)) from exc
    atomic_write_text(tmp / "LICENSE.txt", f"Source: {hub.url}" + (f" ({hub.subfolder}/)" if hub.subfolder else "")
                      + f"\nLicence: {licence}\nFetched: {time.strftime('%Y-%m-%d %H:%M')} after the user accepted it.\n")


def _place(cached: Path, dest: Path) -> None:
    """The hub's file as a hard link where the workspace and the hub's cache share a disk, so the 1.35 GB base is
    stored once (the hub never rewrites a file in place, and deleting its cache leaves ours whole); else a copy."""
    source = cached.resolve()  # the cache's snapshot entries are symbolic links to its blobs
    try:
        os.link(source, dest)
    except OSError:  # another disk (a mounted Drive folder), or a file system without hard links
        shutil.copyfile(source, dest)


def progress_lines(total_mb: float, log, what: str = "the F5-TTS base"):
    """A `report(bytes so far)` for the download's byte bars (utils.hub.byte_progress) that writes a line in the run's
    log whenever another tenth of `total_mb` has arrived ("downloading the F5-TTS base: 540 of about 1350 MB (40 %)"):
    the Training tab shows the log, so a curator sees a 1.35 GB download move instead of a run that looks stuck."""
    told = [0.0]

    def report(done_bytes: int) -> None:
        mb = done_bytes / 2**20
        if mb >= told[0] + total_mb / 10 or (mb >= total_mb > told[0]):
            told[0] = mb
            log(f"downloading {what}: {mb:.0f} of about {total_mb:.0f} MB ({min(100, 100 * mb / total_mb):.0f} %)")

    return report


ETHIOPIC = ((0x1200, 0x139F), (0x2D80, 0x2DDF), (0xAB00, 0xAB2F))  # the Ethiopic blocks: Amharic's letters


def speaks_amharic(ws: Workspace, init: str) -> bool:
    """Whether a run's start (one of this studio's Amharic fine-tunes, or a base whose text table has Ethiopic
    letters) already reads Amharic: then the data only has to adapt it to a voice, not teach it a language. A hub
    base not yet downloaded, or a start that cannot be read, counts as not."""
    try:
        hub = HubBase.parse(init) if looks_like_hub_id(init, ws.root) else None
        folder = pretrained_dir(ws, hub) if hub is not None else finetune_folder(ws, init)
        config = read_json(folder / "config.json", None) if folder.is_dir() else None
        if isinstance(config, dict) and config.get("text"):
            symbols = list(config["text"].get("symbols", []))
        elif (folder / "vocab.txt").is_file():
            symbols = (folder / "vocab.txt").read_text(encoding="utf-8").splitlines()
        else:
            return False
    except (StudioError, OSError, ValueError):
        return False
    return any(lo <= ord(ch) <= hi for symbol in symbols for ch in symbol for lo, hi in ETHIOPIC)


def describe_base(folder, hub: HubBase | None = None) -> dict:
    """What a run starts from, read from its folder without loading a weight; a clear message when something is
    missing or does not fit:
    - one of this studio's F5 checkpoints or exported voices (config.json with "engine": "f5" and its "text" table):
      that config, with "weights" (its model.safetensors) and "licence" (its own: the licence of the base it was
      fine-tuned from, or none for a tiny F5 trained from zero);
    - a base in the public layout: {"weights", "vocab_file", "licence"}: the model file (`pick_weights`), vocab.txt,
      and LICENSE.txt's licence (else `hub`'s, else the public base's).
    Either way the symbols are checked against the rows of the text table (`check_table`)."""
    folder = Path(folder)
    config = read_json(folder / "config.json", None) if folder.is_dir() else None
    if isinstance(config, dict) and config.get("engine") == "f5" and config.get("text"):
        weights = folder / "model.safetensors"
        if not weights.is_file():
            raise StudioError(f"{folder} has no model.safetensors beside its config.json.")
        check_table(list(config["text"]["symbols"]), table_rows(weights), weights, "config.json's text table",
                    "config.json and model.safetensors come from different checkpoints: copy both from the same "
                    "checkpoint folder (or continue from that folder itself)")
        return {**config, "weights": str(weights), "licence": config.get("licence") or ""}
    if isinstance(config, dict) and "model" in config and "frontend" in config:
        raise StudioError(f"{folder} is a Matcha checkpoint: the F5 engine continues only F5 checkpoints (a run of "
                          "--engine f5, its exported voice, or an F5 model file with its vocab.txt).")
    chosen = pick_weights([p.name for p in folder.iterdir()]) if folder.is_dir() else None
    vocab = folder / "vocab.txt"
    if chosen is None or not vocab.is_file():
        raise StudioError(f"{folder} is not an F5-TTS base: it needs a model file (.safetensors or .pt, as published "
                          "by SWivid/F5-TTS) and vocab.txt side by side.")
    weights = folder / chosen
    check_table(vocab_symbols(vocab), table_rows(weights), weights, "vocab.txt")
    notice = folder / "LICENSE.txt"
    if notice.is_file():  # ours: "Licence: ..." on its second line
        licence = next((line[9:] for line in notice.read_text(encoding="utf-8").splitlines()
                        if line.startswith("Licence: ")), f"as {notice} says")
    else:  # a copy put there by hand: the hub repo's licence (the public base's when it is that one)
        licence = LICENCE if hub is None or hub.is_default else base_licence(hub)
    return {"weights": str(weights), "vocab_file": str(vocab), "licence": licence}


def vocab_symbols(path) -> list[str]:
    from utils.f5.text import F5Text

    return F5Text.from_vocab_file(path, "char").symbols


def table_rows(weights: Path) -> int | None:
    """Rows of the text table (filler included) from a .safetensors header, no tensor read; None for a .pt (its
    shapes are only known once loaded) or a file without the table (its loading then names what is missing)."""
    if Path(weights).suffix != ".safetensors":
        return None
    try:
        header = safetensors_header(weights)
    except (OSError, ValueError) as exc:
        raise StudioError(f"{weights}: not a readable safetensors file ({exc}).") from exc
    for key in ("ema_model." + TABLE, TABLE):
        if key in header:
            return int(header[key]["shape"][0])
    return None


def check_table(symbols: list[str], rows: int | None, weights: Path, listed_in: str,
                remedy: str = "use the vocab.txt saved with that checkpoint, beside its model file") -> None:
    """Refuse symbols that are not the table's rows (row 0 is the filler: rows = symbols + 1). Each line of vocab.txt
    is the id of one row, so a vocab.txt from another model, or from the base before a fine-tune grew it, shifts
    every symbol after the first difference: the model loads and speaks gibberish. `rows` None: not known yet."""
    if rows is None or len(symbols) == rows - 1:
        return
    have = rows - 1
    if len(symbols) > have:
        extra = symbols[have:]
        what = f"its last {len(extra)} line(s), {_shown(extra)}, have no row in the table"
    else:
        last = f"; {listed_in} ends at {symbols[-1]!r}" if symbols else ""
        what = f"{have - len(symbols)} row(s) of the table (ids {len(symbols) + 1} to {have}) have no symbol{last}"
    raise StudioError(f"{listed_in} of {weights.parent} lists {len(symbols)} symbols but the text table of "
                      f"{weights.name} has rows for {have}: {what}. A vocabulary that is not the model's own reads "
                      f"each symbol as another one and the voice speaks gibberish ({VOCAB_FAILURES}): {remedy}.")


def _shown(symbols: list[str], n: int = 8) -> str:
    return ", ".join(map(repr, symbols[:n])) + (f" and {len(symbols) - n} more" if len(symbols) > n else "")


def build_model(base: dict | None, preset: str, resume_from: Path | None, text, added: dict, log):
    """The F5 model a run starts from, its text table grown to `text`'s symbols (new rows from `added`)."""
    from models.f5 import PRESETS, F5Config, F5TTS
    from models.f5_checkpoint import check_state_dict, public_state_dict
    from utils.training import checkpoint as ckpt

    if resume_from is not None:
        model = F5TTS(F5Config.from_dict(base["model"]))
        model.load_state_dict(model_weights(ckpt.load_weights(resume_from)))
    elif base is not None and base.get("text"):  # one of the studio's F5 fine-tunes (a checkpoint or a voice)
        model = F5TTS(F5Config.from_dict(base["model"]))
        model.load_state_dict(model_weights(ckpt.load_weights(Path(base["weights"]).parent)))
    elif base is not None:
        weights = _public_weights(base["weights"], public_state_dict)  # a .pt: read safely (weights only), then
        check_table(vocab_symbols(base["vocab_file"]), weights[TABLE].shape[0] if TABLE in weights else None,
                    Path(base["weights"]), "vocab.txt")  # checked before it goes into a model
        model = F5TTS(_config_of(weights, PRESETS, F5Config))
        try:
            check_state_dict(weights, model.state_dict(), Path(base["weights"]).name)
        except ValueError as exc:
            raise StudioError(f"{base['weights']} does not match the F5-TTS v1 Base layout: {exc}") from exc
        model.load_state_dict(weights)
    else:
        if preset != "tiny":
            raise StudioError(NEEDS_BASE)
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

    rows = weights[TABLE].shape[0] if TABLE in weights else 1
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
    log(f"text: {n_new} symbols added to the table ({' '.join(text.symbols[-n_new:])}), each starting from its "
        "nearest Latin spelling's rows")


def grow_trainer_state(state: dict, model, optimizer) -> dict:
    """A resumed run whose dataset gained symbols: `build_model` grew the model's text table, so the saved table,
    its EMA and its AdamW moments get the new rows too. Without this the resume stops on a size mismatch; with it
    the run goes on, the new rows learning from where `_grow` put them."""
    table = model.transformer.text_embed.text_embed.weight
    saved = state["modules"]["model"][TABLE]
    n_new = table.shape[0] - saved.shape[0]
    if n_new <= 0:
        return state
    new_rows = table.detach()[-n_new:].to(saved)
    state["modules"]["model"][TABLE] = torch.cat((saved, new_rows))
    if state.get("ema"):  # one tensor per model parameter, in order
        i = _position(model.parameters(), table)
        state["ema"][i] = torch.cat((state["ema"][i], new_rows.to(state["ema"][i])))
    _pad_moments(state["optimizers"]["model"], optimizer, table, n_new)
    return state


def _pad_moments(saved: dict, optimizer, table, n_new: int) -> None:
    """AdamW's moments of the table, zero for the new rows (they have seen no gradient). A saved optimizer names
    its parameters by number, in the order of its groups."""
    ids = [i for group in saved["param_groups"] for i in group["params"]]
    moments = saved["state"].get(ids[_position((p for g in optimizer.param_groups for p in g["params"]), table)], {})
    for key in ("exp_avg", "exp_avg_sq"):
        if key in moments:
            moments[key] = torch.cat((moments[key], torch.zeros_like(moments[key][:n_new])))


def _position(params, wanted) -> int:
    return next(i for i, p in enumerate(params) if p is wanted)  # by identity: == on tensors compares values
