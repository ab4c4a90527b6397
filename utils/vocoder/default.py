"""The workspace's default neural vocoder: the public Vocos 24 kHz mel weights, fetched once.

Griffin-Lim needs nothing but buzzes. The public Vocos (charactr/vocos-mel-24khz, MIT licence) was
trained on exactly this app's mel features, so once it sits in `workspace/vocoders/vocos-mel-24khz/`
it is what "auto" means for the Inference tab, A/B, batch, export and training evaluations (a voice's
own vocoder, or one the curator picks, still wins).

The app fetches it in the background at start (`start_fetch`), from the Hugging Face cache or the hub,
and never when HF_HUB_OFFLINE is set. A failure is remembered for the life of the process, so an
offline machine asks once, and every tab says in one line why the voice buzzes (`status_line`).
$AMHARIC_TTS_VOCOS_SOURCE (or `fetch(source=...)`) names a local folder holding a copy of the two files,
used in place of the hub: air-gapped machines and the tests go through the same code.

    from utils.events import run_to_end
    run_to_end(fetch(ws), printer=print)      # once; a second call finds the folder and fetches nothing
"""
from __future__ import annotations

import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from utils.events import Event, StudioError
from utils.hub import HubUnreachable, downloading, hub_offline, install_folder
from utils.vocoder import PUBLIC_VOCOS, _looks_like_repo_id
from utils.workspace import Workspace, atomic_write_text

DEFAULT_NAME = "vocos-mel-24khz"
SOURCE_ENV = "AMHARIC_TTS_VOCOS_SOURCE"
FILES = ("config.yaml", "pytorch_model.bin")
NOTICE = "LICENSE.md"
CREDIT = f"Vocos mel 24 kHz by charactr ({PUBLIC_VOCOS})"
LICENCE = "MIT licence, Copyright (c) 2023 Charactr Inc."
SIZE_MB = 54  # pytorch_model.bin as published: 13.5 M float32 parameters
STAGE = "vocoder"
MIT_TEXT = """\
MIT License

Copyright (c) 2023 Charactr Inc.

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
"""


# ------------------------------------------------------------------------------ what is here
def default_dir(ws: Workspace) -> Path:
    return ws.root / "vocoders" / DEFAULT_NAME


def default_vocoder(ws: Workspace) -> Path | None:
    """The folder "auto" resolves to when its weights are there (fetched, or uploaded under this name); else None."""
    folder = default_dir(ws)
    return folder if (folder / "pytorch_model.bin").is_file() or (folder / "model.safetensors").is_file() else None


def notice(folder: Path) -> dict[str, str]:
    """The `Key: value` lines at the top of a vocoder's LICENSE.md (Source, Licence, Fetched); {} without one."""
    try:
        head = (Path(folder) / NOTICE).read_text(encoding="utf-8").split("\n\n", 1)[0]
    except OSError:
        return {}
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in head.splitlines()) if v}


# ------------------------------------------------------------------------------------ fetching
def fetch(ws: Workspace, source: str | Path | None = None) -> Iterator[Event]:
    """Put the public Vocos into vocoders/vocos-mel-24khz/ with its licence, once; the last event carries the folder.

    source: a local folder holding config.yaml + pytorch_model.bin, or a hub id; default $AMHARIC_TTS_VOCOS_SOURCE,
    else charactr/vocos-mel-24khz through huggingface_hub (its cache first; the network unless HF_HUB_OFFLINE).
    """
    target = default_dir(ws)
    if default_vocoder(ws):
        yield Event(STAGE, 1, 1, f"the default vocoder is here already ({target})", result=target)
        return
    source = str(source or os.environ.get(SOURCE_ENV) or PUBLIC_VOCOS)
    yield Event(STAGE, 0, 0, f"from {source}")
    local = Path(source).expanduser()
    if not local.is_dir() and not _looks_like_repo_id(source):
        raise StudioError(f"{source} is not a folder ({SOURCE_ENV} names a folder holding config.yaml + "
                          "pytorch_model.bin) nor a Hugging Face id.")
    folder = local if local.is_dir() else (yield from _from_hub(source))
    yield Event(STAGE, 0, 0, "checking that the weights load")
    _install(folder, target, source)
    yield Event(STAGE, 1, 1, f"{CREDIT} is the default vocoder now ({LICENCE}); in {target}", result=target)


def _from_hub(repo_id: str) -> Iterator[Event]:
    """snapshot_download in a worker thread, its byte progress turned into events; returns the folder."""
    from utils.vocoder import _download

    if hub_offline():  # the cache, or nothing
        return _download(repo_id, cache_only=True)
    return (yield from downloading(lambda progress: _download(repo_id, tqdm_class=progress), STAGE, SIZE_MB,
                                   "vocos-download"))




