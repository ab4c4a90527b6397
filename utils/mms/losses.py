"""VITS's adversarial losses (least squares, as in the paper's eq. 6-8) and its feature matching, in fp32. The
discriminator's phase and the generator's phase of a step each take one of the two sums below; the weights are the
published fine-tuning recipe's (about.LOSS_WEIGHTS)."""
from __future__ import annotations

import torch

from utils.vocoder.training import feature_matching_loss


def discriminator_loss(real: list, fake: list) -> torch.Tensor:
    """Least squares: real logits towards 1, generated ones towards 0, summed over the sub-discriminators."""
    return sum(torch.mean((1 - r.float()) ** 2) + torch.mean(f.float() ** 2) for r, f in zip(real, fake))


def generator_loss(fake: list) -> torch.Tensor:
    """Least squares: the generated waveform's logits towards 1, summed over the sub-discriminators."""
    return sum(torch.mean((1 - f.float()) ** 2) for f in fake)


def feature_matching(real_features: list, fake_features: list) -> torch.Tensor:
    """VITS's: twice the sum over sub-discriminators and layers of the mean absolute difference of activations.
    The vocoder's loss (utils/vocoder/training.py) is the same sum averaged over sub-discriminators."""
    return 2 * len(real_features) * feature_matching_loss(real_features, fake_features)
