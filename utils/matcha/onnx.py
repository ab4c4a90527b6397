"""A Matcha voice as ONNX graphs: acoustic.onnx (text ids -> mel, the flow's Euler steps unrolled) and vocoder.onnx
(mel -> magnitude + phase, the inverse STFT outside), each checked against PyTorch with ONNX Runtime when installed.
utils/inference/onnx_voice.py speaks with them without torch."""
from __future__ import annotations

from pathlib import Path

from utils.events import StudioError
from utils.onnx_inputs import graph_inputs

ONNX_OPSET = 17


def export_onnx(folder: Path, vocoder, steps: int) -> list[str]:
    """acoustic.onnx (and vocoder.onnx) in `folder`, each checked against PyTorch with ONNX Runtime when
    it is installed. Raises StudioError naming the part that failed."""
    import torch

    from models.onnx_graphs import AcousticGraph, VocoderGraph
    from utils.matcha.checkpoint import load_matcha

    model, _ = load_matcha(folder, device="cpu")
    written = []
    with torch.no_grad():
        tokens = torch.arange(3, 13).reshape(1, -1) % model.cfg.n_symbols
        args = (tokens, torch.zeros(1, dtype=torch.long), torch.zeros(1), torch.ones(1))
        _export(AcousticGraph(model, int(steps)).eval(), args, folder / "acoustic.onnx",
                ["tokens", "speaker", "temperature", "length_scale"], ["mel", "mel_length"],
                {"tokens": {1: "symbols"}, "mel": {2: "frames"}})
        written.append("acoustic.onnx")
        if vocoder is not None:
            mel = torch.randn(1, vocoder.cfg.n_mels, 40) - 5
            _export(VocoderGraph(vocoder.cpu()).eval(), (mel,), folder / "vocoder.onnx", ["mel"],
                    ["magnitude", "phase"], {"mel": {0: "batch", 2: "frames"}, "magnitude": {0: "batch", 2: "frames"},
                                              "phase": {0: "batch", 2: "frames"}})
            written.append("vocoder.onnx")
    return written


def _export(graph, args, path: Path, inputs: list[str], outputs: list[str], axes: dict) -> None:
    import warnings

    import numpy as np
    import torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter warns about traced shapes it handles
            torch.onnx.export(graph, args, str(path), input_names=inputs, output_names=outputs, dynamic_axes=axes,
                              opset_version=ONNX_OPSET, dynamo=False)
    except Exception as exc:  # exporter failures are many types; the user needs the part and the reason
        raise StudioError(f"ONNX export of {path.name} failed ({type(exc).__name__}: {str(exc)[:300]}); "
                          "the PyTorch voice works without it.") from None
    try:
        import onnxruntime as ort
    except ImportError:
        return  # exported but not checked: onnxruntime is optional
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, graph_inputs(session, dict(zip(inputs, (a.numpy() for a in args)))))
    want = graph(*args)
    err = max(float(np.abs(g - w.numpy()).max()) for g, w in zip(got, want) if w.is_floating_point())
    if not err < 1e-2:
        raise StudioError(f"ONNX export of {path.name} does not match PyTorch (max difference {err:.3g}).")
