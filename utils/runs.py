"""What a run has written, shaped for display: log tail, metric series, samples and checkpoints.

Reads only the run's files (metrics.jsonl, status.json, train.log, checkpoints/, samples/), so any
process can show any run: the UI after a restart, a second browser, the CLI.
"""
from __future__ import annotations

import json
import re
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from utils import families
from utils.events import StudioError
from utils.jobs import ACTIVE, is_check_run, reconcile, tail
from utils.workspace import Workspace, read_json, read_jsonl_from

_STEP_DIR = re.compile(r"^step-(\d+)$")
PLOT_POINTS = 200  # per series: enough for a plot a few hundred pixels wide


@dataclass
class RunView:
    name: str
    status: dict
    log: str
    metrics: list[dict]
    samples: list[tuple[int, Path]] = field(default_factory=list)  # (step, wav), newest first
    checkpoints: list[tuple[int, Path]] = field(default_factory=list)  # (step, folder), oldest first

    @property
    def step(self) -> int:
        steps = [m["step"] for m in self.metrics if isinstance(m.get("step"), (int, float))]
        return int(max(steps + [self.status.get("step") or 0]))

    def series(self, select, max_points: int = PLOT_POINTS) -> list[dict]:
        """Long-format rows (step, series, value) of every numeric metric whose name `select` accepts."""
        return self.plots({"_": select}, max_points)["_"]

    def plots(self, selects: dict, max_points: int = PLOT_POINTS) -> dict[str, list[dict]]:
        """{plot: long-format rows} in one pass over the metrics, for each plot the metrics its `select`
        accepts. Each series is thinned to about `max_points` evenly spaced points, the newest always
        kept: a plot a few hundred pixels wide shows no more, and every browser gets it each second."""
        points: dict[str, dict[str, list]] = {name: {} for name in selects}
        chosen: dict[str, list[str]] = {}  # metric -> the plots it goes to (each name decided once)
        for m in self.metrics:
            step = m.get("step")
            if type(step) not in (int, float):
                continue
            for key, value in m.items():
                if key not in chosen:
                    chosen[key] = [name for name, select in selects.items() if key != "step" and select(key)]
                if chosen[key] and type(value) in (int, float):
                    for name in chosen[key]:
                        points[name].setdefault(key, []).append((step, float(value)))
        out = {}
        for name, by_key in points.items():
            out[name] = []
            for key, pts in by_key.items():
                kept = pts[::max(1, -(-len(pts) // max_points))]
                if kept[-1] is not pts[-1]:
                    kept.append(pts[-1])
                out[name] += [{"step": s, "series": key, "value": v} for s, v in kept]
        return out

    def summary(self) -> str:
        s = self.status
        state = s.get("state", "unknown")
        parts = [f"**{self.name}**: {state}", f"step {self.step}" + (f" / {s['max_steps']}" if s.get("max_steps") else "")]
        if s.get("eta_s") and state == "running":
            parts.append(f"ETA {format_seconds(s['eta_s'])}")
        speed = [m for m in self.metrics if "samples_per_s" in m]
        if speed:
            parts.append(f"{speed[-1]['samples_per_s']:.1f} samples/s")
        if s.get("last_checkpoint"):
            parts.append(f"last checkpoint `{Path(s['last_checkpoint']).name}`")
        best = s.get("best_checkpoint")
        if best:
            mcd = f", MCD {s['best_mcd']:.2f} dB" if isinstance(s.get("best_mcd"), (int, float)) else ""
            parts.append(f"best checkpoint `{Path(best).name}`{mcd}")
        text = " · ".join(parts)
        if s.get("message") and state in ("queued", "failed", "stopped", "stopping"):
            text += f"\n\n{plain_message(s['message'])}"
        if s.get("warning"):
            text += f"\n\n⚠ {s['warning']}"
        if s.get("overfitting"):
            text += f"\n\n⚠ {s['overfitting']}"
        for note in ("precision_note", "compile_note"):  # mixed precision or torch.compile failed, the run went on
            if s.get(note):
                text += f"\n\n⚠ {s[note]}"
        return text


def plain_message(message: str) -> str:
    """The trainer's own words for why it stopped, led by what they mean for the curator (kept in brackets)."""
    if message.startswith("stopped by request"):
        return f"Stopped because Stop was pressed, after saving a checkpoint: Resume continues from it. ({message})"
    return message


def format_seconds(seconds: float) -> str:
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def _step_dirs(folder: Path) -> list[tuple[int, Path]]:
    if not folder.exists():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if p.is_dir() and (m := _STEP_DIR.match(p.name))]
    return sorted(found)


def view(ws: Workspace, name: str, log_lines: int = 300) -> RunView:
    run_dir = ws.run_dir(name)
    if not run_dir.exists():
        raise StudioError(f"There is no run called {name}.")
    samples = [(step, wav) for step, d in reversed(_step_dirs(run_dir / "samples")) for wav in sorted(d.glob("*.wav"))]
    checkpoints = [(s, d) for s, d in _step_dirs(run_dir / "checkpoints") if (d / "model.safetensors").exists()]
    return RunView(name=name, status=reconcile(run_dir), log=tail(run_dir / "train.log", log_lines),
                   metrics=metrics(run_dir / "metrics.jsonl"), samples=samples, checkpoints=checkpoints)


def fingerprint(ws: Workspace, name: str) -> tuple:
    """(mtime, size) of the files a run's view is made of (status.json, train.log, metrics.jsonl, the newest samples
    folder): while it stays the same, nothing `view` shows can have changed. A few stat calls, no file read, so a
    watching browser costs the app nothing between two log lines."""
    run_dir = ws.run_dir(name)
    newest = _step_dirs(run_dir / "samples")[-1:]
    seen = []
    for path in [run_dir / "status.json", run_dir / "train.log", run_dir / "metrics.jsonl"] + [d for _, d in newest]:
        try:
            stat = path.stat()
            seen.append((path.name, stat.st_mtime_ns, stat.st_size))
        except OSError:
            seen.append((path.name, None, None))
    return tuple(seen)


_METRICS: dict[Path, tuple[int, int, list[dict]]] = {}  # metrics.jsonl -> (inode, bytes parsed, rows)
_METRICS_LOCK = threading.Lock()


def metrics(path: Path) -> list[dict]:
    """The rows of a metrics.jsonl, parsed once: a growing file is read on from where the last call
    stopped, so twenty browsers watching a long run cost one small read a second, not twenty full
    parses. The list returned is shared: read it, do not change it."""
    path = Path(path)
    with _METRICS_LOCK:
        try:
            inode = path.stat().st_ino
        except FileNotFoundError:
            _METRICS.pop(path, None)
            return []
        known, offset, rows = _METRICS.get(path, (inode, 0, []))
        if known != inode:  # a new file under the same name (run deleted, made again)
            offset, rows = 0, []
        new, end = read_jsonl_from(path, offset)
        if end < offset:  # truncated: read again from the start
            rows = []
        rows = rows + new if new else rows
        _METRICS[path] = (inode, end, rows)
        return rows


def init_choices(ws: Workspace) -> list[str]:
    """What a run can fine-tune from: acoustic checkpoints of earlier runs and exported voices."""
    from utils import inference

    return inference.list_acoustic_checkpoints(ws) + [f"voices/{v}" for v in inference.list_voices(ws)]


def delete(ws: Workspace, name: str) -> str:
    run_dir = ws.run_dir(name)
    status = reconcile(run_dir) if run_dir.exists() else {}
    if status.get("state") in ACTIVE:
        raise StudioError(f"{name} is {status['state']}: stop it before deleting it.")
    if not run_dir.exists():
        raise StudioError(f"There is no run called {name}.")
    shutil.rmtree(run_dir)
    return f"Deleted run {name}."


def run_table(ws: Workspace) -> list[dict]:
    """One row per run for the run list."""
    from utils.jobs import list_runs

    rows = []
    for r in list_runs(ws):
        doc = read_json(ws.run_dir(r["name"]) / "config.json", {}) or {}
        if is_check_run(ws.run_dir(r["name"]), doc):
            continue
        config = doc if doc.get("kind") == "vocoder" else doc.get("train", {})
        preset = f"vocoder ({config.get('preset', '')})" if doc.get("kind") == "vocoder" else config.get("preset", "")
        if doc.get("kind") != "vocoder" and config.get("engine") in families.names() \
                and not families.get(config["engine"]).HAS_SIZES:
            preset = families.get(config["engine"]).TITLE  # its size is its base's: the family says what it is
        rows.append({
            "run": r["name"], "status": r.get("state", "?"), "step": r.get("step") or 0,
            "dataset": config.get("dataset", ""), "preset": preset,
            "best (val MCD)": (f"{Path(r['best_checkpoint']).name} ({r['best_mcd']:.2f} dB)" if r.get("best_mcd")
                               else Path(r["best_checkpoint"]).name) if r.get("best_checkpoint") else "",
            "val CER": last_cer(ws.run_dir(r["name"])),
            "started": time.strftime("%Y-%m-%d %H:%M", time.localtime(when)) if (when := r.get("created")
                                                                                   or r.get("started")) else "",
        })
    return rows



# ------------------------------------------------------------------------------------ deleting a dataset
def trained_on(ws: Workspace, name: str) -> list[str]:
    """The runs (acoustic and vocoder) whose config names dataset `name`, newest first."""
    return [r["run"] for r in run_table(ws) if r["dataset"] == name]


def delete_dataset(ws: Workspace, name: str, confirmed: bool = False, how_to_confirm: str = "confirm") -> str:
    """Remove datasets/<name>/ (its uploads, clips, features and reviews), once the curator confirmed it, having been
    told which runs were trained on it. Those runs and their exported voices stay and still speak (a checkpoint
    holds its model, symbols and speakers, an F5 voice its reference clip's mel); they cannot resume or evaluate
    again. Refused while a run on it is active or its transcript check runs; without `confirmed`, the refusal says
    what would go, and `how_to_confirm`."""
    from utils.jobs import read_status
    from utils.transcripts.scoring import check_run, one_check_at_a_time

    folder = ws.dataset_dir(name)
    if not folder.is_dir():
        raise StudioError(f"There is no dataset called {name!r}.")
    runs = trained_on(ws, name)
    busy = [r for r in runs if read_status(ws.run_dir(r)).get("state") in ACTIVE]
    if busy:
        raise StudioError(f"Run {busy[0]} is training on dataset {name!r}: stop it (Training tab) before deleting "
                          "the dataset.")
    if not confirmed:
        used = (f" Runs trained on it: {', '.join(runs)}. They keep their checkpoints, and they and their exported "
                "voices go on speaking, but they cannot resume or be evaluated again." if runs else
                " No run was trained on it.")
        raise StudioError(f"Deleting dataset {name!r} removes its uploads, clips and reviews from the workspace; it "
                          f"cannot be undone.{used} To delete it, {how_to_confirm}.")
    with one_check_at_a_time(ws, name):  # a running transcript check says so instead of losing its files
        shutil.rmtree(folder)
    shutil.rmtree(ws.run_dir(check_run(name)), ignore_errors=True)  # the check's own aligner, of no other use
    return f"Deleted dataset {name}" + (f"; runs {', '.join(runs)} keep their checkpoints." if runs else ".")



def last_cer(run_dir: Path, tail_bytes: int = 65536) -> str:
    """The newest evaluation's character error rate (metrics.jsonl "cer", written when the workspace has a speech
    recognizer), as a percentage, with the recognizer's own on the recordings beside it ("cer_recorded", the floor);
    "" when there is none. Reads only the file's tail: the run list refreshes often."""
    path = run_dir / "metrics.jsonl"
    try:
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - tail_bytes))
            lines = f.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        if '"cer"' in line:
            try:
                row = json.loads(line)
                floor = f" (recordings {row['cer_recorded']:.0%})" if "cer_recorded" in row else ""
                return f"{row['cer']:.0%}{floor}"
            except (ValueError, KeyError, TypeError):
                continue
    return ""


