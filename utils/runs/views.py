"""What a run has written, shaped for display: log tail, metric series, samples and checkpoints, the run list, one
line on a run's state, and the Training form as the curator last filled it.

Reads only the run's files (metrics.jsonl, status.json, train.log, checkpoints/, samples/), so any
process can show any run: the UI after a restart, a second browser, the CLI.
"""
from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from utils import families
from utils.events import StudioError
from utils.jobs import ACTIVE, ended_by_time_limit, is_check_run, reconcile, tail
from utils.voice_folders import STEP_RE
from utils.workspace import Workspace, read_json, read_jsonl_from

PLOT_POINTS = 200  # per series: enough for a plot a few hundred pixels wide
PROBE_PREFIX = "probe-"  # a batch probe's run name (utils/runs/probe.py): not a run the curator started


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
            parts.append(f"{speed[-1]['samples_per_s']:.1f} clips a second")
        if s.get("last_checkpoint"):
            parts.append(f"last checkpoint `{Path(s['last_checkpoint']).name}`")
        best = s.get("best_checkpoint")
        if best:
            mcd = f", MCD {s['best_mcd']:.2f} dB" if isinstance(s.get("best_mcd"), (int, float)) else ""
            parts.append(f"best checkpoint `{Path(best).name}`{mcd}")
        text = " · ".join(parts)
        if s.get("message") and (state in ("queued", "failed", "stopped", "stopping") or at_work(s)):
            text += f"\n\n{plain_message(s['message'])}"
        if s.get("warning"):
            text += f"\n\n⚠ {s['warning']}"
        if s.get("overfitting"):
            text += f"\n\n⚠ {s['overfitting']}"
        for note in ("precision_note", "compile_note", "start_note"):  # mixed precision or torch.compile failed, the run went on
            if s.get(note):
                text += f"\n\n⚠ {s[note]}"
        return text


def at_work(status: dict) -> str:
    """What a running run is doing before or between its steps ("preparing data", "compiling graph 3 of ~16
    (encoder)"), when that is not plain training: the step counter stands still meanwhile, for minutes. Of a run
    its time limit ended: that it has steps left (finished, yet not done)."""
    message = status.get("message") or ""
    if ended_by_time_limit(status):
        return "its time limit ended it; Resume trains on"
    return message if status.get("state") == "running" and message != "training" else ""


STOPPED = re.compile(r"stopped by request \((.*)\) at step (\d+)$")
STOP_CAUSES = {"the Stop button": "because Stop was pressed", "request": "on request",
               "python app.py stop": "by python app.py stop (the command line)",
               "another rank": "because another process of this run was stopped"}


def plain_message(message: str) -> str:
    """The trainer's words for why it stopped (utils.training.loop: "stopped by request (CAUSE) at step N") said
    once, with the cause it names: a run stopped by Ctrl+C read "Stopped because Stop was pressed ... (stopped by
    request (Ctrl+C in the terminal) at step 50)"."""
    found = STOPPED.match(message)
    if not found:
        return message
    cause, step = found.groups()
    return (f"Stopped {STOP_CAUSES.get(cause, f'by {cause}')}, at step {step}, after saving a checkpoint: Resume "
            "continues from it.")


def format_seconds(seconds: float) -> str:
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def _step_dirs(folder: Path) -> list[tuple[int, Path]]:
    if not folder.exists():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if p.is_dir() and (m := STEP_RE.match(p.name))]
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


def run_table(ws: Workspace) -> list[dict]:
    """One row per run for the run list."""
    from utils.jobs import list_runs

    rows = []
    for r in list_runs(ws):
        doc = read_json(ws.run_dir(r["name"]) / "config.json", {}) or {}
        if is_check_run(ws.run_dir(r["name"]), doc):
            continue
        config = doc.get("train") or doc  # a vocoder run written before its settings moved under "train": flat
        preset = f"vocoder ({config.get('preset', '')})" if doc.get("kind") == "vocoder" else config.get("preset", "")
        if doc.get("kind") != "vocoder" and config.get("engine") in families.names() \
                and not families.get(config["engine"]).HAS_SIZES:
            preset = families.get(config["engine"]).TITLE  # its size is its base's: the family says what it is
        rows.append({
            "run": r["name"], "status": r.get("state", "?"), "step": r.get("step") or 0, "doing": at_work(r),
            "max_steps": r.get("max_steps"), "eta_s": r.get("eta_s") if r.get("state") == "running" else None,
            "dataset": config.get("dataset", ""), "preset": preset,
            "best (val MCD)": (f"{Path(r['best_checkpoint']).name} ({r['best_mcd']:.2f} dB)" if r.get("best_mcd")
                               else Path(r["best_checkpoint"]).name) if r.get("best_checkpoint") else "",
            "val CER": last_cer(ws.run_dir(r["name"])),
            "started": time.strftime("%Y-%m-%d %H:%M", time.localtime(when)) if (when := r.get("created")
                                                                                   or r.get("started")) else "",
        })
    return rows


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


