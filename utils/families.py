"""The model families, and the one place that knows them by name.

    from utils import families
    family = families.get("f5")          # its package: everything the studio asks of a model family
    family = families.of(config)         # the family of a checkpoint's or voice's config.json
    model, config = families.load(folder, device)

Adding a family = its package (importable without torch) + one line in FAMILIES (CONTRIBUTING.md, "Adding a model
family"). What a family package answers, member by member, is the Protocol `Family` in utils/family_contract.py; `get`
checks a package against it the first time it imports it, and refuses one that lacks a member, naming each.
"""
from __future__ import annotations

import importlib
from pathlib import Path

FAMILIES = {"matcha": "utils.matcha", "f5": "utils.f5", "mms": "utils.mms", "omnivoice": "utils.omnivoice"}  # name -> package, in the UI's order
DEFAULT = "matcha"  # what a checkpoint written before families said nothing of is


def names() -> list[str]:
    return list(FAMILIES)


def get(name: str | None):
    """The family's package, checked against the contract the first time it is asked for."""
    from utils.events import StudioError
    from utils.family_contract import missing

    name = name or DEFAULT
    if name not in FAMILIES:
        raise StudioError(f"Unknown model family {name!r}: one of {', '.join(FAMILIES)}.")
    family = importlib.import_module(FAMILIES[name])
    if family not in _checked:
        if lacking := missing(family):
            raise StudioError(f"Model family {name!r} ({FAMILIES[name]}) lacks what every family answers "
                              f"(utils/family_contract.py): {', '.join(lacking)}.")
        _checked.add(family)
    return family


_checked: set = set()  # the packages that passed the contract (a module is hashable)


def of(config: dict):
    """The family of a checkpoint's config.json (its "engine")."""
    return get((config or {}).get("engine"))


def load(folder, device: str = "cpu"):
    """(model, config) of any family's checkpoint or voice folder, in eval mode on `device`."""
    from utils.events import StudioError
    from utils.training.checkpoint import read_config

    if not (Path(folder) / "config.json").exists():
        raise StudioError(f"{folder} has no config.json: it is no checkpoint or voice of this studio.")
    return of(read_config(folder)).load(folder, device)  # each family says what else its folders need


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


SAID_WHEN_PICKED = "what it lacks here, and what to do, is said under the engine choice once it is picked."


def advice(ws, dataset: str, report) -> list[str]:
    """Which family for this much speech on this machine (the Training tab, before Start): the dataset's hours and
    the machine, then one line a family: its GUIDE, and why not where this machine cannot train it. Where the machine
    could but its base cannot be had, the why is left to the line under the engine choice once the family is picked
    (base_panel, beside the box that takes the base's files): said here too, a curator read it twice on one screen."""
    from utils.datasets.manifest import usable_hours

    from utils.training.speed import say_hours

    gpu = min(report.gpus, key=lambda g: g.memory_gb).name if report.gpus else "no GPU (the CPU trains)"
    hours = usable_hours(ws, dataset)
    lines = [f"{say_hours(hours)} of usable speech in {dataset}; this machine: {gpu}."]
    for name in FAMILIES:
        family = get(name)
        can, why = family.machine_verdict(report)
        can, why = (family.base_verdict(ws)[0], SAID_WHEN_PICKED) if can else (False, why)
        lines.append(f"**{family.TITLE}**: for {family.GUIDE}." + ("" if can else f" Not on this machine: {why}"))
    return [*lines, *amount_line(hours), trains_here(ws, report)]


def amount_line(hours: float) -> list[str]:
    """What this much speech can train, where it is little: a curator with one minute read that the engine trained
    here wants "many hours" and was told nothing of what a run of theirs would then be."""
    from utils.training.speed import say_hours

    if hours >= 1.0:
        return []
    if hours < 10 / 60:
        return [f"**How much speech:** {say_hours(hours)} lets a short run check every step from Start to a voice, not "
                "train one worth keeping: training from zero wants hours, a fine-tune of a base that already speaks "
                "tens of minutes (MMS-TTS's recipe: 80-150 clips). Add speech on the Dataset tab before a long run."]
    return [f"**How much speech:** {say_hours(hours)} is enough for a fine-tune of a base that already speaks, not for "
            "training from zero, which wants hours."]


def trains_here(ws, report) -> str:
    """The one line that names engines to use: those that can train on this machine now (its hardware and its base),
    so that no family recommends another that cannot run here."""
    titles = [get(name).TITLE for name in FAMILIES if verdict(get(name), ws, report)[0]]
    return (f"Trains on this machine now: {', '.join(titles)}." if titles else
            "No engine can train on this machine now: each line above says what it lacks.")
