"""Training runs as their own OS processes, queued per device, visible after any UI restart.

Each run is started as a detached launcher (`python -m utils.jobs launch RUN_DIR`) in its own process
session, with stdout and stderr appended to `train.log` (no pipe for anyone to forget to read). The
launcher waits its turn for the device (an OS file lock, released even if it is killed), then runs
the trainer as its child (`torchrun` when the run asks for several GPUs) and records how it ended.
The trainer itself keeps `status.json` up to date while it runs (step, ETA, heartbeat).

Stop writes a STOP request and sends SIGTERM: the trainer finishes its step, saves and exits. A
second Stop kills the whole process group.
"""
from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from utils.events import StudioError
from utils.workspace import Workspace, atomic_write_json, read_json

ROOT = Path(__file__).resolve().parent.parent
ACTIVE = ("queued", "running", "stopping")
FINAL = ("finished", "stopped", "failed")
TIME_BUDGET = "time budget"  # status.json's ended_by of a run its max_minutes ended: finished, yet resumable
HEARTBEAT_STALE_S = 120  # a running trainer refreshes status.json far more often than this
STARTING_S = 30  # a queued run may have no launcher pid yet for this long (another request is starting it)


# ------------------------------------------------------------------------------- status files
def status_path(run_dir: Path) -> Path:
    return Path(run_dir) / "status.json"


def ended_by_time_limit(status: dict) -> bool:
    """A run its time limit (max_minutes) ended: finished, evaluated and saved, with steps left that Resume trains."""
    return status.get("state") == "finished" and status.get("ended_by") == TIME_BUDGET


def read_status(run_dir: Path) -> dict:
    return read_json(status_path(run_dir), default={}) or {}


def update_status(run_dir: Path, **fields) -> dict:
    status = {**read_status(run_dir), **fields}
    atomic_write_json(status_path(run_dir), status)
    return status


def tail(path: Path, lines: int = 200) -> str:
    """The last lines of a log without reading a huge file whole."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            data = f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def machine_id() -> str:
    """This boot of this machine. A pid recorded under another (a new Colab runtime opening the same Drive
    workspace, or after a reboot) names some unrelated process here, never the run's."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return socket.gethostname()


def alive_here(status: dict, launcher_only: bool = False) -> bool:
    """Whether the run's launcher (or its trainer) is a live process of this machine's current boot."""
    if status.get("machine") not in (None, machine_id()):
        return False
    return pid_alive(status.get("launcher_pid")) or (not launcher_only and pid_alive(status.get("pid")))


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped) is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return True


# ------------------------------------------------------------------------------------ queries
def check_run(dataset: str) -> str:
    """The run the transcript check of `dataset` trains its throwaway aligner in (utils/transcripts/scoring.py)."""
    return f"{dataset}-transcript-check"


def is_check_run(run_dir: Path, doc: dict | None = None) -> bool:
    """Whether a run is the transcript check's throwaway aligner: the studio's own tool, made again by each check,
    neither a run the curator started nor a voice, so the run list and the voice pickers leave it out. `doc`: its
    config.json, if read."""
    doc = doc if doc is not None else read_json(Path(run_dir) / "config.json", default={}) or {}
    dataset = (doc.get("train") or {}).get("dataset")
    return bool(dataset) and Path(run_dir).name == check_run(dataset)


def list_runs(ws: Workspace) -> list[dict]:
    """Every run with its status, newest first. Dead runs are marked failed on the way."""
    runs = []
    for run_dir in ws.runs.iterdir() if ws.runs.exists() else []:
        if run_dir.is_dir() and ws.holds(run_dir) and status_path(run_dir).exists():
            runs.append({"name": run_dir.name, **reconcile(run_dir)})
    return sorted(runs, key=lambda r: r.get("created") or r.get("started") or 0, reverse=True)


def reconcile(run_dir: Path) -> dict:
    """A run that claims to be active but whose processes are gone is marked failed, with its last log lines."""
    status = read_status(run_dir)
    if status.get("state") not in ACTIVE:
        return status
    if status.get("state") == "queued" and not status.get("launcher_pid") and \
            time.time() - status.get("queued", 0) < STARTING_S:
        return status  # being started this moment: `start` writes its launcher's pid right after
    if alive_here(status):
        beat = status.get("heartbeat")
        if status.get("state") == "running" and beat and time.time() - beat > HEARTBEAT_STALE_S:
            status["warning"] = f"no heartbeat for {time.time() - beat:.0f} s: the trainer may be stuck"
        return status
    last = tail(Path(run_dir) / "train.log", 20)
    return update_status(run_dir, state="failed", ended=time.time(),
                         message="the training process ended without saying goodbye (killed, out of memory, or "
                                 "the machine restarted). Last log lines:\n" + last)