def stopped_words(run_dir: Path, status: dict) -> str:
    """What a stopped run kept: a run taken out of the queue, or stopped before its first save, has no checkpoint
    (the line said one was saved), and Resume starts it from the beginning."""
    saved = [s for s, d in _step_dirs(run_dir / "checkpoints") if (d / "model.safetensors").exists()]
    if saved:
        return f": its last checkpoint (step {saved[-1]}) is saved; Resume continues from it"
    why = (status.get("message") or "").split(";")[0].rstrip(".") or "stopped before its first checkpoint"
    return f": {why}, so nothing was saved; Resume starts it from the beginning"


def state_line(ws: Workspace, name: str) -> str:
    """One line on a run as it is now (status.json, not what a button press said): the Training tab's
    message line follows a run the curator started, resumed or stopped."""
    run_dir = ws.run_dir(name)
    if not run_dir.exists():
        return f"Run **{name}** is gone."
    s, doc = reconcile(run_dir), read_json(run_dir / "config.json", {}) or {}
    config = doc.get("train") or doc  # its settings (a vocoder run's written before they moved under "train": flat)
    state = s.get("state", "unknown")
    line = f"{'Vocoder run' if doc.get('kind') == 'vocoder' else 'Run'} **{name}** ({config.get('max_steps')} steps) "
    line += STATE_WORDS.get(state, state)
    if state in ("running", "stopping", "finished", "stopped") and s.get("step") is not None:
        line += f" · at step {s['step']}"
    if state == "queued" and s.get("message") not in (None, "", "starting"):
        line += f": {s['message']}"
    elif state == "stopped":
        line += stopped_words(run_dir, s)
    elif state == "failed":
        line += ": why is shown under the run below"
    elif ended_by_time_limit(s):  # evaluated and saved; steps left to train
        line += f": its time budget ran out before step {config.get('max_steps')}; Resume trains on from its checkpoint"
    elif state == "finished":  # Resume alone would stop at once (plan_resume)
        line += (f": to train it longer, set {'the vocoder' if doc.get('kind') == 'vocoder' else 'the'} steps above "
                 f"{config.get('max_steps')} and press Resume")
    if config.get("eval_every") and state in ("queued", "running"):
        every = int(config["eval_every"])  # a 40-step vocoder run with the default 500 is checked at its end only
        line += (f" · quality (MCD and samples) checked every {every} steps" if every < int(config.get("max_steps") or 0)
                 else " · quality (MCD and samples) checked at its end")
    return line


def last_choices(ws: Workspace) -> dict:
    """The Training form as the curator last filled it: the active run's choices, else the newest run's (a
    reload shows them again instead of a blank dataset and the default steps). {"train": ..., "vocoder": ...},
    each the config of the newest run of that kind (batch probes left out) with that run's "state", or absent."""
    found = {}
    for r in sorted(run_table(ws), key=lambda r: r["status"] not in ACTIVE):  # stable: newest first within
        if r["run"].startswith(PROBE_PREFIX):
            continue
        doc = read_json(ws.run_dir(r["run"]) / "config.json", {}) or {}
        kind = "vocoder" if doc.get("kind") == "vocoder" else "train"
        config = doc.get("train") or (doc if kind == "vocoder" else None)
        if config and kind not in found:
            status = read_json(ws.run_dir(r["run"]) / "status.json", {}) or {}
            found[kind] = {**config, "all_gpus": (status.get("nproc") or 1) > 1,
                           "init": _relative(ws, config.get("init") or ""), "state": r["status"],
                           "created": status.get("created") or 0.0}
    return found


def _relative(ws: Workspace, path: str) -> str:
    """A run's init (stored absolute) as the form's pickers name it: relative to the workspace."""
    return str(Path(path).relative_to(ws.root)) if path and Path(path).is_relative_to(ws.root) else path
