"""Starting, queueing, resuming and deleting runs: the Training tab's and the CLI's way to the job service
(utils/jobs.py), which runs each as its own process on the devices picked here.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path

from utils import families
from utils.events import StudioError
from utils.jobs import ACTIVE, ended_by_time_limit, reconcile
from utils.runs.settings import eval_schedule, saved_settings, saved_time_limit
from utils.workspace import Workspace, atomic_write_json, read_json


def init_choices(ws: Workspace) -> list[str]:
    """What a run can fine-tune from: acoustic checkpoints of earlier runs and exported voices."""
    from utils import inference

    return inference.list_acoustic_checkpoints(ws) + [f"voices/{v}" for v in inference.list_voices(ws)]


def init_labels(ws: Workspace) -> list[tuple[str, str]]:
    """init_choices as (label, value) for a picker, in the Inference tab's words ("run2 · step 150 · best, MCD 8.61
    dB", "abebe (exported voice)"), where the raw paths read as another list of other things."""
    from utils import inference

    voices = set(inference.list_voices(ws))
    return [(label, f"voices/{value}" if value in voices else value) for label, value in inference.voice_choices(ws)]


def start_training(ws: Workspace, dataset: str, preset: str = "small", run: str = "", init: str = "",
                   finetune_mode: str = "full", max_steps: int | None = None, all_gpus: bool = False,
                   overrides: dict | None = None, engine: str = families.DEFAULT, accept_licence: bool = False) -> dict:
    """Write the run's config (saved optimization settings + this form) and hand it to the job service. The F5
    engine starts from the public pretrained base unless a checkpoint or the tiny test size is chosen."""
    from utils.training import prepare_run

    if not dataset:
        raise StudioError("Choose a prepared dataset first (Dataset tab).")
    if dataset not in ws.list_datasets():
        raise StudioError(f"There is no prepared dataset called {dataset!r}; prepare it on the Dataset tab (or "
                          "python app.py prepare).")
    values = dict(overrides or {})
    init = init or families.get(engine).default_init(preset)  # the family's start: from zero, or its base
    values.update(workspace=str(ws.root), dataset=dataset, preset=preset, run=run.strip(), engine=engine,
                  init=init)  # paths are checked by the family's prepare
    if finetune_mode != "full":  # a mode is Matcha's own setting: another family refuses it by name
        values["options"] = {**values.get("options", {}), "finetune_mode": finetune_mode}
    if max_steps:
        values["max_steps"] = int(max_steps)
    refuse_taken_name(ws, values["run"])
    cfg = new_config(ws, values)
    config_path = prepare_run(cfg, accept_licence=accept_licence)
    return {"run": config_path.parent.name, "eval_every": cfg.eval_every, **queue(ws, config_path, all_gpus)}


def new_config(ws: Workspace, values: dict):
    """A new run's TrainConfig: the saved optimization settings (they serve every family: from_dict keeps those of
    a family's own, mas..., that this one takes) under `values`, evaluated about EVALS_PER_RUN times unless chosen.
    Start makes its run of it; the Training tab reckons its time and quality checks from the same."""
    from utils.training import TrainConfig

    saved = saved_settings(ws)
    values = {**saved, **values, **({"options": {**saved["options"], **values.get("options", {})}}
                                    if isinstance(saved.get("options"), dict) else {})}
    cfg = TrainConfig.from_dict(values)
    if "eval_every" not in values:
        cfg.eval_every = eval_schedule(cfg.max_steps, cfg.eval_every)
    return cfg


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
                          f"There is no prepared dataset called {dataset!r}; prepare it on the Dataset tab "
                          "(or python app.py prepare).")
    require_usable(ws, dataset)  # no clip to learn from: refused before a run folder or a queue entry
    gpus = len(hardware.query_gpus())
    cfg = VocoderTrainConfig(dataset=dataset, run=run.strip() or f"{dataset}-vocoder-{time.strftime('%Y%m%d-%H%M%S')}",
                             preset=preset, init=str(ws.inside(init)) if init else None, resume="auto",
                             max_steps=int(max_steps or (hardware.VOCODER_STEPS_GPU if gpus else hardware.VOCODER_STEPS_CPU)),
                             batch_size=16 if gpus else 4,
                             max_minutes=saved_time_limit(ws) or 0.0)  # the Optimizations tab's
    cfg.reasons["batch_size"] = ("16 crops of 0.68 s: the Vocos recipe" if gpus else
                                 "4 crops: no GPU here, where the recipe's 16 would make each step minutes long")
    for key, value in (overrides or {}).items():
        if key not in cfg.__dataclass_fields__:
            raise StudioError(f"{key!r} is not a vocoder training setting.")
        setattr(cfg, key, value)
        if key in cfg.reasons:
            cfg.reasons[key] = f"{value}: set by the user"
    return cfg