def device_units(devices: str | None) -> set[str]:
    """The devices a key names, one by one: "cuda:0,1" -> {"cuda:0", "cuda:1"}; "cpu" -> {"cpu"}."""
    kind, _, indices = str(devices or "cpu").partition(":")
    return {f"{kind}:{i.strip()}" for i in indices.split(",") if i.strip()} if indices else {kind}


def shares_device(a: str | None, b: str | None) -> bool:
    """Whether two runs' device keys have a device in common (a run on every GPU shares GPU 0 with one on GPU 0)."""
    return bool(device_units(a) & device_units(b))


def device_busy(ws: Workspace, devices: str, exclude: str | None = None) -> list[str]:
    """Runs that hold or wait for any of the same devices."""
    return [r["name"] for r in list_runs(ws) if r.get("state") in ACTIVE and shares_device(r.get("devices"), devices)
            and r["name"] != exclude]


def gpu_runs(ws: Workspace) -> list[str]:
    """Runs that hold or wait for a GPU: work in the app's own process (speech, the recognizer) keeps off it."""
    return [r["name"] for r in list_runs(ws) if r.get("state") in ACTIVE and str(r.get("devices", "")).startswith("cuda")]


def physical_gpus(indices: str, visible: str | None = None) -> str:
    """The CUDA_VISIBLE_DEVICES of a run on the app's GPUs `indices` ("0,1"): the app numbers the GPUs it sees, and
    where it was itself started with CUDA_VISIBLE_DEVICES=2,3 its GPU 0 is the machine's GPU 2."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    seen = [v.strip() for v in (visible or "").split(",") if v.strip()]
    wanted = [i.strip() for i in indices.split(",") if i.strip()]
    if not seen:
        return ",".join(wanted)
    return ",".join(seen[int(i)] if int(i) < len(seen) else i for i in wanted)


# ---------------------------------------------------------------------------------- actions
def start(ws: Workspace, run_name: str, config_path: Path, devices: str = "cpu", nproc: int = 1,
          trainer_module: str = "utils.training", cpu_threads: int = 0) -> dict:
    """Queue a run on `devices` ("cpu", "cuda:0", "cuda:0,1"); it starts as soon as the device is free.
    `cpu_threads`: the trainer's (0: torch's choice, every core)."""
    run_dir = ws.run_dir(run_name)
    status = reconcile(run_dir)
    if status.get("state") in ACTIVE:
        raise StudioError(f"Run {run_name} is already {status['state']}; stop it first.")
    waiting_for = device_busy(ws, devices, exclude=run_name)
    update_status(run_dir, state="queued", devices=devices, nproc=nproc, created=status.get("created", time.time()),
                  queued=time.time(), pid=None, launcher_pid=None, machine=machine_id(), ended=None,
                  trainer_module=trainer_module,
                  config=str(Path(config_path).resolve()),
                  message=f"waiting for {devices}: {', '.join(waiting_for)} holds it" if waiting_for else "starting")
    (run_dir / "STOP").unlink(missing_ok=True)
    log = open(run_dir / "train.log", "ab")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **({"OMP_NUM_THREADS": str(cpu_threads)} if cpu_threads else {})}
    if devices.startswith("cuda:"):
        env["CUDA_VISIBLE_DEVICES"] = physical_gpus(devices.split(":", 1)[1])
    proc = subprocess.Popen([sys.executable, "-m", "utils.jobs", "launch", str(run_dir)], cwd=ROOT, env=env,
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    return update_status(run_dir, launcher_pid=proc.pid)


def stop(ws: Workspace, run_name: str, again: str = "Press Stop again", by: str = "the Stop button") -> str:
    """First call: ask the trainer to finish its step, save and exit. Second call: kill it. `again`: how a second
    call is made, in the words of the UI or the command line; `by`: who asked, as the run's record says it."""
    run_dir = ws.run_dir(run_name)
    status = reconcile(run_dir)
    if status.get("state") not in ACTIVE:
        return f"{run_name} is not running ({status.get('state', 'unknown')})."
    # The STOP file is the record of a first Stop: status.json is also rewritten by the trainer's
    # heartbeat, so a counter kept there can be lost between the two processes' writes.
    request = run_dir / "STOP"
    if not request.exists():
        if status.get("state") == "running":  # said before the signal: the trainer's own "stopped" comes after
            update_status(run_dir, state="stopping")
        request.write_text(f"{by}\n")
        # one process: SIGTERM makes it stop after its step. Under torchrun the ranks read the STOP file at every
        # step and agree; torchrun itself would pass a SIGTERM on and kill the ranks 30 s later, in their save
        torchrun = status.get("state") != "queued" and int(status.get("nproc") or 1) > 1
        for pid in () if torchrun else (status.get("pid"), status.get("launcher_pid")):
            _signal(pid, signal.SIGTERM)
        if status.get("state") == "queued":
            return f"{run_name} left the queue."
        return (f"Stopping {run_name}: it finishes the current step, saves a checkpoint and exits. {again} to kill "
                "it.")
    for pid in _tree(status.get("launcher_pid")) + _tree(status.get("pid")):  # children first, then their parents
        _kill_group(pid)
    kept = last_saved(run_dir, status.get("step"))
    update_status(run_dir, state="stopped", ended=time.time(), message=f"killed on a second Stop; {kept}")
    return f"{run_name} was killed. {kept[0].upper()}{kept[1:]}"