STATE_WORDS = {"queued": "is queued", "running": "is training", "stopping": "is stopping (saving first)",
               "finished": "finished", "stopped": "stopped", "failed": "failed"}


def state_line(ws: Workspace, name: str) -> str:
    """One line on a run as it is now (status.json, not what a button press said): the Training tab's
    message line follows a run the curator started, resumed or stopped."""
    run_dir = ws.run_dir(name)
    if not run_dir.exists():
        return f"Run **{name}** is gone."
    s, doc = reconcile(run_dir), read_json(run_dir / "config.json", {}) or {}
    config = doc.get("train") or doc  # an acoustic run's config nests its settings, a vocoder run's does not
    state = s.get("state", "unknown")
    line = f"{'Vocoder run' if doc.get('kind') == 'vocoder' else 'Run'} **{name}** ({config.get('max_steps')} steps) "
    line += STATE_WORDS.get(state, state)
    if state in ("running", "stopping", "finished", "stopped") and s.get("step") is not None:
        line += f" · at step {s['step']}"
    if state == "queued" and s.get("message") not in (None, "", "starting"):
        line += f": {s['message']}"
    elif state == "stopped":
        line += ": its last checkpoint is saved; Resume continues from it"
    elif state == "failed":
        line += ": why is shown under the run below"
    if config.get("eval_every") and state in ("queued", "running"):
        line += f" · quality (MCD and samples) checked every {config['eval_every']} steps"
    return line


