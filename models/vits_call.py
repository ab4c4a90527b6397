"""Call-time settings of transformers' VitsModel (an MMS voice), set the one way every transformers release reads.

VitsModel.forward reads its noise scales and its speed from the model's attributes (noise_scale,
noise_scale_duration, speaking_rate, set from the config in __init__). A `speaking_rate` argument exists only from
transformers 5.3: passed to 4.40-4.57 it is a TypeError, and 5.0-5.2 ignore it. Setting the attributes works on all.
"""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def vits_settings(vits, **values):
    """Set VitsModel attributes (noise_scale, noise_scale_duration, speaking_rate) for one call, then put back the
    ones that were there; None leaves a setting as it is. Values may be tensors (the ONNX tracer's inputs)."""
    values = {k: v for k, v in values.items() if v is not None}
    saved = {k: getattr(vits, k) for k in values}
    for k, v in values.items():
        setattr(vits, k, v)
    try:
        yield vits
    finally:
        for k, v in saved.items():
            setattr(vits, k, v)