def last_saved(run_dir: Path, step) -> str:
    """What a kill keeps: the newest checkpoint, and the steps after it that are lost (the run's step counter went on
    past it, and said "stopped at step 86" of a run whose work ended at step 50)."""
    from utils.voice_folders import newest_step  # below jobs at import time: it reads jobs' run kinds

    newest = newest_step(run_dir)
    if newest is None:
        return "it had saved no checkpoint yet: its training so far is lost."
    lost = int(step or 0) - newest
    return (f"its last saved checkpoint, step-{newest}, is kept" + (f": the {lost} step(s) after it are lost, "
            "and Resume goes on from it." if lost > 0 else "."))


def _signal(pid: int | None, sig: int) -> None:
    if pid_alive(pid):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _tree(pid: int | None) -> list[int]:
    """A process's descendants, then itself: torchrun's agent starts every rank in a session of its own
    (start_new_session=True), so killing the launcher's and rank 0's process groups left ranks 1.. holding their GPU
    memory until the collective timeout (45 minutes)."""
    import psutil

    if not pid_alive(pid):
        return []
    try:
        return [child.pid for child in reversed(psutil.Process(pid).children(recursive=True))] + [pid]
    except psutil.Error:
        return [pid]


def _kill_group(pid: int | None) -> None:
    if pid_alive(pid):
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            _signal(pid, signal.SIGKILL)


# ----------------------------------------------------------------------------- the launcher
def _device_locks(run_dir: Path, devices: str) -> list:
    """One lock file per device (cuda:0, cuda:1, cpu), in one order: a run on several GPUs holds each of them."""
    lock_dir = run_dir.parent.parent / ".locks"
    lock_dir.mkdir(exist_ok=True)
    return [open(lock_dir / f"{unit.replace(':', '_')}.lock", "w") for unit in sorted(device_units(devices))]


def _take_all(locks: list) -> bool:
    """Every lock, or none (what was taken is let go again, so two runs never wait on each other's half)."""
    taken = []
    for lock in locks:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            for held in taken:
                fcntl.flock(held, fcntl.LOCK_UN)
            return False
        taken.append(lock)
    return True


def _my_turn(run_dir: Path, devices: str) -> bool:
    """FIFO: only the oldest queued run among those that share a device tries to take them."""
    queued = []
    for other in run_dir.parent.iterdir():
        s = read_status(other)
        if s.get("state") == "queued" and shares_device(s.get("devices"), devices) and alive_here(s, launcher_only=True):
            queued.append((s.get("queued", 0), other.name))
    return not queued or min(queued)[1] == run_dir.name


def _holders(run_dir: Path, devices: str) -> list[str]:
    """Other runs that have one of the devices now."""
    return sorted(other.name for other in run_dir.parent.iterdir() if other != run_dir and other.is_dir()
                  and (s := read_status(other)).get("state") in ("running", "stopping")
                  and shares_device(s.get("devices"), devices))


