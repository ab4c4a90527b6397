"""What the OmniVoice family refuses and what to expect of it, said before anything is queued or downloaded: can
this machine speak with it and fine-tune it (memory: the model, its gradients, AdamW's two moments and the EMA copy,
estimated from the parameter count), is there enough speech, how long a step takes (measured where a run here
measured it, else the CPU figure of bench/omnivoice_step.py or an estimate from the card's tensor throughput).

Hours: OmniVoice already speaks Amharic (12.8 of its 581k hours), so a fine-tune adapts a voice and an accent
rather than teaching a language: its recipe is 2,000-5,000 steps at lr 1e-5; minutes of one speaker already help,
an hour or more is better (the community's Amharic fine-tune, Lab-et/omnivoice-amharic, used ~331 h).
"""
from __future__ import annotations

from utils.events import StudioError
from utils.omnivoice.about import BATCH_AUDIO_TOKENS, FINE_TUNE_STEPS, FRAMES_PER_S, NEEDS_BASE, PARAMETERS_M, SIZE_MB

GIB = 1024**3
PARAMS = PARAMETERS_M * 1e6
# fp32 master weights + gradients + AdamW's two moments + the EMA copy: 5 copies of 4 bytes a parameter
TRAIN_FIXED_GB = 5 * 4 * PARAMS / GIB
SPEAK_GB = (3.0, 5.0)                  # inference in half precision with the codec (~3 GB on a T4, community figure)
ACTIVATION_GB_PER_1K_TOKENS = 0.9      # bf16 activations of 28 layers at width 1024 a thousand positions (estimate)
MIN_TRAIN_GB = 14.0                    # a T4's 15 GiB: ~11 GiB of state, short micro-batches with checkpointing
CPU_S_PER_STEP_TINY = 0.13             # the tiny base, 1024 positions a step, a 2-core CPU (bench/omnivoice_step.py)
GOOD_MINUTES = 30.0


def machine_verdict(report) -> tuple[bool, str]:
    """Whether this machine can fine-tune the OmniVoice base, and why (it can speak with it on any machine)."""
    if not report.gpus:
        return False, (f"no GPU: a fine-tune of {PARAMETERS_M} M parameters holds ~{TRAIN_FIXED_GB:.0f} GiB of "
                       "weights and optimizer state and takes minutes a step on a CPU. Speak with OmniVoice here from "
                       "a clip (the Inference tab), and fine-tune on a GPU: a 16 GiB T4 at the edge, 24 GiB or more "
                       "comfortably (an L4, Colab's A100); --device cpu runs it anyway, to check the set-up.")
    g = min(report.gpus, key=lambda x: x.memory_gb)
    if g.memory_gb < MIN_TRAIN_GB:
        return False, (f"{g.name} has {g.memory_gb:.0f} GiB: fine-tuning holds ~{TRAIN_FIXED_GB:.0f} GiB of weights, "
                       f"gradients, AdamW state and the EMA copy before any speech; it speaks from a clip in "
                       f"~{SPEAK_GB[0]:.0f}-{SPEAK_GB[1]:.0f} GiB here. Fine-tune on a 16 GiB GPU or larger.")
    left = g.memory_gb - TRAIN_FIXED_GB - 2.0
    tokens = int(left / ACTIVATION_GB_PER_1K_TOKENS * 1000)
    precision = "bf16 + SDPA" if g.bf16 else "fp16 with loss scaling + SDPA (this card has no bf16)"
    tight = (f"; tight: the recipe's {BATCH_AUDIO_TOKENS:,} positions a step come in several micro-batches (turn on "
             "gradient checkpointing if even one clip does not fit)" if tokens < BATCH_AUDIO_TOKENS else "")
    return True, (f"{g.name}: ~{TRAIN_FIXED_GB:.0f} GiB of weights and optimizer state, room for ~{tokens:,} positions "
                  f"a micro-batch (~{tokens / FRAMES_PER_S:.0f} s of speech; an estimate, the probe measures it); "
                  f"{precision}{tight}")