DOUBLE_PRESS_S = 5.0  # a second Start this soon after the first, for the same run, is the same wish


def just_started(ws: Workspace, name: str, within_s: float = DOUBLE_PRESS_S) -> bool:
    """Whether run `name` was queued less than `within_s` ago and is still queued or training: a Start pressed
    again now is a double press, not a wish for a second run."""
    run_dir = ws.run_dir(name)
    if not (run_dir / "status.json").exists():
        return False
    status = reconcile(run_dir)
    return status.get("state") in ACTIVE and time.time() - (status.get("created") or 0) < within_s


def last_choices(ws: Workspace) -> dict:
    """The Training form as the curator last filled it: the active run's choices, else the newest run's (a
    reload shows them again instead of a blank dataset and the default steps). {"train": ..., "vocoder": ...},
    each the config of the newest run of that kind (batch probes left out), or absent."""
    found = {}
    for r in sorted(run_table(ws), key=lambda r: r["status"] not in ACTIVE):  # stable: newest first within
        if r["run"].startswith(PROBE_PREFIX):
            continue
        doc = read_json(ws.run_dir(r["run"]) / "config.json", {}) or {}
        kind = "vocoder" if doc.get("kind") == "vocoder" else "train"
        config = doc if kind == "vocoder" else doc.get("train")
        if config and kind not in found:
            status = read_json(ws.run_dir(r["run"]) / "status.json", {}) or {}
            found[kind] = {**config, "all_gpus": (status.get("nproc") or 1) > 1,
                           "init": _relative(ws, config.get("init") or "")}
    return found


