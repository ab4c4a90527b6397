"""The batch probe: the largest batch that fits this GPU, measured by the trainer's own probe in a zero-step run,
and its report for the Optimizations tab.
"""
from __future__ import annotations

import time

from utils.events import StudioError
from utils.runs.control import start_training
from utils.runs.views import PROBE_PREFIX, run_table, view
from utils.workspace import Workspace, read_json


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
