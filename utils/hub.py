"""Downloads from the Hugging Face hub (the speech recognizer, the public Vocos, the F5-TTS base): one test for
"this machine cannot reach the hub", one sentence that says it with the one thing to do instead, the byte progress
of a download, and the folder in the workspace made whole or not at all.

The hub's libraries fail offline in many ways (a `LocalEntryNotFoundError` when HF_HUB_OFFLINE is set or nothing
is cached, an httpx `ConnectError` wrapping "[Errno -2] Name or service not known", a proxy that refuses); a
curator needs none of those names, only that the machine is offline and what to do.
"""
from __future__ import annotations

import errno
import os
import shutil
import socket
import threading
from pathlib import Path

from utils.events import StudioError

# class names (anywhere in an exception's class hierarchy or its chain of causes) that mean "no way to the hub"
OFFLINE_CLASSES = ("LocalEntryNotFoundError", "OfflineModeIsEnabled", "ConnectError", "ConnectionError",
                   "ConnectTimeout", "ProxyError", "NameResolutionError", "NewConnectionError", "MaxRetryError")
OFFLINE_ERRNOS = {errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ECONNREFUSED, errno.ETIMEDOUT,
                  socket.EAI_NONAME, socket.EAI_AGAIN}


def hub_offline() -> bool:
    """HF_HUB_OFFLINE is set: the hub's libraries will not try the network at all."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def is_offline_error(exc: BaseException) -> bool:
    """Whether a download failed because the hub cannot be reached (or may not be: HF_HUB_OFFLINE), looking through
    the exception's causes, as the hub's libraries wrap the network's own error in theirs."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (ConnectionError, socket.gaierror, TimeoutError)):
            return True
        if isinstance(exc, OSError) and exc.errno in OFFLINE_ERRNOS:
            return True
        if any(cls.__name__ in OFFLINE_CLASSES for cls in type(exc).__mro__):
            return True
        exc = exc.__cause__ or exc.__context__
    return hub_offline()


REACH_TIMEOUT_S = 3.0  # a hub that answers at all answers a TCP connection within this
_REACHED: dict[str, tuple[float, bool]] = {}  # host -> (when asked, answer): the machine's network, asked once a minute


def hub_reachable(timeout: float = REACH_TIMEOUT_S) -> bool:
    """Whether this machine can reach the hub now, asked before a run that would download is queued (instead of the
    download's retries in its log): False with HF_HUB_OFFLINE, or when the hub's host does not resolve or take a
    connection within `timeout`; True behind a proxy, which only a download can try. The answer is kept a minute."""
    import time
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if hub_offline() or constants.HF_HUB_OFFLINE:
        return False
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    url = urlparse(constants.ENDPOINT)  # HF_ENDPOINT: a mirror is asked in the hub's place
    host = url.hostname or "huggingface.co"
    asked, answer = _REACHED.get(host, (0.0, False))
    if time.monotonic() - asked > 60:
        try:
            socket.create_connection((host, url.port or (80 if url.scheme == "http" else 443)), timeout=timeout).close()
            answer = True
        except OSError:  # gaierror ("Name or service not known"), refused, timed out
            answer = False
        _REACHED[host] = (time.monotonic(), answer)
    return answer


class HubUnreachable(StudioError):
    """A download refused because this machine cannot reach the hub; its message says what to do instead."""


def unreachable(what: str, remedy: str) -> HubUnreachable:
    """The one sentence for an offline download: what could not come, and the one thing to do instead."""
    return HubUnreachable(f"This machine cannot reach the Hugging Face hub to download {what}: {remedy}.")


def not_on_hub(exc: BaseException) -> bool:
    """Whether the hub answered that the repository does not exist (its RepositoryNotFoundError, by class name
    anywhere in the exception's chain of causes)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if any(cls.__name__ == "RepositoryNotFoundError" for cls in type(exc).__mro__):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def download_error(what: str, exc: BaseException, remedy: str) -> StudioError:
    """The error for a failed download (raise it `from exc`): `unreachable` when offline; otherwise the hub's own
    first line (a missing repository, a refused login), without the library's class names."""
    if is_offline_error(exc):
        return unreachable(what, remedy)
    reason = (str(exc).strip().splitlines() or ["no reason given"])[0][:200]
    return StudioError(f"Could not download {what} from the Hugging Face hub ({reason}): {remedy}.")


# ------------------------------------------------------------------------------ into the workspace
def install_folder(target: Path, fill, complete, replace: bool = False) -> Path:
    """Make `target` whole or not at all (the F5 base, the default vocoder, a speech recognizer): `fill(tmp)` writes
    into a temporary folder beside it, one per process and thread, which is then renamed into place. `complete(path)`
    says whether a folder is whole: one there already is kept (another process finished first; ours is dropped), an
    incomplete one is replaced; with `replace`, any one there is. Temporary folders of this machine's fetchers that
    were killed are cleared first (up to 1.35 GB each); those of live processes and other machines sharing the disk
    are left alone."""
    if replace:
        complete = _never
    if complete(target):
        return target
    prefix = _tmp_prefix(target)
    _clear_stale(target, prefix)
    tmp = target.with_name(f"{prefix}{os.getpid()}-{threading.get_ident()}")
    tmp.mkdir(parents=True)
    try:
        fill(tmp)
        if target.exists() and not complete(target):
            shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    except Exception:
        if not complete(target):
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def fetch_licensed(target: Path, complete, download, accepted: bool, refusal: str) -> Path:
    """A base whose licence needs the curator's yes, into `target` once: kept when it is whole, refused (`refusal`,
    which says the licence and how to say yes) without the yes, else `download(tmp)` through install_folder, so
    several processes at once leave one good copy."""
    if complete(target):
        return target
    if not accepted:
        raise StudioError(refusal)
    return install_folder(target, download, complete)


def _never(path: Path) -> bool:
    return False


def _tmp_prefix(target: Path) -> str:
    from utils.jobs import machine_id

    return f".{target.name}.tmp-{machine_id()}-"


def _clear_stale(target: Path, prefix: str) -> None:
    from utils.jobs import pid_alive

    for folder in target.parent.glob(prefix + "*"):
        pid = folder.name[len(prefix):].split("-")[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def byte_progress(report):
    """A tqdm class for huggingface_hub's downloads whose byte bars call `report(bytes so far)`; it prints nothing
    (a run's log or a UI line says the progress in words)."""
    import io

    from tqdm import tqdm

    class Reporting(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs.update(file=io.StringIO(), disable=False)
            super().__init__(*args, **kwargs)

        def update(self, n=1):
            out = super().update(n)
            if self.unit == "B":
                report(self.n)
            return out

    return Reporting


def downloading(work, stage: str, size_mb: float | None = None, name: str = "download"):
    """Generator of byte-progress events ("downloading: 120 MB of about 1300 MB", one a megabyte) while
    `work(tqdm_class)` downloads in a thread; returns what it returned, or raises what it raised, here."""
    import queue

    from utils.events import Event

    received: queue.Queue = queue.Queue()
    outcome: dict = {}

    def run():
        try:
            outcome["result"] = work(byte_progress(received.put))
        except BaseException as exc:  # handed to the generator's thread, raised there
            outcome["error"] = exc
        finally:
            received.put(None)

    threading.Thread(target=run, daemon=True, name=name).start()
    shown = -1
    while (n := received.get()) is not None:
        if int(n / 1e6) > shown:
            shown = int(n / 1e6)
            yield Event(stage, 0, 0, f"downloading: {shown} MB" + (f" of about {size_mb:.0f} MB" if size_mb else ""))
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]
