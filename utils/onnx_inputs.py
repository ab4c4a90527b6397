"""Feeding an ONNX graph by its own input names, for every family's exported voice and its export check."""
from __future__ import annotations


def graph_inputs(session, values: dict) -> dict:
    """The values an ONNX graph takes, by its own input names: the exporter drops an input the graph never reads
    (a one-speaker voice has no speaker table, so no `speaker`), and ONNX Runtime refuses a name it does not have."""
    return {i.name: values[i.name] for i in session.get_inputs()}
