"""The pretrained F5-TTS base: its licence, the one-time download into the workspace, and building the model a run
starts from (the public base, a run's own checkpoint, or a tiny random F5).

F5-TTS v1 Base (SWivid/F5-TTS, about 337 M parameters, trained on about 95k hours of Chinese and English): code MIT,
weights CC-BY-NC-4.0, non-commercial use only. The studio downloads them only after the curator said yes to that
licence (`--accept-licence`, or the Training tab's checkbox), into workspace/pretrained/f5tts-v1-base/ with the
licence beside them. A local folder holding a model file (.safetensors or .pt, the public layouts) and vocab.txt
works the same way, offline: air-gapped machines and the tests.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import threading
import time
from pathlib import Path

import torch

from utils.events import StudioError
from utils.workspace import Workspace, atomic_write_text

from utils.f5 import HUB_ID, LICENCE, NEEDS_BASE, SIZE_MB

HUB_FILES = {"model": "F5TTS_v1_Base/model_1250000.safetensors", "vocab": "F5TTS_v1_Base/vocab.txt"}
FOLDER = "f5tts-v1-base"
TABLE = "transformer.text_embed.text_embed.weight"  # the text table's key in a state dict
FETCH_WAIT_HOURS = 6  # how long a run's other processes wait for the first one's download (1.35 GB)


def pretrained_dir(ws: Workspace) -> Path:
    return ws.root / "pretrained" / FOLDER


def looks_like_hub_id(text: str) -> bool:
    return text.count("/") == 1 and not Path(text).expanduser().exists() and " " not in text


def local_base(ws: Workspace, init: str, accept_licence: bool = False) -> tuple[str, str]:
    """(what the run starts from, the licence accepted). A hub id stays an id (the trainer downloads it, in its own
    process, with progress in its log) and needs the licence's yes now; a folder is checked where it is."""
    if looks_like_hub_id(init):
        if _complete(pretrained_dir(ws)):
            return str(pretrained_dir(ws)), LICENCE
        if not accept_licence:
            raise StudioError(refusal())
        return init, LICENCE
    folder = ws.inside(init)
    return str(folder), describe_base(folder)["licence"]  # refuses a folder without a model file and vocab.txt


def refusal() -> str:
    return (f"{LICENCE}. Fine-tuning starts by downloading about {SIZE_MB} MB of these weights: say yes to the "
            "licence (--accept-licence on the command line, the licence box on the Training tab) to go on.")


def fetch_for_run(ws: Workspace, repo_id: str, accept_licence: bool, dist, log=print) -> Path:
    """The base for a run of `dist.world_size` processes. Every torchrun process builds the adapter, but only the
    first process of each machine (local rank 0) downloads; the others wait at a barrier and then read its copy.
    The barrier is on a gloo group with a long timeout: NCCL's own 10 minutes is shorter than a slow download."""
    if not dist.enabled:
        return fetch(ws, repo_id, accept_licence, log)
    import torch.distributed as td

    group = td.new_group(backend="gloo", timeout=datetime.timedelta(hours=FETCH_WAIT_HOURS))
    error = None
    if dist.local_rank == 0:
        try:
            fetch(ws, repo_id, accept_licence, log)
        except Exception as exc:  # held until every process is past the barrier, so none waits for nothing
            error = exc
    td.barrier(group=group)
    td.destroy_process_group(group)
    if error is not None:
        raise error
    if not _complete(pretrained_dir(ws)):
        raise StudioError(f"The first process on this machine could not download the F5-TTS base from {repo_id} "
                          "(its reason is in train.log).")
    return pretrained_dir(ws)


