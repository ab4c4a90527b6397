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
from utils.omnivoice.about import BATCH_AUDIO_TOKENS, FINE_TUNE_STEPS, FRAMES_PER_S, NEEDS_BASE, PARAMETERS_M

GIB = 1024**3
PARAMS = PARAMETERS_M * 1e6
# fp32 master weights + gradients + AdamW's two moments + the EMA copy: 5 copies of 4 bytes a parameter
TRAIN_FIXED_GB = 5 * 4 * PARAMS / GIB
SPEAK_GB = (3.0, 5.0)                  # inference in half precision with the codec (~3 GB on a T4, community figure)
ACTIVATION_GB_PER_1K_TOKENS = 0.9      # bf16 activations of 28 layers at width 1024 a thousand positions (estimate)
MIN_TRAIN_GB = 14.0                    # a T4's 15 GiB: ~11 GiB of state, short micro-batches with checkpointing
GOOD_MINUTES = 30.0
FLOPS_PER_POSITION = 6 * PARAMS        # forward + backward of 613 M parameters a position (attention aside)
# what a checkpoint writes, bytes a parameter: model.safetensors holds the weights in fp32; trainer_state.pt (the newest
# checkpoint only) holds the model's state again, AdamW's two moments and the EMA copy, all fp32 (training/loop.py)
WEIGHTS_BYTES = 4
STATE_BYTES = 4 * 4
AUDIO_SHARE = 0.85                     # of a step's positions, the audio tokens (the rest: the text and its marks)
# the share of a card's peak its step reaches: the 613 M base at the recipe's 8,192 positions in 0.269 s, bf16, on an
# H100 (bench/RESULTS.md, the second one-call suite; shared): 30,454 positions a second x FLOPS_PER_POSITION / 989
# TFLOPS = 11.3 % (35 % said it 3x too short)
GPU_UTILISATION = 0.113


def machine_verdict(report) -> tuple[bool, str]:
    """Whether this machine can fine-tune the OmniVoice base, and why (it can speak with it on any machine)."""
    if not report.gpus:
        return False, (f"no GPU: a fine-tune of {PARAMETERS_M} M parameters holds about {TRAIN_FIXED_GB:.0f} GiB of "
                       "weights and optimizer state and takes minutes a step on a CPU. Fine-tune on a GPU: a 16 GiB "
                       "T4 at the edge, 24 GiB or more comfortably (an L4, Colab's A100); a clip voice (the Inference "
                       "tab) needs no GPU, only the OmniVoice base. To check the set-up on this CPU anyway, start it "
                       "from the command line with --device cpu.")
    g = min(report.gpus, key=lambda x: x.memory_gb)
    if g.memory_gb < MIN_TRAIN_GB:
        return False, (f"{g.name} has {g.memory_gb:.0f} GiB: fine-tuning holds about {TRAIN_FIXED_GB:.0f} GiB of weights, "
                       f"gradients, AdamW state and the EMA copy before any speech; it speaks from a clip in "
                       f"{SPEAK_GB[0]:.0f}-{SPEAK_GB[1]:.0f} GiB here. Fine-tune on a 16 GiB GPU or larger.")
    left = g.memory_gb - TRAIN_FIXED_GB - 2.0
    tokens = int(left / ACTIVATION_GB_PER_1K_TOKENS * 1000)
    precision = "bf16 + SDPA" if g.bf16 else "fp16 with loss scaling + SDPA (this card has no bf16)"
    batch = (f"the recipe's {BATCH_AUDIO_TOKENS:,} positions a step fit in one micro-batch" if tokens >= BATCH_AUDIO_TOKENS
             else f"room for about {tokens:,} positions a micro-batch ({tokens / FRAMES_PER_S:.0f} s of speech), so the "
                  f"recipe's {BATCH_AUDIO_TOKENS:,} a step come in several (turn on gradient checkpointing if even one "
                  "clip does not fit)")
    return True, (f"{g.name}: about {TRAIN_FIXED_GB:.0f} GiB of weights and optimizer state; {batch} (an estimate, the "
                  f"probe measures it); {precision}")


