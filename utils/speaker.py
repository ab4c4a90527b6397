"""What a family's speaker gives the studio's Voice (utils/inference) besides `synthesise_batch`: moving, eval mode
and parameters, passed to the model it wraps. F5's and OmniVoice's speakers hold their model with a prompt beside
it; they subclass this and add what their prompt needs."""
from __future__ import annotations


class WrappedSpeaker:
    """`self.model`: the wrapped model (an nn.Module)."""

    model = None

    def to(self, device):
        self.model.to(device)
        return self

    def eval(self):
        self.model.eval()
        return self

    def parameters(self):
        return self.model.parameters()
