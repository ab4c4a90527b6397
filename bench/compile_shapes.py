"""How many graphs torch.compile builds per compiled part over whole epochs, before (batches filled up to a frame
budget, frames padded to x64, tokens to x8) and after (a ShapePlan: a few length buckets, utils/training/shapes.py),
and the share of the computed frames that is padding.

    python bench/compile_shapes.py --synthetic-hours 200 --epochs 2           # lengths only, no audio
    python bench/compile_shapes.py --workspace WS --dataset bench --epochs 2  # real clips through the model

Why: static shapes (utils/training/compiled.py) mean one graph per batch shape and part, a minute or more each, and a
part compiles at most MAX_GRAPHS (32); later shapes run eager. `--synthetic-hours` draws clip lengths as a real
200 h set has them (lognormal, median 5.5 s, clipped to 1-20 s; text at --tokens-per-second, spread 15 %) and counts
the distinct (clips, tokens) shapes of the text encoder and (clips, frames) of the decoder, which are those of F5's
transformer too. `--workspace` runs Matcha's `tiny` preset over a real dataset's batches with a backend that counts
each part's graphs and runs them as they are (compilation's cost is not what is measured, its count is).
"""
from __future__ import annotations

import argparse

import common  # bench/common.py: the repository root on sys.path

FRAMES_PER_SECOND = 24000 / 256  # the studio's mels


def synthetic(hours: float, tokens_per_second: float, seed: int = 0) -> tuple[list[int], list[int]]:
    """(frames, tokens) of clips drawn until `hours` of speech: lognormal lengths clipped to 1-20 s."""
    import numpy as np

    rng = np.random.default_rng(seed)
    seconds = []
    while sum(seconds) < hours * 3600:
        seconds += list(np.clip(rng.lognormal(np.log(5.5), 0.6, 10_000), 1.0, 20.0))
    seconds = seconds[:int(np.searchsorted(np.cumsum(seconds), hours * 3600)) + 1]
    frames = [max(1, int(s * FRAMES_PER_SECOND)) for s in seconds]
    tokens = [max(1, round(s * tokens_per_second * x)) for s, x in zip(seconds, rng.lognormal(0, 0.15, len(seconds)))]
    return frames, tokens


def plan_for(frames: list[int], tokens: list[int], max_frames: int, planned: bool):
    from utils.training.shapes import ShapePlan

    return ShapePlan.fit(frames, tokens, max_frames, 64) if planned else None


def shapes(frames: list[int], tokens: list[int], max_frames: int, epochs: int, plan) -> dict:
    """The batches' encoder and decoder shapes in order, and the padding share, as the trainer's sampler and Collate
    make them (no tensors)."""
    from utils.training.batching import FrameBatchSampler, round_up

    sampler = FrameBatchSampler(frames, max_frames, seed=0, length_multiple=64, plan=plan)
    encoder, decoder, computed = [], [], 0
    for epoch in range(epochs):
        for batch in sampler.epoch_batches(epoch):
            if plan is not None:
                bucket = plan.of_batch([frames[i] for i in batch])
                n, t = bucket.tokens, bucket.frames
            else:
                n, t = round_up(max(tokens[i] for i in batch), 8), round_up(max(frames[i] for i in batch), 64)
            encoder.append((len(batch), n))
            decoder.append((len(batch), t))
            computed += len(batch) * t
    return {"batches": len(decoder), "encoder": encoder, "decoder": decoder,
            "padding": 1 - epochs * sum(frames) / computed}


def compiled_share(seen: list, budget: int) -> float:
    """The share of batches whose shape is among the first `budget` distinct ones: those that run compiled."""
    first = []
    for shape in seen:
        if shape not in first and len(first) < budget:
            first.append(shape)
    kept = set(first)
    return sum(shape in kept for shape in seen) / len(seen)


def synthetic_rows(args) -> list[dict]:
    from utils.training.compiled import MAX_GRAPHS

    frames, tokens = synthetic(args.synthetic_hours, args.tokens_per_second)
    print(f"# {len(frames)} clips, {sum(frames) / FRAMES_PER_SECOND / 3600:.1f} h, {args.epochs} epoch(s)", flush=True)
    rows = []
    for max_frames in args.max_frames:
        for name, planned in (("before", False), ("after", True)):
            plan = plan_for(frames, tokens, max_frames, planned)
            got = shapes(frames, tokens, max_frames, args.epochs, plan)
            rows.append({"frames a batch": max_frames, "policy": name, "batches": got["batches"],
                         **{part: len(set(got[part])) for part in ("encoder", "decoder")},
                         **{f"{part} compiled": compiled_share(got[part], MAX_GRAPHS)
                            for part in ("encoder", "decoder")},
                         "padding": got["padding"], "buckets": plan.describe() if plan else "-"})
    return rows