def refuse_taken_name(ws: Workspace, run: str, how: str = "resume it from the run list, or pick a new name") -> None:
    """A new run's name in use (one training now, or one finished) is refused, naming its state, rather than its
    settings written over; `how`: what to do instead, in the words of the UI or the command line."""
    from utils.jobs import reconcile

    if run and (ws.run_dir(run) / "config.json").exists():
        status = reconcile(ws.run_dir(run))
        raise StudioError(f"A run called {run} exists already ({status.get('state', 'not started')}, at step "
                          f"{status.get('step') or 0}): {how}.")


def start_vocoder_training(ws: Workspace, dataset: str, init: str = "", preset: str = "mel-24khz", run: str = "",
                           max_steps: int | None = None, all_gpus: bool = False, overrides: dict | None = None) -> dict:
    """A Vocos vocoder trained on the dataset's audio (fine-tuned from `init`, a vocoder in the workspace, or
    from scratch at `preset` size), as a job like an acoustic run: same queue, log, Stop and Resume."""
    from utils.vocoder.training import prepare_vocoder_run

    cfg = vocoder_config(ws, dataset, init, preset, run, max_steps, overrides)
    refuse_taken_name(ws, cfg.run)
    config_path = prepare_vocoder_run(ws, cfg)
    return {"run": cfg.run, "max_steps": cfg.max_steps,
            **queue(ws, config_path, all_gpus, trainer_module="utils.vocoder.training")}


def resume_training(ws: Workspace, name: str, max_steps: int | None = None, extend_unfinished: bool = False,
                    max_minutes: float | None = None) -> dict:
    """Start the run again from its own config; the trainer (acoustic or vocoder) continues its newest checkpoint.
    `max_steps`, `extend_unfinished`, `max_minutes`: see plan_resume."""
    from utils import jobs

    config_path = plan_resume(ws, name, max_steps, extend_unfinished, max_minutes)
    status = jobs.read_status(ws.run_dir(name))
    # devices picked again: a run begun on 2 GPUs resumes on the one a new runtime has (its batch plan, kept in the
    # checkpoint, is per process), and one begun on GPU 1 of a machine that now has only GPU 0 takes GPU 0
    devices, nproc = run_devices(ws, config_path, all_gpus=int(status.get("nproc") or 1) > 1)
    return {"run": name, **jobs.start(ws, name, config_path, devices=devices, nproc=nproc,
                                      trainer_module=status.get("trainer_module", "utils.training"))}


