"""The training configuration: one dataclass, a help string per field, "auto" resolved with a reason.

`TrainConfig` is what a user (CLI, UI, job service) asks for; `resolve()` turns every "auto" into a
value for this machine using `utils.hardware` and records why, so `runs/<run>/config.json` says
what ran and for what reason.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from utils import families
from utils.events import StudioError
from utils.families import DEFAULT as DEFAULT_FAMILY, names as family_names
from utils.family_options import build as build_options, every_option, setting
from utils.hardware import STEPS_GPU

AUTO = "auto"


_f = setting  # a field with its help; `choices`: a list, or a function that returns it when asked (choices_of)


@dataclass
class TrainConfig:
    # ------------------------------------------------------------------ what to train
    workspace: str = _f("workspace", "workspace folder holding datasets/ and runs/")
    dataset: str = _f("", "dataset name under workspace/datasets")
    run: str = _f("", "run name under workspace/runs")
    preset: str = _f("small", "model size: tiny (3 M parameters, CPU runs), small (10 M), base (21 M)",
                     choices=["tiny", "small", "base"])
    engine: str = _f(DEFAULT_FAMILY, "the model family (utils/families.py): matcha, the small model trained from "
                                     "zero, fast, runs anywhere | f5, fine-tunes a pretrained F5-TTS model (337 M "
                                     "parameters; a GPU; --init), or a tiny random F5 with --preset tiny | mms, "
                                     "fine-tunes Meta's Amharic MMS-TTS voice (VITS, 36 M parameters, 16 kHz; an hour "
                                     "or two of one speaker, any GPU or a CPU; --init) | omnivoice, fine-tunes "
                                     "k2-fsa's OmniVoice (613 M parameters, already speaks Amharic; a GPU; --init)",
                     choices=family_names)  # the registry as it is when asked (choices_of), not at import
    init: str = _f("", "fine-tune from this checkpoint folder (model.safetensors + config.json); with --engine f5: "
                       "a hub base, SWivid/F5-TTS (the public v1 Base) or any F5 model as owner/repo[:folder] (with "
                       "--accept-licence); a folder holding an F5 model file (.safetensors or .pt) and its own "
                       "vocab.txt; or an F5 fine-tune of this studio to continue: a run name, a checkpoint folder or "
                       "an exported voice; with --engine mms: facebook/mms-tts-amh (with --accept-licence), a folder "
                       "holding its files (config.json, model.safetensors, vocab.json, tokenizer_config.json, "
                       "optionally D_100000.pth), or an MMS run or voice to continue; with --engine omnivoice: "
                       "k2-fsa/OmniVoice (with --accept-licence), a folder in the hub's layout, or an OmniVoice run "
                       "or voice to continue")
    licence_accepted: str = _f("", "the licence of the pretrained base the user said yes to (set by --accept-licence or "
                                   "the Training tab's licence box; the trainer downloads the base only then)")
    options: dict = _f({}, "the family's own settings, by name (its OPTIONS, utils/family_options.py: Matcha's blanks, "
                           "F5's reference clip ...); a setting the family does not take is refused")
    resume: str = _f(AUTO, "auto: go on with the run of this name from its newest checkpoint when it exists (as "
                           "--continue); none: start fresh; or a checkpoint folder to start from")
    # ------------------------------------------------------------------ schedule
    max_steps: int = _f(STEPS_GPU, "optimizer steps to train (the Training tab starts from this machine's "
                                   "recommendation: fewer on a CPU)")
    max_minutes: float = _f(0.0, "stop training after this many minutes of this start (data preparation and warm-up "
                                "included) as a finished run: evaluated once more, saved, and resumable for more; 0 = "
                                "no limit. The end's evaluation and save come after it: on Colab, a budget under the "
                                "session's time left keeps the voice when the session ends")
    lr: float | str = _f(AUTO, "peak learning rate (AdamW), or auto: the model size's (tiny 2e-3; small, base 2e-4)")
    min_lr_ratio: float = _f(0.1, "cosine decay ends at lr * this")
    warmup_steps: int = _f(500, "linear warm-up steps from 0 to lr (capped at max_steps / 10)")
    weight_decay: float = _f(0.01, "AdamW decoupled weight decay (not on norms, biases, embeddings)")
    beta1: float = _f(0.9, "AdamW beta1")
    beta2: float = _f(0.99, "AdamW beta2")
    grad_clip: float = _f(5.0, "clip the global gradient norm to this (Matcha uses 5); 0 = off")
    ema_decay: float | str = _f(AUTO, "exponential moving average of the weights, scored beside the raw weights at every "
                                      "evaluation (the better becomes the best checkpoint); 0 = off; auto = fitted "
                                      "to the run: its average spans about a tenth of the run's updates")
    seed: int = _f(1234, "random seed (data order, noise, dropout)")
    # ------------------------------------------------------------------ machine (auto = hardware recommendation)
    device: str = _f(AUTO, "cuda | cpu | mps | auto", choices=[AUTO, "cuda", "cpu", "mps"])
    precision: str = _f(AUTO, "bf16 | fp16 (with a gradient scaler) | fp32 | auto", choices=[AUTO, "bf16", "fp16", "fp32"])
    tf32: str = _f(AUTO, "TF32 matmuls/convolutions on Ampere+ GPUs: true | false | auto")
    attention: str = _f(AUTO, "SDPA kernel for every attention layer: flash | efficient | math | auto",
                        choices=[AUTO, "flash", "efficient", "math"])
    grad_checkpointing: str = _f(AUTO, "recompute each encoder layer / decoder level in backward: true | false | auto")
    compile: str = _f(AUTO, "torch.compile the encoder and decoder: true | false | auto")
    fused_adamw: str = _f(AUTO, "fused AdamW kernel (one launch for all parameters): true | false | auto")
    cudnn_benchmark: str = _f(AUTO, "let cuDNN time convolution algorithms per shape: true | false | auto")
    fp8: str = _f(AUTO, "FP8 matmuls in the Linear layers (torchao float8 training; compute >= 8.9 GPUs with torchao "
                        "installed): true | false | auto (= off: its speed-up is not measured yet)")
    max_frames_per_batch: int | str = _f(AUTO, "mel frames (padded) per micro-batch, or auto")
    grad_accumulation: int | str = _f(AUTO, "micro-batches per optimizer step, or auto")
    num_workers: int | str = _f(AUTO, "DataLoader worker processes, or auto")
    pin_memory: str = _f(AUTO, "page-locked host batches for async GPU copies: true | false | auto")
    persistent_workers: str = _f(AUTO, "keep loader workers alive across iterations: true | false | auto")
    prefetch_factor: int = _f(2, "batches each worker prepares ahead")
    length_multiple: int | str = _f(AUTO, "pad mel lengths to a multiple of this (few shapes -> few recompiles)")
    probe: str = _f(AUTO, "measure the largest batch that fits before training (GPU): true | false | auto")
    probe_headroom: float = _f(0.85, "keep this fraction of the largest batch that fitted")
    # ------------------------------------------------------------------ logging / evaluation / checkpoints
    log_every: int = _f(10, "steps between metric lines")
    eval_every: int = _f(1000, "steps between evaluations (val loss, MCD, audio samples); 0 = only at the end")
    early_evals: str = _f(AUTO, "extra evaluations at these steps, so the first samples come within minutes: auto = "
                                "200, 500 and 1000 where they come before the first scheduled one | none | a list "
                                "such as 100,300")
    checkpoint_every: int = _f(1000, "steps between checkpoints")
    keep_checkpoints: int = _f(3, "newest checkpoints kept (the best by MCD is kept too)")
    eval_clips: int = _f(8, "held-out clips synthesised for MCD at each evaluation (all of them when fewer); the "
                            "best checkpoint is chosen by their mean, so a few clips' luck does not pick it")
    sample_clips: int = _f(2, "of those, how many are written to samples/step-N/ as WAV")
    ode_steps: int = _f(10, "sampler steps at evaluation: Euler steps of the flow decoder (Matcha, F5), decoding "
                            "steps (OmniVoice)")
    mcd: str = _f("world", "world (WORLD/SPTK MCD after Griffin-Lim, as bench numbers) | logmel (fast proxy on mels)",
                  choices=["world", "logmel"])
    eval_vocoder: str = _f("auto", "vocoder for the evaluation MCD and samples, so the curve is what you will hear: "
                                   "auto (the workspace's default, the public Vocos once fetched, else Griffin-Lim; "
                                   "fixed when the run is prepared) | a workspace vocoder (vocoders/NAME or a vocoder "
                                   "run's checkpoint) | griffin-lim")
    patience: int = _f(5, "evaluations without a lower held-out MCD before the run is called overfitting; 0 = never")
    on_overfit: str = _f("warn", "when held-out MCD stops improving for `patience` evaluations: warn (the Training "
                                 "tab says so; the best checkpoint stays marked for export) | stop (end the run there)",
                         choices=["warn", "stop"])
    max_bad_steps: int = _f(5, "consecutive NaN/Inf steps before the run stops with a clear message")
    evaluate: bool = _f(True, "false: no evaluation at all, not even at the end (a throwaway run such as the "
                              "transcript check's aligner)")
    # ------------------------------------------------------------------ fault injection (tests)
    fault_oom_above_frames: int = _f(0, "TEST HOOK: raise out-of-memory for micro-batches above this many frames")
    fault_oom_ranks: list = _f([], "TEST HOOK: only these DDP ranks raise the injected out-of-memory (all if empty)")
    fault_nan_steps: list = _f([], "TEST HOOK: make the loss NaN at these steps")
    fault_pause_checkpoint_step: int = _f(0, "TEST HOOK: the checkpoint of this step waits 10 s half-written "
                                             "(a test kills the trainer there)")

    # -------------------------------------------------------------------------------------
    def __post_init__(self) -> None:
        self.family_options  # a setting the family does not take is refused now, not at first use

    @property
    def family_options(self):
        """The family's OPTIONS dataclass: `options` checked, the rest at the family's defaults."""
        return build_options(families.get(self.engine), self.options)

    def to_dict(self) -> dict:
        """Every setting, the family's own in full (config.json says what ran)."""
        return {**asdict(self), "options": asdict(self.family_options)}

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        """From config.json's "train" (or any dict of settings by name). A family's own setting may also stand at the
        top, as in a config written before families declared their options (or the Optimizations tab's saved
        settings, which serve every family): it is the family's when the family takes it, else left out; given both
        ways, the one by name at the top wins (a config's to_dict() with one setting changed)."""
        known = {f.name for f in fields(cls)}
        own_settings = every_option()
        loose = {k: d[k] for k in set(d) - known if k in own_settings}
        unknown = sorted(set(d) - known - set(loose))
        if unknown:
            raise StudioError(f"unknown training settings: {', '.join(unknown)}")
        own = families.get(d.get("engine")).OPTIONS.__dataclass_fields__
        options = {**(d.get("options") or {}), **{k: v for k, v in loose.items() if k in own}}
        return cls(**{**{k: v for k, v in d.items() if k in known}, "options": options})

    @classmethod
    def help(cls) -> dict[str, str]:
        return {f.name: f.metadata.get("help", "") for f in fields(cls)}