def _install(folder: Path, target: Path, source: str) -> None:
    """The two files copied into the workspace, checked to load, with the licence beside them (utils.hub makes the
    folder whole or not at all)."""
    from utils.vocoder import load_vocoder

    missing = [f for f in FILES if not (folder / f).is_file()]
    if missing:
        raise StudioError(f"{folder} lacks {', '.join(missing)}: the public Vocos is config.yaml + pytorch_model.bin.")

    def fill(tmp: Path) -> None:
        for name in FILES:
            shutil.copyfile(folder / name, tmp / name)  # copyfile: the hub cache holds symlinks
        load_vocoder(tmp)  # refuses weights that would not load (or would run code), with its message
        atomic_write_text(tmp / NOTICE, f"Source: {source} (https://huggingface.co/{PUBLIC_VOCOS})\n"
                                        f"Licence: {LICENCE}\nFetched: {time.strftime('%Y-%m-%d %H:%M')}\n\n"
                                        f"{CREDIT}, fetched by Amharic TTS Studio.\n\n{MIT_TEXT}")

    install_folder(target, fill, lambda path: (path / "pytorch_model.bin").is_file())


# --------------------------------------------------------------------------- in the background
@dataclass
class FetchState:
    state: str = "idle"  # idle | fetching | ready | failed
    message: str = ""    # the newest progress line, or why it failed
    offline: bool = False  # it failed because this machine cannot reach the Hugging Face hub


_STATES: dict[Path, FetchState] = {}
_LOCK = threading.Lock()


def fetch_state(ws: Workspace) -> FetchState:
    with _LOCK:
        return _STATES.setdefault(ws.root, FetchState())


def start_fetch(ws: Workspace, source: str | Path | None = None) -> threading.Thread | None:
    """At app start: fetch in a background thread, at most once per process and workspace (a failure stays a
    failure until the app restarts, so an offline machine is not asked again). None when nothing starts."""
    state = fetch_state(ws)
    with _LOCK:
        if default_vocoder(ws) or state.state != "idle":
            return None
        state.state, state.message = "fetching", "starting"
    thread = threading.Thread(target=_fetch_into, args=(ws, source, state), daemon=True, name="vocos-fetch")
    thread.start()
    return thread


def _fetch_into(ws: Workspace, source, state: FetchState) -> None:
    try:
        for event in fetch(ws, source):
            state.message = event.message
        state.state = "ready"
    except StudioError as exc:
        state.state, state.message, state.offline = "failed", str(exc), isinstance(exc, HubUnreachable)
    except Exception as exc:  # a network or library failure of any type: the UI says it, the app goes on
        state.state, state.message = "failed", f"{type(exc).__name__}: {exc}"
    print(f"vocoder: {state.state}: {state.message}", flush=True)


def status_line(ws: Workspace, training: bool = False) -> str:
    """One plain line for the tabs: the default vocoder and its licence, its download, or why the voice buzzes
    (`training`: said of the evaluation samples)."""
    folder = default_vocoder(ws)
    if folder is not None:
        about = notice(folder)
        return (f"Neural vocoder by default: {CREDIT}, {about.get('Licence', 'supplied by you')}"
                + (f", fetched {about['Fetched']}" if about.get("Fetched") else "")
                + (". New runs render their samples and MCD through it." if training else "."))
    state = fetch_state(ws)
    if state.state == "fetching":
        return (f"Getting the neural vocoder, {CREDIT}, {LICENCE}: {state.message}. "
                "Until it is here, Griffin-Lim makes the sound (buzzy).")
    # said on the Inference tab (not `training`), where Add Vocos weights is below: a tab named itself as elsewhere
    where = "on the Inference tab" if training else "below"
    if state.offline or (hub_offline() and state.state != "failed"):  # offline: one way to a neural voice
        return (f"The {'samples sound' if training else 'voice sounds'} buzzy because Griffin-Lim makes the sound: "
                "this machine cannot reach the Hugging Face hub to download the public Vocos, so upload its two files "
                f"(config.yaml and pytorch_model.bin, copied from a machine that has them) under Add Vocos weights "
                f"{where}, named {DEFAULT_NAME}.")
    why = "the download failed" if state.state == "failed" else "none is in this workspace"
    return (f"The {'samples sound' if training else 'voice sounds'} buzzy because Griffin-Lim makes the sound: "
            f"no neural vocoder ({why}). To get one, "
            "connect to the internet and restart the app (it fetches the public Vocos, MIT licence), upload its "
            f"two files under *Add Vocos weights* {where} (name {DEFAULT_NAME}), or train a vocoder "
            f"({'the Vocoder panel above' if training else 'Training tab, Vocoder panel'}).")