def plan_resume(ws: Workspace, name: str, max_steps: int | None = None, extend_unfinished: bool = False,
                max_minutes: float | None = None) -> Path:
    """The config a resumed run goes on with (its path). A run still training is refused before its config is
    touched. A run that has done its steps trains longer with `max_steps` above them, and without says how, rather
    than starting a trainer that finishes at once. One stopped halfway goes on to its own plan: the Training tab's
    steps box, left at another run's value, must not change it (the command line's --max-steps, said on purpose,
    does: `extend_unfinished`). Never shortens a run. `max_minutes`: the time limit of this start and later ones
    (None: the run's own): a time limit belongs to the session a run trains in (a new Colab session has less time
    left than the one that started it), not to the run."""
    if max_minutes is not None and not float(max_minutes) >= 0:
        raise StudioError(f"max_minutes must be 0 or more, not {max_minutes} (--max-minutes on the command line); "
                          "nothing was started.")
    config_path = ws.run_dir(name) / "config.json" if name else None
    if config_path is None or not config_path.exists():
        raise StudioError(f"There is no run called {name or '(no name given)'}.")
    status = reconcile(ws.run_dir(name))
    if status.get("state") in ACTIVE:
        raise StudioError(f"Run {name} is {status['state']} now (step {status.get('step') or 0}): stop it first; "
                          "its settings were not changed.")
    doc = read_json(config_path, {}) or {}
    plan = doc.get("train", doc)
    if plan.get("dataset") and plan["dataset"] not in ws.list_datasets():  # before the config is touched
        raise StudioError(f"Run {name} trained on dataset {plan['dataset']!r}, which is no longer in this workspace "
                          f"(deleted): prepare the same recordings again under the name {plan['dataset']} to resume "
                          "it. Its checkpoints still speak on the Inference tab; its settings were not changed.")
    planned, done = int(plan.get("max_steps") or 0), int(status.get("step") or 0)
    # finished: every step done, or ended early for good (overfitting); a run its time budget ended trains on
    ended = status.get("state") == "finished" and not ended_by_time_limit(status)
    finished = bool(planned) and (ended or done >= planned)
    longer = bool(max_steps) and int(max_steps) > planned
    if finished and not longer:
        what = f"has done its {planned} steps" if done >= planned else f"finished early, at step {done} of {planned}"
        raise StudioError(f"{name} {what}. To train it longer, set the steps (--max-steps on the command line) above "
                          f"{planned} and resume: it goes on from step {done}.")
    changed = dict(max_steps=int(max_steps)) if longer and (finished or extend_unfinished) else {}
    if max_minutes is not None and float(max_minutes) != float(plan.get("max_minutes") or 0):
        changed["max_minutes"] = float(max_minutes)
    if changed:
        plan.update(changed)
        atomic_write_json(config_path, doc)
    if plan.get("dataset") and doc.get("kind") != "vocoder":  # a vocoder reads no transcript
        from utils.training import read_with_current_dictionary

        read_with_current_dictionary(ws, plan["dataset"], config_path.parent)
    return config_path


def steps_not_taken(ws: Workspace, name: str, asked: int | None) -> str | None:
    """What a resume did with steps it was given that are not the run's plan now, said (None: they are, or none
    were given): a resume never shortens a run, and the Training tab's steps box, which may hold another run's
    number, lengthens only a run that has done its steps."""
    plan = read_json(ws.run_dir(name) / "config.json", {}) or {}
    planned = int((plan.get("train", plan)).get("max_steps") or 0)
    if not asked or not planned or int(asked) == planned:
        return None
    why = ("a resume never shortens a run; to end it sooner, stop it" if int(asked) < planned else
           "a run keeps its plan until it has done its steps; then Resume with more steps trains it on")
    return f"{name} goes on to step {planned}, its own plan, not to {int(asked)}: {why}."


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


DOUBLE_PRESS_S = 5.0  # a second Start this soon after the first, for the same run, is the same wish


def just_started(ws: Workspace, name: str, within_s: float = DOUBLE_PRESS_S) -> bool:
    """Whether run `name` was queued less than `within_s` ago and is still queued or training: a Start pressed
    again now is a double press, not a wish for a second run."""
    run_dir = ws.run_dir(name)
    if not (run_dir / "status.json").exists():
        return False
    status = reconcile(run_dir)
    return status.get("state") in ACTIVE and time.time() - (status.get("created") or 0) < within_s


def training_on(ws: Workspace, dataset: str) -> tuple[str, dict] | None:
    """A run of `dataset` queued or training now (name, status), the transcript check's aligner left out: Start
    pressed again without a new run name (a double click, a reload) queued a second whole run of it."""
    from utils.jobs import is_check_run

    for run_dir in sorted(ws.runs.glob("*/config.json")):
        doc = read_json(run_dir, {}) or {}
        if (doc.get("train") or doc).get("dataset") != dataset or is_check_run(run_dir.parent, doc):
            continue
        if (status := reconcile(run_dir.parent)).get("state") in ACTIVE:
            return run_dir.parent.name, status
    return None


def delete(ws: Workspace, name: str) -> str:
    run_dir = ws.run_dir(name)
    status = reconcile(run_dir) if run_dir.exists() else {}
    if status.get("state") in ACTIVE:
        raise StudioError(f"{name} is {status['state']}: stop it before deleting it.")
    if not run_dir.exists():
        raise StudioError(f"There is no run called {name}.")
    shutil.rmtree(run_dir)
    return f"Deleted run {name}."