CLI_HIDDEN = ("workspace", "licence_accepted", "options", "evaluate", "fault_oom_above_frames", "fault_oom_ranks", "fault_nan_steps", "fault_pause_checkpoint_step")


def cli_fields():
    """(name, default, help, choices) of every setting the command line exposes: TrainConfig's, then each family's own
    (its help says whose)."""
    from utils.family_options import default_of, owners

    for f in fields(TrainConfig):
        if f.name not in CLI_HIDDEN:
            yield f.name, default_of(f), f.metadata.get("help", ""), choices_of(f)
    for name, f in every_option().items():
        yield name, default_of(f), f"{', '.join(owners(name))}: {f.metadata.get('help', '')}", choices_of(f)


def choices_of(f) -> list | None:
    """A TrainConfig field's choices now: a family registered after this module was imported is one of
    `engine`'s."""
    choices = f.metadata.get("choices")
    return choices() if callable(choices) else choices


def config_from_cli(values: dict, workspace) -> TrainConfig:
    """argparse values -> TrainConfig (numbers given for "auto" fields become ints). A family's own setting goes into
    `options` when it differs from its default, so one the family does not take is refused by name."""
    kw, options, own_settings = {"workspace": str(workspace)}, {}, every_option()
    for name, default, _, _ in cli_fields():
        v = values.get(name, default)
        if v is None:
            v = default
        if isinstance(v, str) and v.isdigit() and name not in ("run", "dataset", "init", "resume", "prompt"):
            v = int(v)
        if name in own_settings:
            options.update({name: v} if v != default else {})
        else:
            kw[name] = v
    return TrainConfig(**kw, options=options)


