"""The model families, and the one place that knows them by name.

    from utils import families
    family = families.get("f5")          # its package: everything the studio asks of a model family
    family = families.of(config)         # the family of a checkpoint's or voice's config.json
    model, config = families.load(folder, device)

Adding a family = its package (importable without torch) + one line in FAMILIES. What a family package answers
(CONTRIBUTING.md, "Adding a model family"; utils/matcha is the smallest):
    NAME, TITLE, DESCRIPTION, LICENCE (its weights', "" when none), SHORT_LICENCE, SAMPLE_STEPS, SAMPLE_RATE,
    USES_STEPS, USES_TEMPERATURE, ASKS_LICENCE, ASKS_PROMPT, HAS_SIZES, FINETUNE_MODES, ONNX, STEPS_HELP,
    USES_VOCODER (False: its model makes the waveform itself; its speech carries "wave", no vocoder is loaded),
    GUIDE (when to choose it: the data and machine it is made for, in a few words)
    BASE_HELP (a family that ASKS_LICENCE: what its base box on the Training tab takes)
    DICTIONARY_NOTE (what the pronunciation dictionary can and cannot do for its voices; "" when all of it)
    BASE_UPLOAD (the files its base upload box on the Training tab takes; "" when it has none)
    machine_verdict(report) -> (bool, why)       whether this machine can train it usefully
    base_verdict(ws) -> (bool, line)             whether its default base can be had here, and the line saying it
    import_base(ws, files) -> folder             its base from uploaded files (a family with BASE_UPLOAD)
    check_request(cfg, report=None)              refuse, before anything, what it cannot do (StudioError)
    default_init(preset) -> str                  what a run begins from when no checkpoint is chosen
    prepare(ws, cfg, accept_licence)             settle a new run's start (a base's licence, paths)
    memory_plan(cfg) -> hardware.MemoryPlan      its fixed memory and per-frame cost for the batch guess
    guidance(ws, cfg) -> [str]                   what to expect before Start (hours of data, time, disk)
    train(cfg, report=None) -> dict              the run on the shared engine (utils/training/engine.py)
    load(folder, device) -> (model, config)      a checkpoint or voice, with the Voice's calls (synthesise_batch)
    tokenizer(config)                            its text frontend for speech
    export(folder, vocoder, steps) -> [files]    what an exported voice adds (ONNX), or a refusal
"""
from __future__ import annotations

import importlib
from pathlib import Path

FAMILIES = {"matcha": "utils.matcha", "f5": "utils.f5", "mms": "utils.mms"}  # name -> package, in the UI's order
DEFAULT = "matcha"  # what a checkpoint written before families said nothing of is


def names() -> list[str]:
    return list(FAMILIES)


def get(name: str | None):
    from utils.events import StudioError

    if (name or DEFAULT) not in FAMILIES:
        raise StudioError(f"Unknown model family {name!r}: one of {', '.join(FAMILIES)}.")
    return importlib.import_module(FAMILIES[name or DEFAULT])


def of(config: dict):
    """The family of a checkpoint's config.json (its "engine")."""
    return get((config or {}).get("engine"))


def load(folder, device: str = "cpu"):
    """(model, config) of any family's checkpoint or voice folder, in eval mode on `device`."""
    from utils.events import StudioError
    from utils.training.checkpoint import read_config

    if not (Path(folder) / "model.safetensors").exists():
        raise StudioError(f"{folder} has no model.safetensors.")
    return of(read_config(folder)).load(folder, device)


def verdict(family, ws, report) -> tuple[bool, str]:
    """Whether `family` can train here now, and why: the machine, then its base (one that cannot be had here
    stops it as surely as a missing GPU)."""
    can, why = family.machine_verdict(report)
    ready, line = family.base_verdict(ws)
    return (True, why) if can and ready else (False, why if not can else line)


def machine_lines(report) -> list[str]:
    """One line a family: can this machine train it, and why (`app.py hardware`)."""
    lines = []
    for name in FAMILIES:
        can, why = get(name).machine_verdict(report)
        lines.append(f"{get(name).TITLE} engine: {'yes' if can else 'no'}. {why}")
    return lines


def advice(ws, dataset: str, report) -> list[str]:
    """Which family for this much speech on this machine (the Training tab, before Start): the dataset's hours and
    the machine, then one line a family: its GUIDE, and why not where this machine cannot train it."""
    from utils.datasets.manifest import usable_hours

    hours = usable_hours(ws, dataset)
    gpu = min(report.gpus, key=lambda g: g.memory_gb).name if report.gpus else "no GPU (the CPU trains)"
    amount = f"{hours:.1f} h" if hours >= 1 else f"{hours * 60:.0f} min"
    lines = [f"{amount} of usable speech in {dataset}; this machine: {gpu}."]
    for name in FAMILIES:
        family = get(name)
        can, why = verdict(family, ws, report)
        lines.append(f"**{family.TITLE}**: for {family.GUIDE}." + ("" if can else f" Not on this machine: {why}"))
    return lines