def check_request(cfg, report=None) -> None:
    """Refuse, before any data is read, what the OmniVoice engine cannot do, saying what to pass instead."""
    if cfg.finetune_mode != "full":
        raise StudioError(f"finetune_mode {cfg.finetune_mode} is for Matcha checkpoints; the OmniVoice engine "
                          "fine-tunes the whole model: leave it at full (drop --finetune-mode).")
    if cfg.frontend != "auto":
        raise StudioError(f"OmniVoice reads the Ethiopic letters as written; --frontend {cfg.frontend} is for "
                          "Matcha: drop it.")
    if not cfg.init:
        raise StudioError(NEEDS_BASE)
    from utils.omnivoice.adapter import full_size

    if full_size(cfg.init, cfg.workspace) and str(cfg.device).lower() != "cpu":
        from utils import hardware

        report = report if report is not None else hardware.detect(cfg.workspace or ".")
        can, why = machine_verdict(report)
        if not can:
            raise StudioError(f"This machine cannot fine-tune OmniVoice: {why}")


def prepare(ws, cfg, accept_licence: bool = False) -> None:
    """Settle a new run's start: the base (licence accepted) or a fine-tune to continue; the reference clip exists."""
    from utils.datasets.manifest import get_rows
    from utils.omnivoice.base import is_hub_id, obtainable, refusal, find_base
    from utils.hub import HubUnreachable

    from utils.omnivoice.about import LICENCE
    from utils.voice_folders import resolve_voice

    accepted = accept_licence or bool(cfg.licence_accepted)
    if is_hub_id(cfg.init):
        if find_base(ws) is None:
            ready, why = obtainable(ws)
            if not ready:
                raise HubUnreachable(why)
            if not accepted:
                raise StudioError(refusal())
        cfg.licence_accepted = LICENCE
    elif cfg.init and "/" not in cfg.init and ((ws.voices / cfg.init).is_dir() or (ws.runs / cfg.init).is_dir()):
        cfg.init = str(resolve_voice(ws, cfg.init))  # a fine-tune to continue: its checkpoint folder
    if cfg.prompt and not any(not r.get("excluded") for r in get_rows(ws, cfg.dataset, [cfg.prompt]).values()):
        raise StudioError(f"OmniVoice reference clip {cfg.prompt!r}: dataset {cfg.dataset} has no usable row with "
                          "that id (see the Dataset tab's table; excluded rows cannot be used).")


def guidance(ws, cfg) -> list[str]:
    """The licence, the speech against what a fine-tune needs, the memory, the disk."""
    from utils.datasets.manifest import usable_hours
    from utils.omnivoice.about import LICENCE

    minutes = usable_hours(ws, cfg.dataset, with_text=True) * 60
    lines = [f"It starts from OmniVoice, under its licences: {LICENCE}."]
    if minutes < GOOD_MINUTES:
        lines.append(f"{minutes:.0f} min of speech: enough to adapt the voice a little (OmniVoice already speaks "
                     f"Amharic); {GOOD_MINUTES:.0f} min or more of one speaker adapts it well. A clip voice (the "
                     "Inference tab) needs no training at all: hear it first.")
    else:
        lines.append(f"{minutes / 60:.1f} h of speech: the published recipe fine-tunes {FINE_TUNE_STEPS[0]:,}-"
                     f"{FINE_TUNE_STEPS[1]:,} steps at lr 1e-5.")
    lines.append(f"Memory: ~{TRAIN_FIXED_GB:.0f} GiB of weights, gradients, AdamW state and the EMA copy before any "
                 f"speech; speaking takes ~{SPEAK_GB[0]:.0f}-{SPEAK_GB[1]:.0f} GiB.")
    from utils.omnivoice.tokens import BYTES_PER_S

    lines.append(f"Disk: each checkpoint holds the model's weights (~{SIZE_MB * 0.75 / 1000:.1f} GB); only the newest "
                 f"keeps the trainer state (~{3 * 4 * PARAMS / 1e9:.0f} GB more). The codec's tokens of the dataset, "
                 f"encoded once at the first run's start, take ~{minutes * 60 * BYTES_PER_S / 1e6:.1f} MB.")
    return lines
