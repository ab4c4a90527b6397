"""What every bench script shares, so a number in RESULTS.md can be traced to the run that made it:
the machine, the exact command, a markdown table, the JSON + PNG written to bench/out/, and the
pieces of a real training step (the trainer's optimization functions, its data path, a synthetic
batch) that the training benchmarks time in different ways.

Plots use matplotlib's Agg backend (no display needed); matplotlib is a test/bench dependency only.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import socket
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# ------------------------------------------------------------------------------ provenance
def command() -> str:
    """The command line of this run, as typed from the repository root."""
    script = Path(sys.argv[0]).resolve()
    try:
        script = script.relative_to(ROOT)
    except ValueError:
        pass
    return shlex.join(["python", str(script), *sys.argv[1:]])


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    """Host, CPU, torch and (when there is one) the GPU: enough to say where a number came from."""
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    out = {"host": socket.gethostname(), "platform": platform.platform(), "python": platform.python_version(),
           "cpu": _cpu_model(), "cpu_cores": cores, "torch_threads": torch.get_num_threads(),
           "torch": torch.__version__, "cuda": torch.version.cuda, "gpu": None,
           "load_average_1_5_15m": [round(x, 1) for x in os.getloadavg()]}  # other work on a shared machine
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        out["gpu"] = {"name": p.name, "compute_capability": f"{p.major}.{p.minor}",
                      "memory_gib": round(p.total_memory / 2**30, 1), "count": torch.cuda.device_count()}
        out["summary"] = (f"{p.name} (compute {p.major}.{p.minor}, {out['gpu']['memory_gib']} GiB), "
                          f"{cores} CPU cores, torch {torch.__version__}, CUDA {torch.version.cuda}")
    else:
        out["summary"] = (f"{cores}-core CPU ({out['cpu']}), {out['torch_threads']} torch threads, "
                          f"torch {torch.__version__}")
    return out


def model_size(preset: str, n_symbols: int = 100, n_speakers: int = 2) -> str:
    """The acoustic model's parameter count as the code builds it (so no size in RESULTS.md goes stale)."""
    from models.matcha import MatchaConfig, MatchaTTS

    model = MatchaTTS(MatchaConfig.preset_config(preset, n_symbols=n_symbols, n_speakers=n_speakers))
    parts = {name: sum(p.numel() for p in child.parameters()) / 1e6 for name, child in model.named_children()}
    detail = ", ".join(f"{name} {n:.2f}" for name, n in parts.items() if n >= 0.005)
    return (f"{preset} {sum(parts.values()):.2f} M parameters ({detail}; {n_symbols} symbols, "
            f"{n_speakers} speaker{'s' if n_speakers > 1 else ''})")


def device_tag() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


# ---------------------------------------------------------------------------------- output
def fmt(value, digits: int = 3) -> str:
    """A table cell: '-' for missing, 3 significant digits for floats, text as is."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        if abs(value) >= 10 ** digits:
            return f"{value:,.0f}"
        return f"{value:.{digits}g}"
    return str(value)


def markdown_table(columns: list[tuple], rows: list[dict]) -> str:
    """columns: (key in each row, header[, format such as "{:.2f}x"]). Missing keys print as '-'."""
    def cell(value, spec):
        return spec.format(value) if spec and isinstance(value, (int, float)) else fmt(value)

    lines = ["| " + " | ".join(c[1] for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c[0]), c[2] if len(c) > 2 else None) for c in columns) + " |"
              for r in rows]
    return "\n".join(lines)


def add_output_args(parser) -> None:
    parser.add_argument("--out", type=Path, default=OUT, help="folder for the JSON and PNG (default bench/out)")


def add_machine_args(parser) -> None:
    """--threads and --out, for the scripts that time torch work."""
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    add_output_args(parser)


def start(args):
    """Apply --threads; returns utils.hardware's report of this machine (device, recommendations)."""
    import torch

    from utils import hardware

    if args.threads:
        torch.set_num_threads(args.threads)
    return hardware.detect()


