"""What Matcha decides for itself in training, beside what the hardware decides (utils/training/optimization.py)."""
from __future__ import annotations


def compile_targets(model) -> list:
    """The parts of a Matcha model torch.compile compiles in place: the text encoder and the flow decoder's estimator
    (state_dict keys stay clean; the alignment search, numpy, stays eager)."""
    return [model.encoder, model.decoder.estimator]
