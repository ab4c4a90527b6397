"""Training a voice model of any family (utils/families.py): config, data, loop, checkpoints, optimizations.

    from utils.training import TrainConfig, prepare_run, run, load_checkpoint
    path = prepare_run(TrainConfig(dataset="am", run="r1", preset="tiny", max_steps=200))
    result = run(path)                    # in-process; or: python -m utils.training --config PATH
    model, config = load_checkpoint(result["last_checkpoint"])

The run folder (workspace/runs/RUN/) holds config.json, status.json, train.log, metrics.jsonl,
events/, checkpoints/step-N/ and samples/step-N/ (see utils/training/loop.py; each family's adapter says the
rest: utils/matcha/adapter.py for Matcha, utils/f5/adapter.py for F5).
"""
from __future__ import annotations

from pathlib import Path

from utils import families
from utils.events import StudioError
from utils.training.config import TrainConfig, check_settings, read_run_config, write_run_config

__all__ = ["TrainConfig", "prepare_run", "run", "load_checkpoint"]


def _instead(ws, family) -> str:
    """Where this machine refuses the family: the engines that train here now (families.trains_here), else ""."""
    from utils import hardware

    report = hardware.detect(ws.root)
    return "" if family.machine_verdict(report)[0] else families.trains_here(ws, report)


def prepare_run(cfg: TrainConfig, accept_licence: bool = False) -> Path:
    """Check the names and paths (inside the workspace), pick a run name if none, write
    runs/RUN/config.json; returns its path. `accept_licence`: the curator said yes to a pretrained base's licence."""
    import time

    from utils.datasets.manifest import require_usable
    from utils.vocoder.choice import resolve
    from utils.workspace import Workspace, check_name

    ws = Workspace.open(cfg.workspace)
    check_settings(cfg)
    check_name(cfg.dataset, "dataset name")
    family = families.get(cfg.engine)
    try:
        family.check_request(cfg)  # before any run folder or queued job: what the family cannot do, and what to pass
    except StudioError as refused:
        instead = _instead(ws, family)
        if not instead:
            raise
        raise StudioError(f"{refused} {instead}") from refused
    family.prepare(ws, cfg, accept_licence)  # its start settled: a base's licence, paths inside the workspace
    if str(cfg.resume).lower() in ("no", "false", "off"):  # train-vocoder's word for it (--resume no)
        cfg.resume = "none"
    if cfg.resume not in ("auto", "none", ""):
        cfg.resume = str(ws.inside(cfg.resume))
        if not (Path(cfg.resume) / "config.json").is_file():  # refused here, not by the trainer once queued
            raise StudioError(f"--resume {cfg.resume} is not a checkpoint folder (no config.json): give auto, none, "
                              "or a checkpoint folder of a run (runs/RUN/checkpoints/step-N); nothing was started.")
    if not cfg.run:
        cfg.run = f"{cfg.dataset}-{time.strftime('%Y%m%d-%H%M%S')}"
    cfg.workspace = str(ws.root)
    cfg.eval_vocoder = resolve(ws, cfg.eval_vocoder)  # "auto" fixed now, not at each resume: one curve, one vocoder
    path = ws.run_dir(cfg.run) / "config.json"
    require_usable(ws, cfg.dataset)  # a dataset with no clip to learn from is refused before the run folder is made
    path.parent.mkdir(parents=True, exist_ok=True)
    write_run_config(path, cfg)
    read_with_current_dictionary(ws, cfg.dataset, path.parent)
    return path


def read_with_current_dictionary(ws, dataset: str, run_dir: Path) -> None:
    """A run trains on its transcripts as the pronunciation dictionary reads them now: read again (and said in
    its log) when the dictionary changed since."""
    from utils.datasets.curate import read_again_if_stale
    from utils.training.runfiles import note_in_log

    if said := read_again_if_stale(ws, dataset):
        note_in_log(run_dir, said)


def load_checkpoint(path, device: str = "cpu"):
    """(model, config) from a checkpoint or voice folder of any model family."""
    return families.load(path, device)


def run(config_path: str | Path, report=None) -> dict:
    """Train from a run config file (what `python -m utils.training --config` does)."""
    cfg, _ = read_run_config(Path(config_path))
    family = families.get(cfg.engine)
    family.check_request(cfg)  # in the trainer's own process too, of this machine: a run queued elsewhere, resumed here
    return family.train(cfg, report)