# the least each count may be: below it a run trained nothing (--max-steps -5 ended "finished" at step 0 and left a
# form that would not load its value) or could not start
LEAST = {"max_steps": 1, "warmup_steps": 0, "log_every": 1, "eval_every": 0, "prefetch_factor": 1,
         "max_frames_per_batch": 1, "grad_accumulation": 1, "num_workers": 0}


SWITCHES = ("tf32", "grad_checkpointing", "compile", "pin_memory", "fused_adamw", "cudnn_benchmark",
            "persistent_workers", "probe", "fp8")  # true | false | auto


def check_settings(cfg: TrainConfig) -> None:
    """Refuse, before a run folder is made, a setting the trainer would refuse once started (a failed run left in the
    list for a typo): a count below its least, a switch that is not true/false/auto, a negative learning rate, a
    negative time limit, a GPU asked for where none is. Each names its setting and flag."""
    def refuse(name: str, what: str):
        raise StudioError(f"{name} {what} (--{name.replace('_', '-')} on the command line); nothing was started.")

    for name, least in {**LEAST, "max_minutes": 0}.items():
        value = getattr(cfg, name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < least:
            refuse(name, f"must be {least} or more, not {value}")
    for name in SWITCHES:
        if getattr(cfg, name) != AUTO:
            try:
                as_bool(getattr(cfg, name), name)
            except StudioError as exc:
                refuse(name, str(exc).removeprefix(name + " "))
    if cfg.lr != AUTO:
        try:
            lr = float(cfg.lr)
        except (TypeError, ValueError):
            refuse("lr", f"must be a number such as 2e-4, or auto, not {cfg.lr!r}")
        if not lr >= 0:  # 0 trains nothing, yet is the way to measure frozen weights
            refuse("lr", f"must be 0 or more, not {cfg.lr}")
    if cfg.device not in (AUTO, "cuda", "cpu", "mps"):
        refuse("device", f"must be auto, cuda, cpu or mps, not {cfg.device!r}")
    if cfg.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            refuse("device", "cuda was asked for but no CUDA GPU is visible here: use cpu or auto")


def write_run_config(path: Path, cfg: TrainConfig, **extra) -> None:
    from utils.workspace import atomic_write_json, read_json

    old = read_json(path, default={}) or {}
    atomic_write_json(path, {**old, "train": cfg.to_dict(), **extra})


def read_run_config(path: Path) -> tuple[TrainConfig, dict]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise StudioError(f"{path}: no such run config") from exc
    return TrainConfig.from_dict(data.get("train", data)), data


def as_bool(value, what: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise StudioError(f"{what} must be true, false or auto, not {value!r}")
