"""An MMS voice as one ONNX graph, voice.onnx: token ids -> 16 kHz waveform (transformers' VitsModel.forward traced
by torch's TorchScript exporter, models/onnx_graphs.VitsGraph), its noise scales and length scale as inputs, its
noise drawn by ONNX Runtime. Checked against PyTorch with the noise off (the one deterministic comparison), at the
traced length and at another. utils/inference/onnx_voice.py speaks with it; the text still comes through this
project's normaliser and uroman.

The trace fixes one branch of the relative-position attention: inputs of at least window_size + 2 tokens (6 for the
MMS checkpoints: a sentence of three letters, blanks included), which every sentence of Amharic words has."""
from __future__ import annotations

from pathlib import Path

from utils.events import StudioError

GRAPH = "voice.onnx"


def export_onnx(folder: Path, vocoder, steps: int) -> list[str]:
    """voice.onnx in the exported voice `folder` (`vocoder` and `steps` do not apply: no vocoder, no sampler)."""
    import numpy as np
    import torch

    from models.onnx_graphs import VitsGraph
    from utils.matcha.onnx import _export  # the export and its check against PyTorch, as Matcha's graphs take them
    from utils.mms.speech import load_mms

    speaker, _ = load_mms(folder)
    graph = VitsGraph(speaker.vits).eval()
    silent = (torch.zeros(1), torch.zeros(1), torch.ones(1))  # no noise: ONNX Runtime and torch must then agree
    with torch.no_grad():
        _export(graph, (_tokens(41, speaker.vits),) + silent, folder / GRAPH,
                ["tokens", "noise_scale", "noise_scale_duration", "length_scale"], ["wave", "wave_length"],
                {"tokens": {1: "symbols"}, "wave": {1: "samples"}})
        import onnxruntime as ort  # installed with the studio (requirements.txt); _export checked the traced length

        session = ort.InferenceSession(str(folder / GRAPH), providers=["CPUExecutionProvider"])
        shorter = _tokens(13, speaker.vits)
        want = graph(shorter, *silent)[0].numpy()
        got = session.run(None, {"tokens": shorter.numpy(), "noise_scale": np.zeros(1, np.float32),
                                 "noise_scale_duration": np.zeros(1, np.float32),
                                 "length_scale": np.ones(1, np.float32)})[0]
    if got.shape != want.shape or not float(np.abs(got - want).max()) < 1e-2:
        (folder / GRAPH).unlink(missing_ok=True)
        raise StudioError(f"ONNX export of {GRAPH} does not match PyTorch at another sentence length; the PyTorch "
                          "voice works without it (untick ONNX).")
    return [GRAPH]


def _tokens(n: int, vits):
    """n ids of a sentence: letters between blanks (id 0), as the tokenizer gives them."""
    import torch

    ids = torch.arange(n) % max(2, vits.config.vocab_size - 1) + 1
    ids[0::2] = 0
    return ids[None]
