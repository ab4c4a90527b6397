"""What the two GANs trained here share: the discriminators frozen in the generator's phase, and the adversarial
and feature-matching losses. The vocoder (Vocos: hinge losses, means over sub-discriminators) and MMS-TTS (VITS:
least squares, sums, the paper's eq. 6-8) weigh them differently; both take fp32 copies, since under bf16 autocast
the discriminators' outputs are bf16, whose 8-bit mantissa would round sums of many small terms."""
from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def frozen(*modules):
    """Forward passes inside record no gradient for these modules' weights (they still pass gradients to their
    inputs): the generator's loss runs through the discriminators, whose weight gradients its update would
    compute and throw away."""
    params = [p for m in modules for p in m.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


def hinge_discriminator_loss(real: list, fake: list) -> torch.Tensor:
    """The vocoder's: hinge loss, averaged over sub-discriminators."""
    total = 0.0
    for r, f in zip(real, fake):
        total = total + torch.relu(1 - r.float()).mean() + torch.relu(1 + f.float()).mean()
    return total / len(real)


def hinge_generator_loss(fake: list) -> torch.Tensor:
    return sum(torch.relu(1 - f.float()).mean() for f in fake) / len(fake)


def least_squares_discriminator_loss(real: list, fake: list) -> torch.Tensor:
    """VITS's: real logits towards 1, generated ones towards 0, summed over the sub-discriminators."""
    return sum(torch.mean((1 - r.float()) ** 2) + torch.mean(f.float() ** 2) for r, f in zip(real, fake))


def least_squares_generator_loss(fake: list) -> torch.Tensor:
    """VITS's: the generated waveform's logits towards 1, summed over the sub-discriminators."""
    return sum(torch.mean((1 - f.float()) ** 2) for f in fake)


def feature_matching_loss(real_feats: list, fake_feats: list) -> torch.Tensor:
    """Mean absolute difference of the discriminators' activations, summed over layers, averaged over
    sub-discriminators (the vocoder's; VITS's is 2 x the sum over sub-discriminators: `vits_feature_matching`)."""
    total = 0.0
    for rs, fs in zip(real_feats, fake_feats):
        total = total + sum((r.detach().float() - f.float()).abs().mean() for r, f in zip(rs, fs))
    return total / len(real_feats)


def vits_feature_matching(real_feats: list, fake_feats: list) -> torch.Tensor:
    return 2 * len(real_feats) * feature_matching_loss(real_feats, fake_feats)
