"""Training the acoustic model (Matcha-TTS style): config, data, loop, checkpoints, optimizations.

    from utils.training import TrainConfig, prepare_run, run, load_checkpoint
    path = prepare_run(TrainConfig(dataset="am", run="r1", preset="tiny", max_steps=200))
    result = run(path)                    # in-process; or: python -m utils.training --config PATH
    model, config = load_checkpoint(result["last_checkpoint"])

The run folder (workspace/runs/RUN/) holds config.json, status.json, train.log, metrics.jsonl,
events/, checkpoints/step-N/ and samples/step-N/ (see utils/training/engine.py; the model: acoustic.py).
"""
from __future__ import annotations

from pathlib import Path

from utils.events import StudioError
from utils.training.config import TrainConfig, read_run_config, write_run_config

__all__ = ["TrainConfig", "prepare_run", "run", "load_checkpoint"]


def prepare_run(cfg: TrainConfig, accept_licence: bool = False) -> Path:
    """Check the names and paths (inside the workspace), pick a run name if none, write
    runs/RUN/config.json; returns its path. `accept_licence`: the curator said yes to the F5 base's licence."""
    import time

    from utils.vocoder.default import resolve
    from utils.workspace import Workspace, check_name

    ws = Workspace.open(cfg.workspace)
    check_name(cfg.dataset, "dataset name")
    if cfg.engine == "f5":
        from utils.f5 import check_request

        check_request(cfg)  # before any run folder or queued job: what the F5 engine cannot do, and what to pass
    if cfg.engine == "f5" and cfg.init:
        from utils.f5.base import local_base

        cfg.init, cfg.licence_accepted = local_base(ws, cfg.init, accept_licence or bool(cfg.licence_accepted))
    elif cfg.init:
        cfg.init = str(ws.inside(cfg.init))
    if cfg.engine == "f5" and cfg.prompt:
        from utils.datasets.manifest import load_manifest

        if cfg.prompt not in {r.get("id") for r in load_manifest(ws, cfg.dataset) if not r.get("excluded")}:
            raise StudioError(f"F5 reference clip {cfg.prompt!r}: dataset {cfg.dataset} has no usable row with that "
                              "id (see the Dataset tab's table; excluded rows cannot be used).")
    if cfg.resume not in ("auto", "none", ""):
        cfg.resume = str(ws.inside(cfg.resume))
    if not cfg.run:
        cfg.run = f"{cfg.dataset}-{time.strftime('%Y%m%d-%H%M%S')}"
    cfg.workspace = str(ws.root)
    cfg.eval_vocoder = resolve(ws, cfg.eval_vocoder)  # "auto" fixed now, not at each resume: one curve, one vocoder
    path = ws.run_dir(cfg.run) / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_run_config(path, cfg)
    return path


def load_checkpoint(path, device: str = "cpu"):
    """(model, config) from a checkpoint folder; imported lazily so the CLI starts without torch."""
    from utils.training.checkpoint import load_checkpoint as load

    return load(path, device=device)


def run(config_path: str | Path, report=None) -> dict:
    """Train from a run config file (what `python -m utils.training --config` does)."""
    cfg, _ = read_run_config(Path(config_path))
    if cfg.engine == "f5":
        from utils.f5.adapter import train
    else:
        from utils.training.acoustic import train
    return train(cfg, report)