def torchrun(nproc: int, *program: str) -> list[str]:
    """The command that runs `program` (a script and its arguments, or "-m", a module, ...) as `nproc` processes of
    one machine under torchrun (which sets RANK, WORLD_SIZE, LOCAL_RANK for utils/training/ddp.py)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *program]


def trainer_command(status: dict) -> list[str]:
    module, config = status.get("trainer_module", "utils.training"), status["config"]
    if status.get("nproc", 1) > 1:
        return torchrun(status["nproc"], "-m", module, "--config", config)
    return [sys.executable, "-m", module, "--config", config]


def read_transcripts_again(run_dir: Path, status: dict) -> None:
    """An acoustic run reads its dataset's transcripts again if the pronunciation dictionary changed while it waited
    in the queue (its start read them when it was queued: a word added meanwhile was not trained on). Here, before
    the trainer, once for every rank; what goes wrong is said in its log, and the trainer goes on."""
    if status.get("trainer_module", "utils.training") != "utils.training":
        return
    from utils.training.runfiles import note_in_log

    doc = read_json(run_dir / "config.json", {}) or {}
    dataset = (doc.get("train") or doc).get("dataset")
    if not dataset or doc.get("kind") == "vocoder":
        return
    try:
        from utils.datasets.curate import read_again_if_stale

        if said := read_again_if_stale(Workspace.open(run_dir.parent.parent), dataset):
            note_in_log(run_dir, said)
    except Exception as exc:  # the trainer says what is wrong with the dataset, if anything is
        note_in_log(run_dir, f"the transcripts could not be read again before training ({exc}): it trains on them "
                             "as they were read")


def launch(run_dir: Path) -> int:
    """Body of the detached launcher process: wait for the device, run the trainer, record the end."""
    run_dir = Path(run_dir)
    # also written by `start`; said here too so that no concurrent status write can leave it out
    status = update_status(run_dir, launcher_pid=os.getpid())
    stop_requested = False

    def on_term(signum, frame):
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGTERM, on_term)
    locks = _device_locks(run_dir, status["devices"])
    told = status.get("message")
    while True:  # queued: wait for our turn and the device
        if stop_requested or (run_dir / "STOP").exists():
            update_status(run_dir, state="stopped", ended=time.time(), message="removed from the queue before it started")
            return 0
        if _my_turn(run_dir, status["devices"]) and _take_all(locks):
            break
        # two runs started at the same moment both read "device free": say who holds it once that is known
        holders = _holders(run_dir, status["devices"])
        if holders and (message := f"waiting for {status['devices']}: {', '.join(holders)} holds it") != told:
            update_status(run_dir, message=message)
            told = message
        time.sleep(0.5)

    print(f"[jobs] {time.strftime('%H:%M:%S')} starting on {status['devices']}: {' '.join(trainer_command(status))}",
          flush=True)
    read_transcripts_again(run_dir, status)
    if stop_requested or (run_dir / "STOP").exists():  # Stop pressed since the turn came (the trainer's start would
        # clear the STOP request, and the signal was this launcher's): the trainer is not started
        update_status(run_dir, state="stopped", ended=time.time(), message="removed from the queue before it started")
        return 0
    child = subprocess.Popen(trainer_command(status), cwd=ROOT, stdin=subprocess.DEVNULL)
    update_status(run_dir, state="running", pid=child.pid, started=time.time(), heartbeat=time.time(),
                  message="training")
    def pass_on(signum, frame):
        nonlocal stop_requested
        stop_requested = True
        _signal(child.pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, pass_on)
    if stop_requested:  # a signal in the moment between: passed on
        _signal(child.pid, signal.SIGTERM)
    code = child.wait()
    final = read_status(run_dir)
    print(f"[jobs] {time.strftime('%H:%M:%S')} trainer ended with code {code}", flush=True)
    if final.get("launcher_pid") != os.getpid():
        return 0  # Resume was pressed once the trainer had said "stopped": the run is another launcher's now
    if code == 0:
        if final.get("state") not in FINAL:
            stopped = (run_dir / "STOP").exists()
            update_status(run_dir, state="stopped" if stopped else "finished", ended=time.time())
    elif final.get("state") == "failed":  # the trainer said why; add where its log ended
        update_status(run_dir, ended=time.time(), message=f"{final.get('message', 'failed')}\n\nLast log lines:\n"
                                                            + tail(run_dir / "train.log", 20))
    elif final.get("state") == "finished":  # it ended after saying so (stopped while its loader workers or CUDA
        # shut down: the H100 suite's aligner run, finished and checked, read "failed (signal 15)" afterwards)
        print(f"[jobs] the run had finished; the trainer's exit after it ({code}) changes nothing", flush=True)
    elif code == -signal.SIGTERM and stop_requested and final.get("state") != "stopped":
        # Stop came while the trainer started, before it took signals as a request to save and stop
        update_status(run_dir, state="stopped", ended=time.time(),
                      message="stopped as the trainer started, before its first step of this session; the last saved "
                              "checkpoint, if any, is kept")
    elif final.get("state") != "stopped":
        reason = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        update_status(run_dir, state="failed", ended=time.time(),
                      message=f"the trainer ended with {reason}. Last log lines:\n" + tail(run_dir / "train.log", 20))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "launch":
        sys.exit(launch(Path(sys.argv[2])))
    print("usage: python -m utils.jobs launch RUN_DIR", file=sys.stderr)
    sys.exit(2)
