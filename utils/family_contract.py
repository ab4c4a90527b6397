"""The two contracts of the family seam, as typing.Protocol classes: what a model family package answers the studio
(`Family`, registered in utils/families.py), and what a training adapter answers the loop (`TrainingAdapter`,
driven by utils/training/loop.py). Torch-free: the UI reads the first without importing any model.

    missing(family_module)          # [] or the names a family package lacks; families.get checks each family once
    check_adapter(adapter)          # TypeError naming what an adapter lacks; the loop checks each it drives
    optional(adapter, "forget_step")  # an OPTIONAL adapter member, or None

A family package is a module, so its functions are listed here as they are called (no `self`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol


class Family(Protocol):
    # ---------------------------------------------------------------- what the UI and the CLI show (no torch)
    NAME: str                 # its key in FAMILIES, and the "engine" of its runs' and checkpoints' config.json
    TITLE: str                # its name in sentences ("F5-TTS")
    DESCRIPTION: str          # its choice on the Training tab: what it is, in one line
    GUIDE: str                # when to choose it: the data and machine it is made for, in a few words
    LICENCE: str              # its weights' licence; "" when they are the curator's own
    SHORT_LICENCE: str        # the same in a few words ("CC-BY-NC-4.0"); "" when none
    DICTIONARY_NOTE: str      # what the pronunciation dictionary cannot do for its voices; "" when it does all
    BASE_UPLOAD: str          # the files its base upload box takes; "" when it has none (then no import_base)
    SAMPLE_RATE: int          # of the audio its voices make
    SAMPLE_STEPS: int         # its sampler's usual steps
    STEPS_HELP: str           # the Inference tab's words for the steps box
    USES_STEPS: bool          # the steps box means something to it
    USES_TEMPERATURE: bool    # the temperature box means something to it
    USES_VOCODER: bool        # it makes mels (a vocoder or Griffin-Lim makes the sound); False: its speech is "wave"
    ASKS_LICENCE: bool        # its base's licence needs the curator's yes (then BASE_HELP and SIZE_MB too)
    HAS_SIZES: bool           # the preset (tiny, small, base) is a choice; False: its size is its base's
    ONNX: bool                # export(...) can write ONNX files
    OPTIONS: type             # a dataclass of its own training settings (utils/family_options.py), each with its help

    # ---------------------------------------------------------------- before a run
    def machine_verdict(report) -> tuple[bool, str]: ...         # whether this machine can train it usefully, why
    def base_verdict(ws) -> tuple[bool, str]: ...                # whether its default base can be had here, a line
    def check_request(cfg, report=None) -> None: ...             # refuse what it cannot do (StudioError), first
    def default_init(preset: str) -> str: ...                    # what a run begins from with no checkpoint chosen
    def prepare(ws, cfg, accept_licence: bool = False) -> None:  # settle a new run's start (licence, paths)
        ...
    def memory_plan(cfg) -> Any: ...                             # hardware.MemoryPlan: fixed memory, per-frame cost
    def guidance(ws, cfg) -> list[str]: ...                      # what to expect before Start (hours, time, disk)

    # ---------------------------------------------------------------- training, speech, export
    def train(cfg, report=None) -> dict: ...                     # the run on the loop: its result dict
    def load(folder, device: str = "cpu") -> tuple: ...          # (model with synthesise_batch, config), eval mode
    def tokenizer(config: dict) -> Any: ...                      # its text frontend for speech
    def export(folder, vocoder, steps: int) -> list[str]: ...    # the files an exported voice adds (ONNX), or refuse


class AsksLicence(Protocol):
    """What a family whose ASKS_LICENCE is true answers besides."""
    BASE_HELP: str            # what its base box on the Training tab takes
    SIZE_MB: int              # its base's download, in the licence box's words


class TakesBaseUpload(Protocol):
    """What a family whose BASE_UPLOAD is not "" answers besides."""
    def import_base(ws, files: list) -> Path: ...                # its base from the uploaded files: the folder


class TrainingAdapter(Protocol):
    """What the loop asks of the model it trains (utils/training/loop.py)."""
    # ---------------------------------------------------------------- from construction
    kind: str                 # "acoustic" | "vocoder": its events' and status' kind
    unit: str                 # what one item of a batch is, in the log ("utterance", "crop")
    inference: str            # the name in `modules` of what speaks (its parameters are averaged: EMA)
    oom_advice: str           # what to change when even the smallest micro-batch runs out of memory
    run_dir: Path             # runs/RUN/
    settings: Any             # loop.LoopSettings: the schedule
    machine: Any              # optimization.Machine: device, precision, batch, compile, with reasons

    # ---------------------------------------------------------------- set by build(ctx)
    modules: dict             # name -> nn.Module: everything trained, checkpointed and broadcast
    optimizers: dict          # name -> optimizer
    phases: list              # loop.Phase per optimizer, in the order a step takes them

    def build(self, ctx) -> None: ...                            # model, data, optimizers, phases (loop.Context)
    def start_data(self, step: int) -> None: ...                 # the data from its saved position
    def next_batch(self) -> Any: ...                             # the next batch of the whole step
    def size(self, batch) -> int: ...                            # items in a batch
    def split(self, batch, parts: int) -> list: ...              # a batch as micro-batches (out of memory: more)
    def counts(self, batch) -> dict: ...                         # {"samples", "frames"...} for the throughput
    def progress(self) -> dict: ...                              # e.g. {"epoch"} for metrics
    def lr_at(self, step: int) -> float: ...                     # the schedule's learning rate
    def losses(self, batch, phase: str, step: int) -> dict: ...  # one micro-batch's losses; "loss" is backpropagated
    def evaluate(self, step: int, samples: Path) -> dict: ...    # metrics of the current weights, samples written
    def score(self, metrics: dict) -> float: ...                 # lower is better: picks the best checkpoint
    def describe(self) -> list[str]: ...                         # the settings' lines at the start of the log
    def write_run_config(self) -> None: ...                      # runs/RUN/config.json, resolved with reasons
    def checkpoint_config(self, step: int) -> dict: ...          # a checkpoint's config.json
    def state_dict(self) -> dict: ...                            # its own resumable state (data position, batch)
    def load_state_dict(self, state: dict) -> None: ...
    def upgrade_state(self, state: dict, folder: Path) -> dict:  # an older trainer_state.pt in today's layout
        ...


BUILT = ("modules", "optimizers", "phases")  # TrainingAdapter members that exist only once build(ctx) ran

# What the loop asks only of adapters that have it (read through `optional`), and what it does without.
OPTIONAL = {
    "stop_event": "a threading.Event that stops the run like the Stop button (none: signals and the STOP file)",
    "probe_batch": "probe_batch(frames), probe_unit(), apply_probe(fitted, longest): the measured batch probe "
                   "(none: no probe)",
    "probe_ceiling": "probe_ceiling() -> int: the largest budget worth a probe's try, where probe_batch caps its "
                     "batches (none: what the batch plan can use)",
    "cfg": "its config, whose probe_headroom (the share of the probe's largest batch kept free) the probe reads "
           "(none: 1.0)",
    "compile_targets": "compile_targets() -> [module]: the parts torch.compile compiles in place when the machine "
                       "compiles (none: nothing is compiled)",
    "batch_shapes": "batch_shapes() -> int | None: how many batch shapes a compiled run's data has (utils/training/"
                    "shapes.py), for the status's \"compiling graph k of ~n\" (none: n is not said)",
    "graphs_built": "graphs_built(graphs, seconds): a step built that many compiled graphs in that time (their "
                    "backward passes included), kept for the next run's decision to compile (none: not kept)",
    "stop_data": "stop_data(): end the loader's worker processes as the run ends (none: they end when the adapter "
                 "is collected, which an in-process run's caller may do much later)",
    "forget_step": "forget_step(): drop what is kept between a step's phases, after an out-of-memory",
    "padded_frames": "padded_frames(batch): the frames a batch holds with its padding, what loop.train's test "
                     "faults compare with fault_oom_above_frames (none: its size)",
    "extra_weights": "extra_weights() -> {name: tensor} saved beside the model for speech (F5's prompt)",
    "state_newest_only": "True: only the newest checkpoint keeps the trainer state (large models)",
    "save_checkpoint": "save_checkpoint(folder, weights, config, trainer_state): instead of "
                       "utils.training.checkpoint's (the fault wrapper pauses a save there)",
}


# What the studio asks only of families that have it (read through `family_optional`), and what it does without.
FAMILY_OPTIONAL = {
    "VOICE_FILES": "the files a voice folder carries besides model.safetensors and config.json, which export copies "
                   "(none: nothing else)",
    "auto_settings": "auto_settings(cfg) -> {setting: (value, why)}: what \"auto\" means for the settings no hardware "
                     "decides (lr by model size, blanks), read by utils.training.optimization.resolve (none: the "
                     "default family's, utils/families.py DEFAULT)",
    "CPU_SAMPLE_STEPS": "its sampler's usual steps where speech runs on a CPU, fewer when SAMPLE_STEPS would take "
                        "minutes a sentence there (none: SAMPLE_STEPS)",
    "TRANSFER": "utils.transfer.Measured: what a fine-tune from a base bought over the same model from random weights "
                "in bench/transfer.py, said before Start of a run from a checkpoint (none: nothing measured, nothing "
                "said)",
}


def family_optional(family, name: str, default: Any = None) -> Any:
    """A FAMILY_OPTIONAL member of a family package, or `default` for one without it."""
    assert name in FAMILY_OPTIONAL, f"{name} is not an optional family member"
    return getattr(family, name, default)


def members(protocol: type) -> list[str]:
    """The names a Protocol class declares (annotated attributes and methods), in its order."""
    names = list(protocol.__dict__.get("__annotations__", {}))
    names += [n for n, v in protocol.__dict__.items() if callable(v) and not n.startswith("_")]
    return names


def missing(obj, protocol: type = Family, skip: tuple = ()) -> list[str]:
    """The members of `protocol` that `obj` lacks (a family package: with what its ASKS_LICENCE and BASE_UPLOAD
    add), `skip` aside."""
    needed = members(protocol)
    if protocol is Family:
        needed += members(AsksLicence) if getattr(obj, "ASKS_LICENCE", False) else []
        needed += members(TakesBaseUpload) if getattr(obj, "BASE_UPLOAD", "") else []
    return [n for n in needed if n not in skip and not hasattr(obj, n)]


def check_adapter(adapter, built: bool = False) -> None:
    """Refuse an adapter that lacks a member of TrainingAdapter, naming each (before build(ctx): all but BUILT)."""
    if lacking := missing(adapter, TrainingAdapter, skip=() if built else BUILT):
        raise TypeError(f"{type(adapter).__name__} lacks what the loop asks of a training adapter "
                        f"(utils/family_contract.py): {', '.join(lacking)}.")


def optional(adapter, name: str, default: Any = None) -> Any:
    """An OPTIONAL adapter member, or `default` for an adapter without it."""
    assert name in OPTIONAL, f"{name} is not an optional adapter member"
    return getattr(adapter, name, default)