def check_request(cfg, report=None) -> None:
    """Refuse, before any data is read, what the OmniVoice engine cannot do, saying what to pass instead."""
    if not cfg.init:
        raise StudioError(NEEDS_BASE)
    from utils.omnivoice.base import full_size

    if full_size(cfg.init, cfg.workspace) and str(cfg.device).lower() != "cpu":
        from utils import hardware

        report = report if report is not None else hardware.detect(cfg.workspace or ".")
        can, why = machine_verdict(report)
        if not can:
            raise StudioError(f"This machine cannot fine-tune OmniVoice: {why}")


def prepare(ws, cfg, accept_licence: bool = False) -> None:
    """Settle a new run's start: the base (licence accepted) or a fine-tune to continue; the reference clip exists."""
    from utils.family_options import check_prompt
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
    check_prompt(ws, cfg, "OmniVoice")


def checkpoint_gb(parameters: float = PARAMS) -> tuple[float, float]:
    """(the weights every checkpoint holds, the trainer state the newest holds besides), in GB, of a model of this
    many parameters: from what the training loop saves (a tiny run's files check it)."""
    return WEIGHTS_BYTES * parameters / 1e9, STATE_BYTES * parameters / 1e9


def run_time(ws, max_steps: int, report) -> str:
    """The time a run of `max_steps` updates of the recipe's batch takes here: measured by an OmniVoice run of this
    workspace on this kind of device, else estimated from the card's throughput (no GPU: it is refused here)."""
    from utils.training.speed import Timed, estimated, measured, say_time

    if not report.gpus:
        return "Time: no GPU here, so no fine-tune (a clip voice speaks with no training)."
    per_update = BATCH_AUDIO_TOKENS * AUDIO_SHARE
    speed, source = measured(ws, "omnivoice", "cuda") or estimated(
        report, FLOPS_PER_POSITION / AUDIO_SHARE, GPU_UTILISATION, "the share its step reached on an H100")
    seconds = max_steps * per_update / speed
    return Timed(f"Time: about {say_time(seconds)} for {max_steps:,} updates of {BATCH_AUDIO_TOKENS:,} positions "
                 f"({speed:,.0f} audio frames a second, {source}).", seconds)


def guidance(ws, cfg, report=None) -> list[str]:
    """The licence, the speech against what a fine-tune needs, the time, the memory, the disk."""
    from utils import hardware
    from utils.datasets.manifest import usable_hours
    from utils.omnivoice.about import LICENCE

    report = report if report is not None else hardware.detect(ws.root)
    minutes = usable_hours(ws, cfg.dataset, with_text=True) * 60
    lines = [f"It starts from OmniVoice, under its licences: {LICENCE}."]
    if minutes < GOOD_MINUTES:
        lines.append(f"{minutes:.0f} min of speech: enough to adapt the voice a little (OmniVoice already speaks "
                     f"Amharic); {GOOD_MINUTES:.0f} min or more of one speaker adapts it well. A clip voice (the "
                     "Inference tab) needs no training at all: hear it first.")
    else:
        lines.append(f"{minutes / 60:.1f} h of speech: the published recipe fine-tunes {FINE_TUNE_STEPS[0]:,}-"
                     f"{FINE_TUNE_STEPS[1]:,} steps at lr 1e-5.")
    lines.append(run_time(ws, cfg.max_steps, report))
    # no "~": two of them in one line are Markdown's strikethrough on the Training tab
    lines.append(f"Memory: about {TRAIN_FIXED_GB:.0f} GiB of weights, gradients, AdamW state and the EMA copy before "
                 f"any speech; speaking takes {SPEAK_GB[0]:.0f}-{SPEAK_GB[1]:.0f} GiB.")
    from utils.omnivoice.tokens import BYTES_PER_S

    tokens_mb = minutes * 60 * BYTES_PER_S / 1e6
    weights, state = checkpoint_gb()
    lines.append(f"Disk: each checkpoint holds the model's weights (about {weights:.1f} GB); the newest also keeps "
                 f"what resuming needs (the weights again, AdamW's two moments and the averaged copy: about "
                 f"{state:.1f} GB more, {weights + state:.1f} GB in all). The codec's tokens of "
                 f"the dataset, encoded once at the first run's start, take "
                 f"{f'{tokens_mb:.1f} MB' if tokens_mb >= 0.1 else 'under 0.1 MB'}.")
    return lines