def time_ahead(ws: Workspace, cfg, going_on: bool = False) -> list[str]:
    """What a run is told of its time before it trains: its family's guidance for the steps it will take (a run
    going on from a checkpoint, only those after it: a resume at step 292 of 900 said "about 5 min for 900 steps",
    and its 608 took 3.6), and the time limit that may end it sooner (the command line's said nothing of one)."""
    import dataclasses

    from utils.voice_folders import newest_step

    done = (newest_step(ws.run_dir(cfg.run)) or 0) if going_on else 0
    left = dataclasses.replace(cfg, max_steps=max(1, cfg.max_steps - done)) if done else cfg
    lines = ([f"It goes on from step {done:,} of {cfg.max_steps:,}: the time below is of the {left.max_steps:,} "
              "steps left."] if done else []) + families.get(cfg.engine).guidance(ws, left)
    lines += beyond_the_steps(ws, cfg, done, lines)
    if cfg.max_minutes:
        lines.append(f"Time limit: {cfg.max_minutes:g} min: {LIMIT_ENDS}.")
    return lines


def beyond_the_steps(ws: Workspace, cfg, done: int = 0, said: list[str] = ()) -> list[str]:
    """What a run takes besides the steps a family's time counts, said after the family's lines (`said`): the
    loading before its first step, its quality checks (a short CPU run spent ~45 s of 268 on them, which the estimate
    left out), and where all three have a time, their sum, so that a curator need not add three numbers."""
    from utils.training.speed import Timed, say_time

    lines = [line for line in (loading_ahead(ws, cfg), checks_ahead(ws, cfg, done)) if line]
    steps = [line for line in said if isinstance(line, Timed)]
    if steps and all(isinstance(line, Timed) for line in lines):
        total = sum(line.seconds for line in steps + lines)
        lines.append(f"In all: about {say_time(total)} from Start to the run's end.")
    return lines


def loading_ahead(ws: Workspace, cfg) -> str:
    """The time a start of a run of this dataset takes before its first step (data, model, the GPU's batch probe),
    as this dataset's earlier runs of the family took it (metrics' start_s)."""
    from utils.training.speed import Timed, say_time

    timed = _timed(ws, cfg, "start_s")
    if timed is None:
        return (f"Before its first step it loads the data and the model: that time comes on top too (no run of "
                f"{cfg.dataset} here has timed it yet).")
    return Timed(f"Before its first step it loads the data and the model: about {say_time(timed[0])} ({timed[1]}).",
                 timed[0])


def checks_ahead(ws: Workspace, cfg, done: int = 0) -> str | None:
    """The quality checks a run makes after step `done` and their time, where a run of this dataset here timed one."""
    from utils.training.eta import Eta
    from utils.training.loop import LoopSettings
    from utils.training.speed import Timed, say_time

    s = LoopSettings.of_train_config(cfg, ema_decay=0.0)
    n = Eta(s).evaluations_left(done) + int(s.eval_at_start and not done)
    if not n:
        return None
    timed = _timed(ws, cfg, "eval_s")
    checks = f"{n} quality check{'s' if n > 1 else ''} (each speaks the held-out clips, scores them and saves)"
    if timed is None:
        return f"Also {checks}: their time comes on top (no run of {cfg.dataset} here has timed one yet)."
    return Timed(f"Also {checks}: about {say_time(n * timed[0])} more, {say_time(timed[0])} each ({timed[1]}).",
                 n * timed[0])


def _timed(ws: Workspace, cfg, key: str) -> tuple[float, str] | None:
    """A time (metrics' `key`) as this dataset's earlier runs of the family took it on this kind of device."""
    from utils import hardware
    from utils.training.speed import dataset_time

    device = cfg.device if cfg.device in ("cpu", "cuda") else "cuda" if hardware.detect(ws.root).gpus else "cpu"
    return dataset_time(ws, cfg.engine, cfg.dataset, device, key)


# what a time limit does to a run, said before Start (the Training tab) and before a resume or continue
LIMIT_ENDS = ("a run that takes longer ends there with a last quality check and a save, however many steps are left; "
              "Resume trains on")
