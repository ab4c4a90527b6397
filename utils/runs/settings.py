"""The Optimizations tab's settings: the choices saved for every new run (training_settings.json), the form of every
trainer setting with this machine's recommendation, its reason and its trade-off, and the steps a run starts from.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from utils import families
from utils.events import StudioError
from utils.workspace import Workspace, read_json


def settings_path(ws: Workspace) -> Path:
    """Optimization choices saved from the Optimizations tab; every new run starts from them."""
    return ws.root / "training_settings.json"


def saved_settings(ws: Workspace) -> dict:
    """The Optimizations tab's saved choices. A file that does not parse (edited by hand) is named with the way
    out; it is left as it is, for the curator to fix or to replace with Save / Reset."""
    try:
        saved = read_json(settings_path(ws), {}) or {}
        if not isinstance(saved, dict):
            raise ValueError(f"a {type(saved).__name__}, not settings by name")
    except ValueError as exc:
        raise StudioError(f"{settings_path(ws)} cannot be read ({exc}): fix it by hand, or press Reset to "
                          "recommended on the Optimizations tab to write it anew.") from exc
    return saved


def saved_time_limit(ws: Workspace) -> float | None:
    """The time limit (max_minutes) saved on the Optimizations tab, None where none was saved: every new run takes
    it, and a resume too (it is the session's). A settings file that does not read is said where it is edited."""
    try:
        value = saved_settings(ws).get("max_minutes")
        return None if value is None else float(value)
    except (StudioError, TypeError, ValueError):
        return None


def save_settings(ws: Workspace, settings: dict) -> dict:
    from utils.training import TrainConfig
    from utils.workspace import atomic_write_json

    TrainConfig.from_dict({k: v for k, v in settings.items()})  # unknown names are refused here
    atomic_write_json(settings_path(ws), settings)
    return settings


EVALS_PER_RUN = 6  # a run shows its quality (MCD, samples) this many times, however short
MIN_EVAL_GAP = 50  # steps: each evaluation synthesises held-out clips, which costs a few training steps' time


def eval_schedule(max_steps: int, longest: int) -> int:
    """Steps between evaluations when the curator has not chosen: about EVALS_PER_RUN per run (a 300-step run is
    checked every 50 steps, not once at its end), at least MIN_EVAL_GAP apart, at most `longest` (the default)."""
    return max(MIN_EVAL_GAP, min(longest, -(-max_steps // EVALS_PER_RUN)))


ASSETS = Path(__file__).resolve().parents[2] / "assets"
MACHINE_SETTINGS = ("device", "precision", "tf32", "attention", "grad_checkpointing", "compile", "fused_adamw",
                    "cudnn_benchmark", "mas", "fp8", "max_frames_per_batch", "grad_accumulation", "num_workers", "pin_memory",
                    "persistent_workers", "prefetch_factor", "length_multiple", "probe", "probe_headroom")
SCHEDULE_SETTINGS = ("max_steps", "max_minutes", "lr", "min_lr_ratio", "warmup_steps", "weight_decay", "beta1", "beta2", "grad_clip",
                     "ema_decay", "seed", "log_every", "eval_every", "checkpoint_every", "keep_checkpoints",
                     "eval_clips", "sample_clips", "ode_steps", "mcd", "eval_vocoder", "patience", "on_overfit",
                     "max_bad_steps")


FOLLOWS_STEPS = ("ema_decay",)  # what "auto" makes of these depends on a run's steps, shown for the form's


@dataclass
class SettingRow:
    name: str
    value: object  # what a new run will use
    recommended: object  # what this machine would get on "auto"
    reason: str
    help: str
    trade: str
    choices: list | None


def settings_form(ws: Workspace, preset: str = "small", use_saved: bool = True) -> list[SettingRow]:
    """Every trainer setting: the value a new run gets, the machine's recommendation and why, the trade-off.
    use_saved=False: the recommendations alone (what Reset writes; a form while the saved file cannot be read)."""
    import json
    from dataclasses import fields

    from utils.training import TrainConfig
    from utils.family_options import every_option, owners
    from utils.training.config import choices_of
    from utils.training.optimization import resolve

    saved = saved_settings(ws) if use_saved else {}
    # the steps the form shows: the averaged weights' span and whether compiling pays are decided for that many
    cfg = TrainConfig(preset=preset, max_steps=default_steps(ws) if use_saved else recommended_steps()[0])
    machine = resolve(cfg, plan=families.get(cfg.engine).memory_plan(cfg))  # what "auto" means on this machine
    trades = json.loads((ASSETS / "optimization_trades.json").read_text(encoding="utf-8"))
    plain = plain_words()
    own = every_option()  # mas: Matcha's and MMS's own
    meta = {**{f.name: f for f in fields(TrainConfig)}, **own}
    rows = []
    for name in MACHINE_SETTINGS + SCHEDULE_SETTINGS:
        f = meta[name]
        if name in machine.values:
            recommended, reason = machine.values[name], machine.reasons[name]
            if name in FOLLOWS_STEPS:  # 0.995 here, 0.95 in a 120-step run: not a choice ignored
                reason += "; on auto, each run fits it to its own steps (the Training tab's steps box)"
        elif name == "max_steps":
            recommended, reason = recommended_steps()
        elif name == "eval_every":
            recommended, reason = f.default, (f"fits each run: about {EVALS_PER_RUN} evaluations per run, at least "
                                              f"{MIN_EVAL_GAP} and at most {f.default} steps apart")
        else:
            recommended, reason = f.default, plain.get(name, {}).get("why", "the trainer's default")
        chosen = saved.get(name, "auto" if name in machine.values else recommended)
        value = recommended if chosen == "auto" else chosen
        if name in saved and chosen != "auto":
            reason = f"your choice (recommended here: {recommended}; {reason})"
        choices = choices_of(f)
        if isinstance(recommended, bool):
            choices = [True, False]
        whose = f"{', '.join(owners(name))} only: " if name in own else ""  # a family's own setting says whose
        rows.append(SettingRow(name, value, recommended, reason, whose + f.metadata.get("help", ""), trades.get(name, ""),
                               [c for c in choices if c != "auto"] if choices else None))
    return rows


def recommended_steps() -> tuple[int, str]:
    """(steps, why) for this machine: a GPU trains a full voice, a CPU a first tiny one in under an hour. The
    Optimizations tab shows it and the Training tab's steps box starts from it, so both say the same number."""
    from utils import hardware

    why = plain_words()["max_steps"]
    return (hardware.STEPS_GPU, why["why"]) if hardware.query_gpus() else (hardware.STEPS_CPU, why["why_cpu"])


def recommended_preset() -> str:
    """The model size a run starts at when none is chosen: one a curator can finish here (a GPU trains the full
    model, a CPU only a small one); the Optimizations and Training tabs and the command line say the same."""
    from utils import hardware

    return "base" if hardware.query_gpus() else "tiny"


def default_steps(ws: Workspace) -> int:
    """The Training tab's steps box before the curator types: the Optimizations tab's saved choice, else the
    machine's recommendation (the box sets each run, so it starts where the Optimizations tab says)."""
    try:
        saved = saved_settings(ws)
    except StudioError:
        saved = {}  # the Optimizations tab says what is wrong with the file; the app still starts
    return int(saved.get("max_steps") or recommended_steps()[0])


def steps_saved_after(ws: Workspace, when: float) -> int | None:
    """The steps saved on the Optimizations tab after `when` (a run's start), else None: the Training tab's box
    shows the newer of the two choices, the last run's steps or a number saved since (a reload put the last run's
    back over a save)."""
    path = settings_path(ws)
    try:
        steps = saved_settings(ws).get("max_steps") if path.exists() and path.stat().st_mtime > when else None
    except StudioError:
        return None
    return int(steps) if steps else None


def plain_words() -> dict:
    """{setting: {"label": what it does in plain words, "why": the reason for a value the hardware does not decide,
    and for max_steps "why_cpu": the reason for the CPU's number}}."""
    return json.loads((ASSETS / "settings_plain.json").read_text(encoding="utf-8"))


def batch_summary(rows: list[SettingRow]) -> str:
    """One line for the Optimizations tab: micro-batch x accumulation = frames per optimizer step (one GPU;
    with every GPU in use the trainer splits the same batch over them)."""
    by_name = {r.name: r for r in rows}
    micro, accum = int(by_name["max_frames_per_batch"].value), int(by_name["grad_accumulation"].value)
    return (f"**Batch per optimizer step:** {micro} frames per micro-batch × {accum} accumulated = "
            f"**{micro * accum} frames**. Why: {by_name['grad_accumulation'].reason}")


def save_form(ws: Workspace, preset: str, values: dict) -> tuple[dict, list[str]]:
    """Keep only what differs from the machine's recommendation (the rest stays "auto", following the
    hardware). Returns the saved settings and one line per change saying what it trades."""
    rows = {r.name: r for r in settings_form(ws, preset)}
    saved, changes = {}, []
    for name, value in values.items():
        row = rows[name]
        if _same(value, row.recommended):
            continue
        saved[name] = _typed(value, row.recommended)
        changes.append(f"**{name}**: {row.recommended} (recommended) → {saved[name]}. "
                       f"{row.trade}{_capped(name, saved[name], values)}")
    save_settings(ws, saved)
    return saved, changes


def _capped(name: str, value, values: dict) -> str:
    """What a run does with a chosen value it limits, said when it is saved rather than found in a run's log: the
    warm-up never takes more than a tenth of a run (optimization.warmup_updates)."""
    from utils.training.config import TrainConfig
    from utils.training.optimization import warmup_updates

    if name != "warmup_steps":
        return ""
    steps = int(float(values.get("max_steps") or recommended_steps()[0]))
    used = warmup_updates(TrainConfig(warmup_steps=int(value), max_steps=steps))
    return (f" A run warms up for at most a tenth of its steps: {used} in a {steps}-step run (the Training tab's "
            "steps box sets each run's)." if used < int(value) else "")


def _same(a, b) -> bool:
    try:
        if not isinstance(b, (bool, str)):
            return float(a) == float(b)
    except (TypeError, ValueError):
        pass
    return str(a).strip().lower() == str(b).strip().lower()


def _typed(value, like):
    if isinstance(like, bool):
        return str(value).lower() in ("true", "1", "yes")
    if isinstance(like, int):
        return int(float(value))
    if isinstance(like, float):
        return float(value)
    return value
