"""Plain words for what a run measures, for its log (utils/training/loop.py) and the Training tab's curves alike: the
curator reads "sound detail (cfm)", not "cfm", and "gnorm" or "mcd_ema" said nothing without them."""
from __future__ import annotations

METRICS = {  # what a metric measures, in words; its own name follows in brackets
    "loss": "total", "dur": "sound lengths", "prior": "text fit", "cfm": "sound detail", "lr": "learning rate",
    "samples_per_s": "clips a second", "cer": "letters misheard in the synthesised speech",
    "cer_recorded": "letters misheard in the recordings: the floor",
    "mcd": "distance from the real voice", "mcd_ema": "smoothed model", "mcd_raw": "latest weights",
    "logmel_mcd": "quick estimate", "loss_g": "all parts (GAN)", "loss_d": "the judge (GAN)",
    "loss_kl": "sound matched to the text", "loss_dur": "how long each sound lasts",  # the MMS engine's VITS
    "loss_mel": "distance from the recording", "loss_adv": "fooling the judge", "loss_fm": "sounding real to the judge",
    "gpu_mem_allocated_gb": "in use", "gpu_mem_reserved_gb": "held", "gpu_mem_peak_gb": "peak",
    "grad_norm": "size of the update",
}
WEIGHTS = {"ema": "the smoothed model", "raw": "the latest weights"}  # which an evaluation kept ("weights")


def plain(metric: str) -> str:
    """'sound detail (cfm)': plain words first, the metric's name for whoever wants it; a held-out metric (val_...)
    says so. A metric without words keeps its name."""
    base = metric.removeprefix("val_")
    part = base.removeprefix("grad_norm_")  # a GAN's: one a network ("grad_norm_g")
    words = f"{METRICS['grad_norm']} of {part}" if part != base else METRICS.get(base)
    if words is None:
        return metric
    return f"{'held-out: ' if base != metric else ''}{words} ({metric})"


def said(metric: str, value) -> str:
    """One measure with its unit: an MCD in dB, an error rate in percent, which weights an evaluation kept."""
    if metric == "weights":
        return f"kept {WEIGHTS.get(value, value)} ({metric} {value})"
    if not isinstance(value, (int, float)):
        return f"{plain(metric)} {value}"
    if "mcd" in metric:
        return f"{plain(metric)} {value:.2f} dB"
    if metric.removeprefix("val_") in ("cer", "cer_recorded"):
        return f"{plain(metric)} {value:.0%}"
    return f"{plain(metric)} {value:.4g}"
