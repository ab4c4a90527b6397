"""A model family's own training settings: a dataclass the family declares as OPTIONS (utils/family_contract.py), which
the command line, the Training tab and a run's config.json ("train" -> "options") read from it. What every family
trains with stays in utils.training.TrainConfig; what only some take (Matcha's blanks, F5's reference clip) lives here,
so a setting a family does not take is refused by name instead of ignored. Torch-free, like a family's __init__.

    OPTIONS = declare("mms", mas=MAS())                       # in a family package
    build(family, {"mas": "torch"})                             # its OPTIONS, checked (StudioError names the setting)

A setting that several families take is written once below, so its name, default and help are the same in each.
"""
from __future__ import annotations

from dataclasses import MISSING, field, fields, make_dataclass

from utils.events import StudioError

AUTO = "auto"


def setting(default, help: str, **kw):
    """A dataclass field with its help; `choices`: a list, or a function that returns it when asked."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help, **kw})
    return field(default=default, metadata={"help": help, **kw})


# ------------------------------------------------------------------------------ the settings families share
def PROMPT():
    return setting("", "the dataset row (id) whose clip and transcript the voice speaks from; empty: the training clip "
                       "closest to the family's length (F5 6 s, OmniVoice 8 s)")


def FRONTEND(kinds: tuple = ("phoneme", "char", "bpe")):
    return setting(AUTO, f"model input symbols: {kinds[0]} (auto) | {' | '.join(kinds[1:])}; a checkpoint's own "
                         "table wins", choices=[AUTO, *kinds])


def MAS():
    return setting(AUTO, "monotonic alignment search: triton (one kernel on the GPU) | cython (on the CPU) | torch | "
                         "auto (triton on a CUDA GPU, else cython)", choices=[AUTO, "triton", "cython", "torch"])


def check_prompt(ws, cfg, title: str) -> None:
    """Refuse a reference clip (PROMPT) that names no usable row of the run's dataset, before anything is read."""
    from utils.datasets.manifest import get_rows

    row = cfg.family_options.prompt
    if row and not any(not r.get("excluded") for r in get_rows(ws, cfg.dataset, [row]).values()):
        raise StudioError(f"{title} reference clip {row!r}: dataset {cfg.dataset} has no usable row with that id "
                          "(see the Dataset tab's table; excluded rows cannot be used).")


def declare(family: str, **settings) -> type:
    """The OPTIONS dataclass of `family` from its settings (each a `setting(...)`, e.g. one of those above)."""
    return make_dataclass(f"{family.capitalize()}Options", [(name, object, f) for name, f in settings.items()])


# ------------------------------------------------------------------------------ reading them
def default_of(f):
    return f.default_factory() if f.default_factory is not MISSING else f.default


def owners(name: str) -> list[str]:
    """The TITLEs of the registered families that take the setting `name`."""
    from utils import families

    return [families.get(n).TITLE for n in families.names() if name in names_of(families.get(n))]


def names_of(family) -> list[str]:
    return [f.name for f in fields(family.OPTIONS)]


def build(family, given: dict):
    """`family`'s OPTIONS from the settings `given` (the rest at their defaults). A setting it does not take, or a
    value outside a setting's choices, is refused by name, with the families that do take it."""
    known = {f.name: f for f in fields(family.OPTIONS)}
    for name, value in given.items():
        if name not in known:
            takers = owners(name)
            raise StudioError(f"{family.TITLE} takes no setting {name!r}"
                              + (f" (it is a setting of {' and '.join(takers)})" if takers else "") + ": leave it out.")
        choices = known[name].metadata.get("choices")
        if choices and value not in (choices() if callable(choices) else choices):
            raise StudioError(f"{family.TITLE}'s {name} must be one of {', '.join(map(str, choices))}, not {value!r}.")
    return family.OPTIONS(**given)


def every_option() -> dict:
    """{name: field} of the settings any registered family takes (the command line's flags), each once."""
    from utils import families

    found = {}
    for n in families.names():
        for f in fields(families.get(n).OPTIONS):
            found.setdefault(f.name, f)
    return found


def saved_option(train: dict, name: str, default=None):
    """A setting of a run's config.json "train" section: under "options", or at the top in a config written before
    families declared their options."""
    return (train.get("options") or {}).get(name, train.get(name, default))