def _relative(ws: Workspace, path: str) -> str:
    """A run's init (stored absolute) as the form's pickers name it: relative to the workspace."""
    return str(Path(path).relative_to(ws.root)) if path and Path(path).is_relative_to(ws.root) else path


# ------------------------------------------------------------------------------ starting runs
def settings_path(ws: Workspace) -> Path:
    """Optimization choices saved from the Optimizations tab; every new run starts from them."""
    return ws.root / "training_settings.json"


def saved_settings(ws: Workspace) -> dict:
    """The Optimizations tab's saved choices. A file that does not parse (edited by hand) is named with the way
    out; it is left as it is, for the curator to fix or to replace with Save / Reset."""
    try:
        saved = read_json(settings_path(ws), {}) or {}
        if not isinstance(saved, dict):
            raise ValueError(f"a {type(saved).__name__}, not settings by name")
    except ValueError as exc:
        raise StudioError(f"{settings_path(ws)} cannot be read ({exc}): fix it by hand, or press Reset to "
                          "recommended on the Optimizations tab to write it anew.") from exc
    return saved


def save_settings(ws: Workspace, settings: dict) -> dict:
    from utils.training import TrainConfig
    from utils.workspace import atomic_write_json

    TrainConfig.from_dict({k: v for k, v in settings.items()})  # unknown names are refused here
    atomic_write_json(settings_path(ws), settings)
    return settings


