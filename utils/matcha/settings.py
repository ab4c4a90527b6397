"""What Matcha decides for itself in training, beside what the hardware decides (utils/training/optimization.py): its
learning rate by size, blanks between symbols, the parts torch.compile compiles."""
from __future__ import annotations

PRESET_LR = {  # (peak learning rate, why) per model size, for lr "auto"
    "tiny": (2e-3, "tiny model, small batches: on a CPU this rate made a clearer voice in 3 minutes than one ten "
                   "times lower (held-out MCD 11.1 against 12.1 dB, measured 2026-11-23)"),
    "small": (2e-4, "the rate Matcha-TTS learns a model this size with, at ~40000 frames per step"),
    "base": (2e-4, "Matcha's scale of rate (1e-4 at batch 32) for the 21M model at ~40000 frames per step"),
}

# decided by an A/B of held-out MCD with and without blanks (bench/time_to_quality.py --ab blanks=true,false)
BLANKS_DEFAULT = (True, "a blank between symbols gives transitions and pauses frames of their own (Matcha-TTS, "
                        "VITS): held-out MCD (the distance to real speech) 5.33 vs 7.06 dB after 1500 steps in the studio's A/B test")


def auto_settings(cfg) -> dict:
    """{setting: (value, why)} for "auto" where no hardware decides: the rate of the model's size, and blanks."""
    return {"lr": PRESET_LR.get(cfg.preset, PRESET_LR["base"]), "blanks": BLANKS_DEFAULT}


def compile_targets(model) -> list:
    """The parts of a Matcha model torch.compile compiles in place: the text encoder and the flow decoder's estimator
    (state_dict keys stay clean; the alignment search, numpy, stays eager)."""
    return [model.encoder, model.decoder.estimator]
