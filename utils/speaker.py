"""What a family's speaker gives the studio's Voice (utils/inference) besides `synthesise_batch`: moving, eval mode
and parameters, passed to the model it wraps. F5's, MMS's and OmniVoice's speakers subclass it; F5's and OmniVoice's
add what the prompt beside their model needs."""
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