def pick_devices(ws: Workspace, gpus: int, all_gpus: bool) -> tuple[str, int]:
    """(device key, processes): CPU; one free GPU; or every GPU under torchrun."""
    from utils.jobs import device_busy

    if gpus == 0:
        return "cpu", 1
    if all_gpus and gpus > 1:
        return "cuda:" + ",".join(str(i) for i in range(gpus)), gpus
    for i in range(gpus):
        if not device_busy(ws, f"cuda:{i}"):
            return f"cuda:{i}", 1
    return "cuda:0", 1


EVALS_PER_RUN = 6  # a run shows its quality (MCD, samples) this many times, however short
MIN_EVAL_GAP = 50  # steps: each evaluation synthesises held-out clips, which costs a few training steps' time


def eval_schedule(max_steps: int, longest: int) -> int:
    """Steps between evaluations when the curator has not chosen: about EVALS_PER_RUN per run (a 300-step run is
    checked every 50 steps, not once at its end), at least MIN_EVAL_GAP apart, at most `longest` (the default)."""
    return max(MIN_EVAL_GAP, min(longest, -(-max_steps // EVALS_PER_RUN)))


def start_training(ws: Workspace, dataset: str, preset: str = "small", run: str = "", init: str = "",
                   finetune_mode: str = "full", max_steps: int | None = None, all_gpus: bool = False,
                   overrides: dict | None = None, engine: str = families.DEFAULT, accept_licence: bool = False) -> dict:
    """Write the run's config (saved optimization settings + this form) and hand it to the job service. The F5
    engine starts from the public pretrained base unless a checkpoint or the tiny test size is chosen."""
    from utils.training import TrainConfig, prepare_run

    if not dataset:
        raise StudioError("Choose a prepared dataset first (Dataset tab).")
    if dataset not in ws.list_datasets():
        raise StudioError(f"There is no prepared dataset called {dataset!r}; prepare it on the Dataset tab.")
    values = {**saved_settings(ws), **(overrides or {})}
    init = init or families.get(engine).default_init(preset)  # the family's start: from zero, or its base
    values.update(workspace=str(ws.root), dataset=dataset, preset=preset, run=run.strip(), engine=engine,
                  init=init, finetune_mode=finetune_mode)  # paths are checked by the family's prepare
    if max_steps:
        values["max_steps"] = int(max_steps)
    if values["run"] and (ws.run_dir(values["run"]) / "config.json").exists():
        raise StudioError(f"A run called {values['run']} exists already: resume it from the run list, or pick a new name.")
    cfg = TrainConfig.from_dict(values)
    if "eval_every" not in values:
        cfg.eval_every = eval_schedule(cfg.max_steps, cfg.eval_every)
    config_path = prepare_run(cfg, accept_licence=accept_licence)
    return {"run": config_path.parent.name, "eval_every": cfg.eval_every, **queue(ws, config_path, all_gpus)}


def queue(ws: Workspace, config_path: Path, all_gpus: bool = False, **job) -> dict:
    """Hand a prepared run to the job service on the device(s) a run started from the UI would get: a free
    GPU, every GPU under torchrun, or the CPU (also for a run set to train on the CPU, which must not hold a
    GPU's place); the queue is per device, so CLI and UI runs queue together."""
    from utils import jobs

    devices, nproc = run_devices(ws, config_path, all_gpus)
    return jobs.start(ws, config_path.parent.name, config_path, devices=devices, nproc=nproc, **job)


def run_devices(ws: Workspace, config_path: Path, all_gpus: bool) -> tuple[str, int]:
    """The devices a run gets on this machine now (also at Resume: the machine may have other GPUs than when the
    run began, after a Colab runtime reset or on another machine sharing the Drive)."""
    from utils import hardware

    doc = read_json(config_path, {}) or {}
    if (doc.get("train") or doc).get("device") == "cpu":
        return "cpu", 1
    return pick_devices(ws, len(hardware.query_gpus()), all_gpus)


def vocoder_config(ws: Workspace, dataset: str, init: str = "", preset: str = "mel-24khz", run: str = "",
                   max_steps: int | None = None, overrides: dict | None = None):
    """The config of a vocoder run: the form's choices, the batch for this machine (with its reason), then
    any explicit `overrides` (CLI flags)."""
    from utils import hardware
    from utils.datasets.manifest import require_usable
    from utils.vocoder.training import VocoderTrainConfig

    if dataset not in ws.list_datasets():
        raise StudioError("Choose a prepared dataset first (Dataset tab)." if not dataset else
                          f"There is no prepared dataset called {dataset!r}; prepare it on the Dataset tab.")
    require_usable(ws, dataset)  # no clip to learn from: refused before a run folder or a queue entry
    gpus = len(hardware.query_gpus())
    cfg = VocoderTrainConfig(dataset=dataset, run=run.strip() or f"{dataset}-vocoder-{time.strftime('%Y%m%d-%H%M%S')}",
                             preset=preset, init=str(ws.inside(init)) if init else None, resume="auto",
                             max_steps=int(max_steps or (hardware.VOCODER_STEPS_GPU if gpus else hardware.VOCODER_STEPS_CPU)),
                             batch_size=16 if gpus else 4)
    cfg.reasons["batch_size"] = ("16 crops of 0.68 s: the Vocos recipe" if gpus else
                                 "4 crops: no GPU here, where the recipe's 16 would make each step minutes long")
    for key, value in (overrides or {}).items():
        if key not in cfg.__dataclass_fields__:
            raise StudioError(f"{key!r} is not a vocoder training setting.")
        setattr(cfg, key, value)
        if key in cfg.reasons:
            cfg.reasons[key] = f"{value}: set by the user"
    return cfg


def start_vocoder_training(ws: Workspace, dataset: str, init: str = "", preset: str = "mel-24khz", run: str = "",
                           max_steps: int | None = None, all_gpus: bool = False, overrides: dict | None = None) -> dict:
    """A Vocos vocoder trained on the dataset's audio (fine-tuned from `init`, a vocoder in the workspace, or
    from scratch at `preset` size), as a job like an acoustic run: same queue, log, Stop and Resume."""
    from utils.vocoder.training import prepare_vocoder_run

    cfg = vocoder_config(ws, dataset, init, preset, run, max_steps, overrides)
    if (ws.run_dir(cfg.run) / "config.json").exists():
        raise StudioError(f"A run called {cfg.run} exists already: resume it from the run list, or pick a new name.")
    config_path = prepare_vocoder_run(ws, cfg)
    return {"run": cfg.run, "max_steps": cfg.max_steps,
            **queue(ws, config_path, all_gpus, trainer_module="utils.vocoder.training")}


def resume_training(ws: Workspace, name: str) -> dict:
    """Start the run again from its own config; the trainer (acoustic or vocoder) continues its newest checkpoint."""
    from utils import jobs

    config_path = ws.run_dir(name) / "config.json"
    if not config_path.exists():
        raise StudioError(f"There is no run called {name}.")
    status = jobs.read_status(ws.run_dir(name))
    # devices picked again: a run begun on 2 GPUs resumes on the one a new runtime has (its batch plan, kept in the
    # checkpoint, is per process), and one begun on GPU 1 of a machine that now has only GPU 0 takes GPU 0
    devices, nproc = run_devices(ws, config_path, all_gpus=int(status.get("nproc") or 1) > 1)
    return {"run": name, **jobs.start(ws, name, config_path, devices=devices, nproc=nproc,
                                      trainer_module=status.get("trainer_module", "utils.training"))}


# ------------------------------------------------------------------------ optimization settings
ASSETS = Path(__file__).resolve().parent.parent / "assets"
MACHINE_SETTINGS = ("device", "precision", "tf32", "attention", "grad_checkpointing", "compile", "fused_adamw",
                    "cudnn_benchmark", "mas", "fp8", "max_frames_per_batch", "grad_accumulation", "num_workers", "pin_memory",
                    "persistent_workers", "prefetch_factor", "length_multiple", "probe", "probe_headroom")
SCHEDULE_SETTINGS = ("max_steps", "lr", "min_lr_ratio", "warmup_steps", "weight_decay", "beta1", "beta2", "grad_clip",
                     "ema_decay", "seed", "log_every", "eval_every", "checkpoint_every", "keep_checkpoints",
                     "eval_clips", "sample_clips", "ode_steps", "mcd", "eval_vocoder", "patience", "on_overfit",
                     "max_bad_steps")


@dataclass
class SettingRow:
    name: str
    value: object  # what a new run will use
    recommended: object  # what this machine would get on "auto"
    reason: str
    help: str
    trade: str
    choices: list | None


def settings_form(ws: Workspace, preset: str = "small", use_saved: bool = True) -> list[SettingRow]:
    """Every trainer setting: the value a new run gets, the machine's recommendation and why, the trade-off.
    use_saved=False: the recommendations alone (what Reset writes; a form while the saved file cannot be read)."""
    import json
    from dataclasses import fields

    from utils.training import TrainConfig
    from utils.training.optimization import resolve

    saved = saved_settings(ws) if use_saved else {}
    # the steps the form shows: the averaged weights' span and whether compiling pays are decided for that many
    cfg = TrainConfig(preset=preset, max_steps=default_steps(ws) if use_saved else recommended_steps()[0])
    machine = resolve(cfg, plan=families.get(cfg.engine).memory_plan(cfg))  # what "auto" means on this machine
    trades = json.loads((ASSETS / "optimization_trades.json").read_text(encoding="utf-8"))
    plain = plain_words()
    meta = {f.name: f for f in fields(TrainConfig)}
    rows = []
    for name in MACHINE_SETTINGS + SCHEDULE_SETTINGS:
        f = meta[name]
        if name in machine.values:
            recommended, reason = machine.values[name], machine.reasons[name]
        elif name == "max_steps":
            recommended, reason = recommended_steps()
        elif name == "eval_every":
            recommended, reason = f.default, (f"fits each run: about {EVALS_PER_RUN} evaluations per run, at least "
                                              f"{MIN_EVAL_GAP} and at most {f.default} steps apart")
        else:
            recommended, reason = f.default, plain.get(name, {}).get("why", "the trainer's default")
        chosen = saved.get(name, "auto" if name in machine.values else recommended)
        value = recommended if chosen == "auto" else chosen
        if name in saved and chosen != "auto":
            reason = f"your choice (recommended here: {recommended}; {reason})"
        choices = f.metadata.get("choices")
        if isinstance(recommended, bool):
            choices = [True, False]
        rows.append(SettingRow(name, value, recommended, reason, f.metadata.get("help", ""), trades.get(name, ""),
                               [c for c in choices if c != "auto"] if choices else None))
    return rows


def recommended_steps() -> tuple[int, str]:
    """(steps, why) for this machine: a GPU trains a full voice, a CPU a first tiny one in under an hour. The
    Optimizations tab shows it and the Training tab's steps box starts from it, so both say the same number."""
    from utils import hardware

    why = plain_words()["max_steps"]
    return (hardware.STEPS_GPU, why["why"]) if hardware.query_gpus() else (hardware.STEPS_CPU, why["why_cpu"])


def default_steps(ws: Workspace) -> int:
    """The Training tab's steps box before the curator types: the Optimizations tab's saved choice, else the
    machine's recommendation (the box sets each run, so it starts where the Optimizations tab says)."""
    try:
        saved = saved_settings(ws)
    except StudioError:
        saved = {}  # the Optimizations tab says what is wrong with the file; the app still starts
    return int(saved.get("max_steps") or recommended_steps()[0])


def plain_words() -> dict:
    """{setting: {"label": what it does in plain words, "why": the reason for a value the hardware does not decide,
    and for max_steps "why_cpu": the reason for the CPU's number}}."""
    return json.loads((ASSETS / "settings_plain.json").read_text(encoding="utf-8"))


def batch_summary(rows: list[SettingRow]) -> str:
    """One line for the Optimizations tab: micro-batch x accumulation = frames per optimizer step (one GPU;
    with every GPU in use the trainer splits the same batch over them)."""
    by_name = {r.name: r for r in rows}
    micro, accum = int(by_name["max_frames_per_batch"].value), int(by_name["grad_accumulation"].value)
    return (f"**Batch per optimizer step:** {micro} frames per micro-batch × {accum} accumulated = "
            f"**{micro * accum} frames**. Why: {by_name['grad_accumulation'].reason}")


def save_form(ws: Workspace, preset: str, values: dict) -> tuple[dict, list[str]]:
    """Keep only what differs from the machine's recommendation (the rest stays "auto", following the
    hardware). Returns the saved settings and one line per change saying what it trades."""
    rows = {r.name: r for r in settings_form(ws, preset)}
    saved, changes = {}, []
    for name, value in values.items():
        row = rows[name]
        if _same(value, row.recommended):
            continue
        saved[name] = _typed(value, row.recommended)
        changes.append(f"**{name}**: {row.recommended} → {saved[name]}. {row.trade}")
    save_settings(ws, saved)
    return saved, changes


def _same(a, b) -> bool:
    try:
        if not isinstance(b, (bool, str)):
            return float(a) == float(b)
    except (TypeError, ValueError):
        pass
    return str(a).strip().lower() == str(b).strip().lower()


def _typed(value, like):
    if isinstance(like, bool):
        return str(value).lower() in ("true", "1", "yes")
    if isinstance(like, int):
        return int(float(value))
    if isinstance(like, float):
        return float(value)
    return value


# ------------------------------------------------------------------------------ the batch probe
PROBE_PREFIX = "probe-"


def start_probe(ws: Workspace, dataset: str, preset: str) -> str:
    """Measure the largest batch that fits: the trainer's own probe, run as a zero-step job."""
    from utils import hardware

    if not hardware.query_gpus():
        raise StudioError("No GPU here: the probe measures GPU memory. On the CPU memory is not the limit, speed "
                          "is; the recommended batch keeps each step to seconds.")
    status = start_training(ws, dataset, preset, run=f"{PROBE_PREFIX}{dataset}-{preset}-{time.strftime('%H%M%S')}",
                            overrides={"probe": "true", "max_frames_per_batch": "auto", "max_steps": 0,
                                       "eval_every": 0})
    return f"Measuring in run {status['run']} ({status['state']}); the result appears here."


def probe_report(ws: Workspace) -> str:
    """The newest probe: its trials and what it settled on."""
    probes = [r for r in run_table(ws) if r["run"].startswith(PROBE_PREFIX)]
    if not probes:
        return ""
    name = probes[0]["run"]
    v = view(ws, name, log_lines=400)
    trials = [line.split("probe: ", 1)[1] for line in v.log.splitlines() if "probe: " in line]
    resolved = (read_json(ws.run_dir(name) / "config.json", {}) or {}).get("resolved", {})
    text = f"**{name}**: {v.status.get('state', '?')}"
    if trials:
        text += "\n\n" + "\n".join(f"- {t}" for t in trials)
    if v.status.get("state") in ("finished", "stopped") and resolved.get("max_frames_per_batch"):
        text += (f"\n\nFits: **{resolved['max_frames_per_batch']} frames per batch** with "
                 f"{resolved.get('grad_accumulation')} accumulation steps. Set it under 'max frames per batch' "
                 "to use it for every run, or leave 'auto' to measure at each start.")
    return text
