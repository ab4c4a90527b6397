"""How many graphs torch.compile builds for the Matcha parts in real epochs of a dataset, by shape policy.

    python bench/compile_shapes.py --workspace WS --dataset bench            # the GPU suite's espeak-ng corpus
    python bench/compile_shapes.py --workspace WS --dataset bench --max-frames 4000 40000 --epochs 3

Why: the first GPU run died in Inductor while it rebuilt a graph with symbolic sizes for a new batch shape (torch's
default `dynamic=None` compiles the first shape static, then recompiles with dynamic sizes). The trainer now compiles
static shapes only (utils/training/compiled.py) and pads tokens and frames to multiples; this counts the graphs
each policy builds over the trainer's own batches (FrameBatchSampler + Collate, real clips), with a backend that
counts and runs the graph as it is (compilation's cost is not what is measured, its count is), and says how many of
them had symbolic sizes. The model is the `tiny` preset: its shapes are those of every preset.
"""
from __future__ import annotations

import argparse

import common  # bench/common.py: the repository root on sys.path

POLICIES = {  # name: (torch.compile's dynamic, frames multiple, tokens multiple)
    "before (dynamic=None, frames x64, tokens x8)": (None, 64, 8),
    "static, frames x64, tokens x8": (False, 64, 8),
    "after (static, frames x64, tokens x32)": (False, 64, 32),
}


def count(ws, dataset: str, max_frames: int, epochs: int, dynamic, frames_multiple: int, tokens_multiple: int) -> dict:
    import torch

    from models.matcha import MatchaConfig, MatchaTTS
    from utils.training import compiled
    from utils.training.batching import Collate, FrameBatchSampler

    items, dataset_obj, n_symbols, n_speakers = common.training_items(ws, dataset)
    sampler = FrameBatchSampler([it.frames for it in items], max_frames, seed=0, length_multiple=frames_multiple)
    collate = Collate(frames_multiple, tokens_multiple)
    graphs, symbolic = [], 0

    def counting(graph, example_inputs):
        nonlocal symbolic
        graphs.append(graph)
        values = [n.meta.get("example_value") for n in graph.graph.nodes if n.op == "placeholder"]
        symbolic += any(isinstance(v, torch.SymInt) or (torch.is_tensor(v) and any(isinstance(d, torch.SymInt)
                                                                                   for d in v.shape)) for v in values)
        return graph.forward

    torch._dynamo.reset()
    model = MatchaTTS(MatchaConfig.preset_config("tiny", n_symbols=n_symbols, n_speakers=n_speakers))
    old = dict(compiled.OPTIONS)
    compiled.OPTIONS.update(backend=counting, dynamic=dynamic)
    try:
        compiled.CompiledParts([model.encoder, model.decoder.estimator], ["encoder", "decoder"])
        batches, shapes = 0, set()
        per_epoch = sampler.batches_per_epoch()
        for keys in iter(sampler):
            if batches >= epochs * per_epoch:
                break
            b = collate([dataset_obj[k] for k in keys])
            shapes.add((tuple(b["tokens"].shape), tuple(b["mels"].shape)))
            with torch.no_grad():
                model(b["tokens"], b["token_lens"], b["mels"], b["mel_lens"], b["speakers"])
            batches += 1
    finally:
        compiled.OPTIONS.clear()
        compiled.OPTIONS.update(old)
    return {"batches": batches, "shapes": len(shapes), "graphs": len(graphs), "symbolic": symbolic}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workspace", required=True)
    p.add_argument("--dataset", default="bench")
    p.add_argument("--max-frames", type=int, nargs="+", default=[4000, 40000], help="frames a batch (CPU-, GPU-sized)")
    p.add_argument("--epochs", type=int, default=2)
    args = p.parse_args()
    rows = []
    for max_frames in args.max_frames:
        for name, (dynamic, frames_multiple, tokens_multiple) in POLICIES.items():
            got = count(args.workspace, args.dataset, max_frames, args.epochs, dynamic, frames_multiple,
                        tokens_multiple)
            rows.append({"frames a batch": max_frames, "policy": name, **got})
            print(rows[-1], flush=True)
    print()
    print(f"{args.epochs} epoch(s) of `{args.dataset}`; graphs = graphs compiled for the encoder and the decoder "
          "(forward); symbolic = graphs with symbolic sizes (the kind Inductor failed on)")
    print("| frames a batch | policy | batches | distinct batch shapes | graphs | symbolic |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['frames a batch']} | {r['policy']} | {r['batches']} | {r['shapes']} | {r['graphs']} | "
              f"{r['symbolic']} |")


if __name__ == "__main__":
    main()
