"""Whether torch.compile pays for a run (`compile: auto`): the graphs it will build times what one costs on this
machine, against its steps times what a compiled step saves. Where its kernels are kept (Inductor's cache in the
workspace), so that a resume or a new Colab session of the same shapes reuses them.

Why: `auto` compiled every run of 2,000 steps or more on any Linux GPU of compute 7.0, a Colab T4 with 2 CPU cores
included, reasoned from one batch shape; a real dataset's batches then needed ~32 graphs at 1-3 minutes each, paid
again in every new Colab session (issue 57). A run now has at most BUCKETS shapes per part (utils/training/shapes.py),
and the cost of a graph is Inductor's CPU work, so the CPU cores count.

The figures (bench/RESULTS.md; estimates until a GPU run measures them again):
- a graph (one part's forward and backward) costs ~45 s on 16 cores: Matcha small's first step took 77 s for its two
  parts on an H100, `base` 109 s warm-up on an H200; Inductor's work spreads over the cores, roughly as their square
  root (a 2-core CPU took 103 s for `tiny`'s first step); a warm cache cuts it to about a quarter (on a 2-core CPU
  `tiny`'s first step took 241 s cold and 26 s with the kernels in the workspace cache: bench/compile_cache.py; the
  quarter stays until a GPU run measures its own).
- a compiled step saves ~45 % of an eager one (`base`, 16,000 frames: 83.0 -> 38.9 ms on an H100, 110.7 -> 58.5 ms on
  an H200), and an eager `base` step costs ~4.6 us a frame on an H200 (185.9 ms at 40,000 frames, bf16), scaled by
  the card's tensor throughput and the model's activation size (its MemoryPlan's frame_factor).
"""
from __future__ import annotations

import math
import os
from pathlib import Path

from utils.workspace import append_jsonl_rows, read_jsonl

GRAPH_S_16_CORES = 45.0       # seconds a graph costs on 16 CPU cores, cache cold
WARM_SHARE = 0.25             # of that, once Inductor's cache in the workspace holds kernels
SAVED_SHARE = 0.45            # of an eager step's time that a compiled step saves
EAGER_S_PER_FRAME = 185.9e-3 / 40_000  # Matcha base, bf16 eager, on an H200
REFERENCE_TFLOPS = 989.0      # the H200's dense half-precision tensor throughput (utils/training/speed.py)
PAYS_MARGIN = 1.5             # the saving must be this many times the cost: the figures are estimates
MOST_PARTS = 2                # compiled parts of a model before its family says (Matcha: 2; F5's DiT: 1)
CACHE = Path("cache") / "inductor"  # in the workspace, beside the runs: Google Drive keeps it between sessions
RECORD = Path("cache") / "compile_seconds.jsonl"  # what each graph cost to build, on which machine
MIN_GRAPH_S = 0.1              # a graph's least cost: records are rounded to 0.1 s, and a 0.0 divided the saving
MEASURED = 16                 # the last this many graphs of a machine make its measured cost


def cache_dir(workspace: str | Path) -> Path:
    return Path(workspace) / CACHE


def warm(workspace: str | Path) -> bool:
    """Whether an earlier compiled run of this workspace left kernels in its Inductor cache."""
    folder = cache_dir(workspace)
    return folder.is_dir() and any(p.is_file() for p in folder.rglob("*"))


def keep_kernels_in(workspace: str | Path) -> Path:
    """Inductor's cache in the workspace, for the compilations of this process (before the first one). Triton's
    GPU kernels go under it too: Inductor puts them in TRITON_CACHE_DIR once it is set (by the first compilation
    of the process, or the user's environment), else under its own cache, one folder per GPU."""
    folder = cache_dir(workspace)
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder.resolve())
    os.environ.pop("TRITON_CACHE_DIR", None)
    return folder


def machine_key(report) -> str:
    """The kind of machine a graph's cost was measured on: its GPUs and CPU cores."""
    gpus = ", ".join(sorted({g.name for g in report.gpus})) or "CPU"
    return f"{gpus}; {report.cpu_count} cores"


def remember(workspace: str | Path, key: str, seconds: float, is_warm: bool) -> None:
    """What a graph cost to build here, for the next run's decision (the first compile of a run times it)."""
    append_jsonl_rows(Path(workspace) / RECORD, [{"machine": key, "warm": is_warm, "seconds": round(seconds, 1)}])


def graph_seconds(workspace: str | Path | None, key: str, cores: int, is_warm: bool) -> tuple[float, str]:
    """(seconds a graph costs, where the figure comes from): the mean of the last graphs built on this kind of
    machine in this workspace, cache as warm or cold as now; else the estimate from the CPU cores."""
    rows = [r for r in read_jsonl(Path(workspace) / RECORD) if r.get("machine") == key
            and r.get("warm") == is_warm][-MEASURED:] if workspace else []
    if rows:
        return sum(r["seconds"] for r in rows) / len(rows), f"measured by {len(rows)} earlier graph(s) here"
    estimate = GRAPH_S_16_CORES * math.sqrt(16 / max(1, cores)) * (WARM_SHARE if is_warm else 1.0)
    return estimate, f"estimated for {cores} CPU core(s)" + (", kernels of an earlier run in the workspace cache"
                                                             if is_warm else "")


def step_seconds(tflops: float, frames: int, frame_factor: float) -> float:
    """An eager optimizer step of `frames` padded frames (every micro-batch of the step) on a card of `tflops`."""
    return frames * EAGER_S_PER_FRAME * REFERENCE_TFLOPS / tflops * frame_factor


def verdict(graphs: int, steps: int, graph_s: float, graph_source: str, step_s: float,
            limit_s: float = 0.0) -> tuple[bool, str]:
    """(compile, why in plain words with the numbers). `steps`: those the run has left to train; `limit_s`: its time
    limit (0: none), which leaves time for only so many eager steps: within T seconds compiled steps outnumber eager
    ones exactly when T x SAVED_SHARE is more than the graphs' cost, the comparison below with the steps capped."""
    graph_s = max(graph_s, MIN_GRAPH_S)
    limited = bool(limit_s) and step_s > 0 and limit_s / step_s < steps
    if limited:
        steps = int(limit_s / step_s)
    cost, saved_per_step = max(1, graphs) * graph_s, step_s * SAVED_SHARE
    saved = steps * saved_per_step
    pays_from = math.ceil(PAYS_MARGIN * cost / saved_per_step) if saved_per_step > 0 else math.inf
    numbers = (f"{graphs} graph(s) to build at ~{graph_s:.0f} s each ({graph_source}): ~{_minutes(cost)}; "
               f"{steps} steps{f' (what its time limit of {_minutes(limit_s)} leaves time for)' if limited else ''}"
               f" saving ~{1000 * saved_per_step:.0f} ms each (about {SAVED_SHARE:.0%} of a "
               f"~{1000 * step_s:.0f} ms step): ~{_minutes(saved)}")
    if saved >= PAYS_MARGIN * cost:
        return True, f"on: the faster steps win back the time spent compiling {saved / cost:.1f} times ({numbers})"
    if limited:
        return False, (f"off: within the time limit compiling would cost about as much as it saves, or more "
                       f"({numbers}); it pays with a time limit of about {_minutes(pays_from * step_s)} or more "
                       "(torch.compile)")
    return False, (f"off: compiling would cost about as much as it saves, or more ({numbers}); it pays from about "
                   f"{pays_from} steps (torch.compile)")


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"