def counted_rows(args) -> list[dict]:
    """Real clips through Matcha `tiny` with a counting backend, each part's graphs counted."""
    import torch

    from models.matcha import MatchaConfig, MatchaTTS
    from utils.training import compiled
    from utils.training.batching import Collate, FrameBatchSampler

    items, dataset, n_symbols, n_speakers = common.training_items(args.workspace, args.dataset)
    frames, tokens = [it.frames for it in items], [len(it.tokens) for it in items]
    print(f"# {len(items)} clips of `{args.dataset}`, {sum(frames) / FRAMES_PER_SECOND / 3600:.2f} h, {args.epochs} "
          "epoch(s)", flush=True)
    rows = []
    for max_frames in args.max_frames:
        for name, planned in (("before", False), ("after", True)):
            plan = plan_for(frames, tokens, max_frames, planned)
            sampler = FrameBatchSampler(frames, max_frames, seed=0, length_multiple=64, plan=plan)
            collate = Collate(64, 8, plan)
            torch._dynamo.reset()
            model = MatchaTTS(MatchaConfig.preset_config("tiny", n_symbols=n_symbols, n_speakers=n_speakers))
            old = dict(compiled.OPTIONS)
            compiled.OPTIONS.update(backend=lambda graph, inputs: graph.forward)
            try:
                parts = compiled.CompiledParts([model.encoder, model.decoder.estimator], ["encoder", "decoder"])
                batches, real, computed = 0, 0, 0
                for epoch in range(args.epochs):
                    for keys in sampler.epoch_batches(epoch):
                        b = collate([dataset[(i, epoch, batches)] for i in keys])
                        with torch.no_grad():
                            model(b["tokens"], b["token_lens"], b["mels"], b["mel_lens"], b["speakers"])
                        batches, computed = batches + 1, computed + b["mels"].shape[0] * b["mels"].shape[-1]
                real = args.epochs * sum(frames)
            finally:
                compiled.OPTIONS.clear()
                compiled.OPTIONS.update(old)
            rows.append({"frames a batch": max_frames, "policy": name, "batches": batches, **parts.graphs_by_part(),
                         "padding": 1 - real / computed, "buckets": plan.describe() if plan else "-"})
            print(rows[-1], flush=True)
    return rows


def summary(rows: list[dict], max_frames: int) -> str:
    """The line that begins `graphs per part:` for one batch budget."""
    def said(r):
        share = (f" (runs compiled: encoder {r['encoder compiled']:.0%} of batches, decoder "
                 f"{r['decoder compiled']:.0%})") if "encoder compiled" in r else ""
        return f"encoder {r['encoder']}, decoder {r['decoder']}{share}, padding {r['padding']:.1%}"

    before, after = (next(r for r in rows if r["frames a batch"] == max_frames and r["policy"] == p)
                     for p in ("before", "after"))
    return f"graphs per part: before {said(before)}; after {said(after)} ({max_frames} frames a batch)"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--synthetic-hours", type=float, help="lengths only: this many hours of lognormal 1-20 s clips")
    p.add_argument("--tokens-per-second", type=float, default=13.0,
                   help="synthetic text length (the espeak-ng corpus has about 13 phoneme symbols a second)")
    p.add_argument("--workspace", help="a workspace whose dataset's real clips run through the model")
    p.add_argument("--dataset", default="bench")
    p.add_argument("--max-frames", type=int, nargs="+", default=[40000], help="frames a batch (40,000: the trainer's)")
    p.add_argument("--epochs", type=int, default=2)
    args = p.parse_args()
    if not (args.synthetic_hours or args.workspace):
        p.error("give --synthetic-hours or --workspace")
    rows = synthetic_rows(args) if args.synthetic_hours else counted_rows(args)
    print()
    print(common.markdown_table([("frames a batch", "frames a batch"), ("policy", "policy"), ("batches", "batches"),
                                 ("encoder", "encoder graphs"), ("decoder", "decoder graphs"),
                                 ("padding", "padding", "{:.1%}"), ("buckets", "buckets (clips x frames)")], rows))
    print()
    for max_frames in args.max_frames:
        print(summary(rows, max_frames))
    print(f"\n`{common.command()}`; {common.machine()['summary']}")


if __name__ == "__main__":
    main()
