"""Conditional flow matching (optimal-transport path) around a vector-field estimator.

Training: t ~ U[0, 1] per utterance, x0 ~ N(0, I), x1 = target (normalised mel);
x_t = (1 - (1 - s) t) x0 + t x1, target velocity u = x1 - (1 - s) x0, s = sigma_min = 1e-4;
loss = masked MSE(v(x_t, t | mu), u) per element (u masked too, unlike the reference code).
Synthesis: fixed-step Euler from x0 = temperature * N(0, I) over n_steps.
"""
from __future__ import annotations

import torch
import torch.nn as nn


class FlowMatching(nn.Module):
    def __init__(self, estimator: nn.Module, sigma_min: float = 1e-4):
        super().__init__()
        self.estimator = estimator
        self.sigma_min = sigma_min

    def loss(self, x1: torch.Tensor, mask: torch.Tensor, mu: torch.Tensor, spk: torch.Tensor | None,
             padded: bool = True) -> torch.Tensor:
        """x1, mu: [B, F, T]; mask [B, 1, T] -> scalar loss."""
        b = x1.shape[0]
        t = torch.rand(b, device=x1.device, dtype=x1.dtype)  # [B]
        x0 = torch.randn_like(x1)
        tt = t[:, None, None]
        xt = (1 - (1 - self.sigma_min) * tt) * x0 + tt * x1
        u = (x1 - (1 - self.sigma_min) * x0) * mask
        v = self.estimator(xt, mask, mu, t, spk, padded)
        return ((v.float() - u.float()) ** 2).sum() / (mask.sum() * x1.shape[1])

    @torch.no_grad()
    def sample(self, mu: torch.Tensor, mask: torch.Tensor, n_steps: int, temperature: float = 1.0,
               spk: torch.Tensor | None = None, generator: torch.Generator | None = None,
               noise: torch.Tensor | None = None) -> torch.Tensor:
        """mu [B, F, T], mask [B, 1, T] -> sample [B, F, T] in normalised-mel space. `noise` [B, F, T]: the standard
        normal start, when the caller drew it (a window of a longer utterance's); else drawn here."""
        if noise is None:
            noise = torch.randn(mu.shape, device=mu.device, dtype=mu.dtype, generator=generator)
        x = noise * temperature
        padded = not bool(mask.all())
        dt = 1.0 / n_steps
        for i in range(n_steps):
            t = torch.full((mu.shape[0],), i * dt, device=mu.device, dtype=mu.dtype)
            x = x + dt * self.estimator(x, mask, mu, t, spk, padded)
        return x * mask