def save(name: str, payload: dict, plot=None, out: Path = OUT) -> tuple[Path, Path | None]:
    """Write out/<name>-<cpu|cuda>.json (with date, command and machine) and, given `plot(fig)`, the PNG."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{name}-{device_tag()}"
    record = {"benchmark": name, "date": datetime.date.today().isoformat(), "command": command(),
              "machine": machine(), **payload}
    json_path = stem.with_suffix(".json")
    json_path.write_text(json.dumps(record, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
    png_path = None
    if plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=(9, 4.5))
        plot(fig)
        fig.suptitle(f"{name}: {record['machine']['summary']}", fontsize=8)
        fig.tight_layout()
        png_path = stem.with_suffix(".png")
        fig.savefig(png_path, dpi=110)
        plt.close(fig)
    print(f"saved {json_path}" + (f" and {png_path.name}" if png_path else ""))
    return json_path, png_path


# ------------------------------------------------------------------------------- timing
def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


class GpuUtilization:
    """Mean GPU utilization (NVML, what nvidia-smi shows) sampled in a thread while the block runs;
    `percent` stays None without a GPU or without nvidia-ml-py."""

    def __init__(self, device: str, every_s: float = 0.05):
        self.device, self.every_s, self.percent = device, every_s, None
        self._samples: list[float] = []
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        import torch

        if self.device != "cuda":
            return self
        try:
            torch.cuda.utilization()  # NVML through torch: maps CUDA_VISIBLE_DEVICES to the physical GPU
        except Exception:  # no nvidia-ml-py, or the driver hides utilization
            return self

        def sample():
            while not self._stop.wait(self.every_s):
                self._samples.append(float(torch.cuda.utilization()))

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            if self._samples:
                self.percent = sum(self._samples) / len(self._samples)


# ------------------------------------------------------------------------------ batches
def synthetic_batch(frames: int, utt_frames: int, n_symbols: int = 100, seed: int = 0) -> dict:
    """A padded batch of about `frames` mel frames: utterances of 3/4..1 x `utt_frames`, 6 frames per token
    (CPU tensors, as the DataLoader hands them over)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    b = max(1, frames // utt_frames)
    mel_lens = torch.randint(utt_frames * 3 // 4, utt_frames + 1, (b,), generator=g, device=g.device) // 4 * 4
    mel_lens[0] = utt_frames
    token_lens = torch.clamp(mel_lens // 6, min=2)
    tokens = torch.randint(1, n_symbols, (b, int(token_lens.max())), generator=g, device=g.device)
    for i, n in enumerate(token_lens.tolist()):
        tokens[i, n:] = 0
    mels = torch.randn(b, 100, utt_frames, generator=g, device=g.device)
    return {"tokens": tokens, "token_lens": token_lens, "mels": mels, "mel_lens": mel_lens,
            "speakers": torch.zeros(b, dtype=torch.long)}


def padding_fraction(batch: dict) -> float:
    """Share of the batch's mel frames that are padding (computed but thrown away)."""
    return 1.0 - float(batch["mel_lens"].sum()) / (batch["mels"].shape[0] * batch["mels"].shape[-1])


def espeak_dataset(root: Path, n_train: int, n_val: int = 0, max_chars: int = 60):
    """A small real dataset spoken by espeak-ng (two voices), as the tests build it; returns the Workspace."""
    from tests.helpers import make_dataset

    return make_dataset(Path(root), name="bench", n_train=n_train, n_val=n_val, voices=("am", "am+f2"),
                        max_chars=max_chars)


def training_items(workspace: Path, dataset: str):
    """The trainer's items and dataset (utils/training/data.py): manifest -> frontend -> cached mels. Returns
    (items, MelDataset, n_symbols, n_speakers)."""
    from utils.audio import FeatureConfig
    from utils.training.data import MelDataset, mel_stats, prepare_items, training_rows
    from utils.training.frontend import Frontend
    from utils.workspace import Workspace

    ws = Workspace.open(workspace)
    feat_cfg = FeatureConfig()
    rows, _ = training_rows(ws, dataset)
    frontend = Frontend.create("auto", rows)
    speakers = sorted({r.get("speaker", "default") for r in rows})
    items = prepare_items(ws, dataset, rows, frontend, speakers, feat_cfg, log=lambda *_: None)
    mean, std = mel_stats(ws, dataset, items, feat_cfg)
    return items, MelDataset(ws, dataset, items, feat_cfg, mean, std), len(frontend.symbols), len(speakers)


def dataset_loader(workspace: Path, dataset: str, max_frames: int, num_workers: int = 0, pin_memory: bool = False,
                   persistent_workers: bool = False, length_multiple: int = 4, seed: int = 1234):
    """The trainer's data path (utils/training/data.py, batching.py): manifest -> frontend -> cached mels -> frame
    batches -> DataLoader. Returns (loader, n_symbols, n_speakers)."""
    from utils.training.batching import FrameBatchSampler, make_loader

    items, data, n_symbols, n_speakers = training_items(workspace, dataset)
    sampler = FrameBatchSampler([it.frames for it in items], max_frames, seed, length_multiple=length_multiple)
    m = SimpleNamespace(num_workers=num_workers, pin_memory=pin_memory, persistent_workers=persistent_workers,
                        length_multiple=length_multiple)
    return make_loader(data, sampler, m), n_symbols, n_speakers


# --------------------------------------------------------------------------- training step
SPEED = {"grad_checkpointing": "false", "fp8": "false"}  # the speed configuration: every other setting "auto"


def train_step(preset: str, settings: dict, report, n_symbols: int = 100, n_speakers: int = 2, seed: int = 0):
    """One optimizer step as the training loop (utils/training/loop.py) runs it (autocast forward with MAS, scaled
    backward, unscale, clip, the finite check, AdamW, EMA), built through utils.training.optimization.

    Returns (step(batch) -> losses, machine, model)."""
    import torch

    from models.matcha import MatchaConfig, MatchaTTS
    from utils.training import optimization as opt
    from utils.matcha.adapter import MatchaAdapter
    from utils.matcha.settings import compile_targets
    from utils.training.batching import batch_to_device
    from utils.training.config import TrainConfig

    cfg = TrainConfig.from_dict({"preset": preset, **settings})  # Matcha's own (mas, blanks) by name too
    m = opt.resolve(cfg, report, plan=MatchaAdapter.memory_plan(cfg))
    torch.manual_seed(seed)
    model = MatchaTTS(MatchaConfig.preset_config(preset, n_symbols=n_symbols, n_speakers=n_speakers)).to(m.device)
    opt.apply_backend_flags(m)
    opt.apply_model_settings(model, m, compile_targets(model))
    optimizer = opt.make_optimizer(model, cfg, m)
    scaler, autocast = opt.grad_scaler(m), opt.autocast(m)
    params = [p for p in model.parameters() if p.requires_grad]
    ema = [p.detach().clone() for p in params]

    def step(batch: dict) -> dict:
        b = batch_to_device(batch, m.device, non_blocking=m.pin_memory)
        with autocast:
            losses = model(b["tokens"], b["token_lens"], b["mels"], b["mel_lens"], b["speakers"])
        scaler.scale(losses["loss"]).backward()
        scaler.unscale_(optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        if bool(torch.isfinite(grad_norm)) and bool(torch.isfinite(losses["loss"])):  # the trainer's sync point
            scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        torch._foreach_lerp_(ema, [p.detach() for p in params], 1.0 - m.ema_decay)
        return {k: v.detach() for k, v in losses.items()}

    return step, m, model


def release(device: str) -> None:
    """Free what the last configuration left on the GPU before the next one is measured."""
    import gc

    import torch

    torch._dynamo.reset()  # compiled graphs hold on to the modules they were traced from
    gc.collect()
    reset_peak(device)


def reset_peak(device: str) -> None:
    """Return cached blocks and start a new peak-memory window (the model and its compiled graphs stay)."""
    import torch

    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_gib(device: str) -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