def fetch(ws: Workspace, repo_id: str = HUB_ID, accept_licence: bool = False, log=print) -> Path:
    """Download the base's model and vocabulary into the workspace, once; refuses without the licence's yes.
    Safe with several processes at once (the ranks of runs on several machines sharing a disk, two runs started
    together): each downloads into its own temporary folder and renames it into place, and one that finds a
    complete copy there already (another finished first) uses that one."""
    target = pretrained_dir(ws)
    if _complete(target):
        return target
    if not accept_licence:
        raise StudioError(refusal())
    _clear_stale(target)
    tmp = target.with_name(f"{_tmp_prefix(target)}{os.getpid()}-{threading.get_ident()}")  # one per fetcher
    tmp.mkdir(parents=True)
    try:
        _download(repo_id, tmp, log)
        _install(tmp, target)
    except Exception:
        if not _complete(target):
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _complete(folder: Path) -> bool:
    return (folder / "vocab.txt").is_file() and any(folder.glob("model*.safetensors"))


def _download(repo_id: str, tmp: Path, log=print) -> None:
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()  # tqdm's bars would fill train.log with carriage returns: progress_lines says it plainly
    cache = Path(constants.HF_HUB_CACHE) / f"models--{repo_id.replace('/', '--')}" / "blobs"
    try:
        with progress_lines(cache, SIZE_MB, log):
            for name in HUB_FILES.values():
                _place(Path(hf_hub_download(repo_id, name)), tmp / Path(name).name)
    except Exception as exc:
        raise StudioError(f"Could not download the F5-TTS base from {repo_id} ({type(exc).__name__}: {exc}). "
                          "Check the connection, or put a copy (model file + vocab.txt) in a workspace folder "
                          "and give that folder as the starting point.") from exc
    atomic_write_text(tmp / "LICENSE.txt", f"Source: https://huggingface.co/{repo_id}\nLicence: {LICENCE}\n"
                                           f"Fetched: {time.strftime('%Y-%m-%d %H:%M')} after the user accepted it.\n")


def _place(cached: Path, dest: Path) -> None:
    """The hub's file as a hard link where the workspace and the hub's cache share a disk, so the 1.35 GB base is
    stored once (the hub never rewrites a file in place, and deleting its cache leaves ours whole); else a copy."""
    source = cached.resolve()  # the cache's snapshot entries are symbolic links to its blobs
    try:
        os.link(source, dest)
    except OSError:  # another disk (a mounted Drive folder), or a file system without hard links
        shutil.copyfile(source, dest)


@contextlib.contextmanager
def progress_lines(folder: Path, total_mb: float, log, every_s: float = 10.0):
    """While the body downloads into `folder`, a line in the run's log whenever another tenth of `total_mb` has
    arrived ("downloading the F5-TTS base: 540 of about 1350 MB (40 %)"): the Training tab shows the log, so a
    curator sees a 1.35 GB download move instead of a run that looks stuck."""
    done, told = threading.Event(), [0]

    def watch():
        finished = False
        while not finished:  # one last look once the body is done: the line that says it all arrived
            finished = done.wait(every_s)
            mb = sum(f.stat().st_size for f in folder.glob("*") if f.is_file()) / 2**20 if folder.is_dir() else 0
            if mb >= told[0] + total_mb / 10:
                told[0] = mb
                log(f"downloading the F5-TTS base: {mb:.0f} of about {total_mb:.0f} MB "
                    f"({min(100, 100 * mb / total_mb):.0f} %)")

    watcher = threading.Thread(target=watch, daemon=True, name="f5-download-progress")
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


def _install(tmp: Path, target: Path) -> None:
    """Rename the finished copy into place. A complete copy there already stays (another process may be reading
    it: the rename then fails and the caller keeps it); an incomplete folder (not one of ours) is replaced."""
    if target.exists() and not _complete(target):
        shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)


def _tmp_prefix(target: Path) -> str:
    from utils.jobs import machine_id

    return f".{target.name}.tmp-{machine_id()}-"


def _clear_stale(target: Path) -> None:
    """Remove the temporary folders of downloads on this machine whose process is gone (killed mid-download:
    up to 1.35 GB each). Folders of other machines sharing the disk, and of live processes, are left alone."""
    from utils.jobs import pid_alive

    prefix = _tmp_prefix(target)
    for folder in target.parent.glob(prefix + "*"):
        pid = folder.name[len(prefix):].split("-")[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


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
