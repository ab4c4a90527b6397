"""What this machine is, and the training settings it should start from, each with its reason.

The one place that decides device, precision, TF32, attention backend, checkpointing, compile,
batch size and workers. The first guess comes from the GPU's capabilities and *usable* memory (not
a static tier by name: an "80 GB" card reports about 79.2 GiB); the measured probe in
utils/training replaces the batch size through `with_measured_batch`.
"""
from __future__ import annotations

import math
import os
import platform
import shutil
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

# Effective batch every machine reaches (micro-batch x accumulation x GPUs), in mel frames:
# about 64 utterances of 6.7 s at 93.75 frames/s (twice Matcha-TTS's batch of 32, for large datasets).
TARGET_FRAMES_PER_STEP = 40_000
# Below this many frames per micro-batch a GPU is poorly used: then recomputation is worth its cost.
MIN_USEFUL_FRAMES = 8_000
# First-guess activation memory per mel frame for the `base` preset, mixed precision, no
# checkpointing (an estimate to start from; the probe measures the real number on the GPU).
BYTES_PER_FRAME_BASE = 240_000
RESERVED_GB = 2.5  # CUDA context, weights, optimizer state, allocator slack
# optimizer steps a run takes unless the curator says otherwise: a GPU trains a full voice, a CPU a first tiny one in
# under an hour (their reasons in assets/settings_plain.json, max_steps "why" and "why_cpu"); a vocoder likewise
STEPS_GPU, STEPS_CPU = 20_000, 2_000
VOCODER_STEPS_GPU, VOCODER_STEPS_CPU = 20_000, 200
AMPERE = (8, 0)  # compute capability of bf16 and TF32 tensor cores and FlashAttention
NOMINAL_SIZES_GB = (4, 6, 8, 10, 11, 12, 16, 20, 24, 32, 40, 48, 64, 80, 94, 96, 141, 180, 192)

# name pattern -> class label, in match order. Capability decides precision and kernels;
# the label only makes the report readable.
GPU_CLASSES = (
    ("H200", "Hopper H200"), ("H100", "Hopper H100"), ("GH200", "Hopper GH200"),
    ("B200", "Blackwell B200"), ("A100", "Ampere A100"), ("A800", "Ampere A800"),
    ("L40", "Ada L40"), ("L4", "Ada L4"), ("A10", "Ampere A10"), ("A6000", "Ampere RTX A6000"),
    ("T4", "Turing T4"), ("V100", "Volta V100"), ("P100", "Pascal P100"),
    ("RTX 50", "consumer Blackwell"), ("RTX 40", "consumer Ada"), ("RTX 30", "consumer Ampere"),
    ("RTX 20", "consumer Turing"), ("GTX", "consumer Pascal/Turing"),
)


@dataclass
class GPUInfo:
    index: int
    name: str
    memory_gb: float  # what the driver reports (GiB)
    compute_capability: str  # "9.0"
    multiprocessors: int = 0

    @property
    def capability(self) -> tuple[int, int]:
        major, minor = self.compute_capability.split(".")
        return int(major), int(minor)

    @property
    def bf16(self) -> bool:
        """bf16 tensor cores (Ampere, compute 8.0, and newer). torch.cuda.is_bf16_supported() also says yes on a T4
        (7.5), where bf16 is emulated: slower than fp32 and without cuDNN's bf16 convolutions, so it is not asked."""
        return self.capability >= AMPERE

    @property
    def tf32(self) -> bool:
        return self.capability >= AMPERE

    @property
    def nominal_gb(self) -> int:
        """The marketed size: reported memory is a little less (driver reservation, GiB vs GB)."""
        for size in NOMINAL_SIZES_GB:
            if self.memory_gb <= size + 0.5 and self.memory_gb >= size * 0.85:
                return size
        return round(self.memory_gb)

    @property
    def gpu_class(self) -> str:
        upper = self.name.upper()
        for pattern, label in GPU_CLASSES:
            if pattern in upper:
                return f"{label} {self.nominal_gb} GB"
        return f"{self.name} {self.nominal_gb} GB"

    def summary(self) -> str:
        return (f"{self.name}, {self.memory_gb:.1f} GiB reported ({self.gpu_class}), compute {self.compute_capability}, "
                f"bf16 {'yes' if self.bf16 else 'no'}, TF32 {'yes' if self.tf32 else 'no'}")

    def to_dict(self) -> dict:
        return {**asdict(self), "bf16": self.bf16, "tf32": self.tf32, "nominal_gb": self.nominal_gb,
                "gpu_class": self.gpu_class}


@dataclass(frozen=True)
class MemoryPlan:
    """What a model needs of a GPU for the first batch guess: memory held whatever the batch (a large pretrained
    model's weights, gradients, optimizer moments and average) and activation memory per mel frame, as a multiple of
    BYTES_PER_FRAME_BASE. Each model family says its own (utils/families.py); the probe then measures."""
    name: str = "base"
    fixed_gb: float = 0.0
    frame_factor: float = 1.0

    @property
    def bytes_per_frame(self) -> float:
        return BYTES_PER_FRAME_BASE * self.frame_factor


@dataclass
class Setting:
    value: Any
    reason: str


@dataclass
class HardwareReport:
    gpus: list[GPUInfo]
    cpu_count: int
    ram_gb: float
    disk_free_gb: float
    mps: bool = False
    platform: str = field(default_factory=lambda: f"{platform.system()} {platform.machine()}")
    torch_version: str = ""
    cuda_version: str | None = None
    recommended: dict[str, Setting] = field(default_factory=dict)

    @property
    def device(self) -> str:
        return "cuda" if self.gpus else "mps" if self.mps else "cpu"

    def to_dict(self) -> dict:
        return {
            "device": self.device, "gpus": [g.to_dict() for g in self.gpus], "cpu_count": self.cpu_count,
            "ram_gb": round(self.ram_gb, 1), "disk_free_gb": round(self.disk_free_gb, 1), "mps": self.mps,
            "platform": self.platform, "torch_version": self.torch_version, "cuda_version": self.cuda_version,
            "recommended": {k: asdict(v) for k, v in self.recommended.items()},
        }


# ------------------------------------------------------------------------------- detection
def query_gpus() -> list[GPUInfo]:
    """torch's CUDA device queries: the boundary tests fake to stand in for GPUs this machine lacks."""
    import torch

    if not torch.cuda.is_available():
        return []
    gpus = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        gpus.append(GPUInfo(i, p.name, p.total_memory / 2**30, f"{p.major}.{p.minor}",
                            getattr(p, "multi_processor_count", 0)))
    return gpus


def bf16_missing(gpus: list[GPUInfo]) -> str:
    """Why these GPUs cannot train in bf16 ("" when every one has bf16 tensor cores): the one capability check of
    the studio (the trainer, the vocoder GAN, inference), so that none of them counts an emulated bf16."""
    if not gpus:
        return "no GPU was found"
    weak = [g for g in gpus if not g.bf16]
    return (f"{weak[0].name} (compute {weak[0].compute_capability}) has no bf16 tensor cores (bf16 needs compute "
            f">= {AMPERE[0]}.{AMPERE[1]}; below that it is emulated, slower than fp32)") if weak else ""


def inference_precision(device: str, gpus: list[GPUInfo] | None = None) -> str:
    """The autocast dtype a large model speaks in on `device` ("fp32" off a GPU): bf16 on cards with bf16 tensor
    cores, else fp16 (the reference F5-TTS speaks in fp16 on every GPU). Autocast, not a global TF32 switch: the
    app's process keeps torch's process-wide settings as they are."""
    if not str(device).startswith("cuda"):
        return "fp32"
    gpus = query_gpus() if gpus is None else gpus
    return "fp16" if bf16_missing(gpus) else "bf16"


def _mps_available() -> bool:
    import torch

    backend = getattr(torch.backends, "mps", None)
    return bool(backend and backend.is_available())


def detect(disk_path: str | Path = ".") -> HardwareReport:
    import psutil
    import torch

    path = Path(disk_path)
    while not path.exists():
        path = path.parent
    report = HardwareReport(
        gpus=query_gpus(),
        cpu_count=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1),
        ram_gb=psutil.virtual_memory().total / 2**30,
        disk_free_gb=shutil.disk_usage(path).free / 1e9,  # decimal GB, as disks are sold and the Dataset tab says
        mps=_mps_available(),
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda,
    )
    report.recommended = recommend(report)
    return report


def device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "mps" if _mps_available() else "cpu"


def has_cuda() -> bool:
    """A CUDA GPU this process can use, asked at each call (a test or a CUDA_VISIBLE_DEVICES change is seen)."""
    import torch

    return torch.cuda.is_available()


def cuda_or_cpu(requested: str = "auto") -> str:
    """The device of the studio's helper models (recognizer, aligner, checkpoints read for a check): what was asked
    for, or for "auto" the CUDA GPU when there is one, else the CPU (no MPS: their kernels are not all there)."""
    if requested != "auto":
        return requested
    return "cuda" if has_cuda() else "cpu"


# -------------------------------------------------------------------------- recommendations
def recommend(report: HardwareReport, plan: MemoryPlan = MemoryPlan()) -> dict[str, Setting]:
    """Settings for this machine and a model's memory `plan`, each with why. Pure: depends only on its arguments."""
    gpus = report.gpus
    if not gpus:
        return _recommend_cpu(report) if not report.mps else _recommend_mps(report)
    # DDP runs in lock step: the weakest card decides (least capability first, then least memory)
    g = min(gpus, key=lambda x: (x.capability, x.memory_gb))
    g = replace(g, memory_gb=min(x.memory_gb for x in gpus))
    n = len(gpus)
    usable = max(1.0, g.memory_gb - RESERVED_GB - plan.fixed_gb)
    r: dict[str, Setting] = {}

    if g.bf16:
        r["precision"] = Setting("bf16", f"{g.name} (compute {g.compute_capability}) does half-size maths natively: "
                                         "half the memory of full-size numbers, with nothing to adjust (bf16 tensor "
                                         "cores; fp32 is full size).")
    else:
        r["precision"] = Setting("fp16", f"{g.name} (compute {g.compute_capability}) lacks the newer half-size "
                                         "numbers; the older ones are used, scaled automatically so small updates do not "
                                         "vanish (fp16 with a gradient scaler; no bf16).")
    r["tf32"] = Setting(g.tf32, "on: this GPU does full-size maths 2-8x faster in a slightly shorter format, with no "
                                "audible loss (TF32 matrix multiplies, Ampere and newer)." if g.tf32 else
                        f"this GPU (compute {g.compute_capability}) is older than the ones with this speed-up (TF32 "
                        "needs Ampere).")
    if g.capability >= (8, 0):
        r["attention"] = Setting("flash", "the fastest method, which never holds the whole sentence-by-sentence "
                                          "table in memory (FlashAttention kernel of SDPA: compute 8.0 and "
                                          "newer, half-size numbers).")
    else:
        r["attention"] = Setting("efficient", f"this GPU (compute {g.compute_capability}) lacks the fastest "
                                              "method; the next one also keeps memory low (memory-efficient SDPA "
                                              "kernel, no T x T matrix).")
    plain_fit = frames_that_fit(usable, plan, 1.0)
    checkpointing = plain_fit < MIN_USEFUL_FRAMES
    r["grad_checkpointing"] = Setting(
        checkpointing,
        f"only ~{plain_fit} frames fit in {usable:.1f} GiB without it: recomputing block activations in the "
        "backward pass (~30% slower) fits about 2.5x longer batches." if checkpointing else
        f"~{plain_fit} frames fit in {usable:.1f} GiB without it; recomputation would only cost ~30% speed.")
    compile_ok = platform.system() == "Linux" and g.capability >= (7, 0)
    r["compile"] = Setting(compile_ok, "the model's many small steps become fewer, faster GPU jobs before "
                                       "training (torch.compile with Triton: Linux, compute 7.0 and newer); clips "
                                       "grouped by length keep it to a few sizes, each optimised once."
                           if compile_ok else "needs Linux and a GPU of compute 7.0 or newer (torch.compile's GPU "
                                              "backend).")
    fit = frames_that_fit(usable, plan, 2.5 if checkpointing else 1.0)
    r.update(batch_plan(fit, n))
    r["max_frames_per_batch"] = Setting(
        r["max_frames_per_batch"].value,
        f"~{fit} frames fit (first guess from {g.memory_gb:.1f} GiB reported, {g.gpu_class}; {RESERVED_GB} GiB "
        f"kept for weights, optimizer and allocator{f', {plan.fixed_gb:g} GiB for the model' if plan.fixed_gb else ''}; "
        f"~{plan.bytes_per_frame / 1e3:.0f} kB per frame for the {plan.name} model"
        f"{' with checkpointing' if checkpointing else ''}; the probe measures it at the start). "
        + r["max_frames_per_batch"].reason)
    per_gpu = max(1, report.cpu_count // n)
    workers = max(1, min(8, per_gpu - 1))
    r["num_workers"] = Setting(workers, f"{report.cpu_count} CPU cores for {n} GPU process(es): {workers} loader "
                                        f"worker(s) each, one core left for the training process itself.")
    r["pin_memory"] = Setting(True, "each batch is copied to the GPU while it works on the one before "
                                    "(page-locked host memory).")
    sep = int(max(1, min(16, usable // 3)))
    r["separation_batch_size"] = Setting(sep, f"~3 GiB per 30 s music-removal chunk; {usable:.1f} GiB usable.")
    r["distributed"] = Setting(n > 1, f"{n} GPUs: one training process per GPU, each with its share of the batch "
                               "(torchrun, DistributedDataParallel)."
                               if n > 1 else "one GPU: a single process.")
    return r


def _recommend_cpu(report: HardwareReport) -> dict[str, Setting]:
    frames = 2000  # tiny runs: a step takes about a second on a laptop
    r = {
        "precision": Setting("fp32", "no GPU found: a CPU trains this model fastest in full-size numbers (fp32); "
                                     "half-size ones (bf16 autocast) are slower on most CPUs."),
        "tf32": Setting(False, "off: it speeds up newer NVIDIA GPUs only (TF32, Ampere and newer); a CPU "
                               "has nothing to gain."),
        "attention": Setting("math", "the standard method, the only one a CPU has; the faster ones need an "
                                      "NVIDIA GPU (SDPA attention kernels: math here, flash and efficient on GPUs)."),
        "grad_checkpointing": Setting(False, "memory is rarely the limit on a CPU; recomputing would only slow it."),
        "compile": Setting(False, "compiling costs minutes of start-up, more than a small CPU run gains."),
        "max_frames_per_batch": Setting(frames, f"{report.ram_gb:.0f} GiB RAM holds far more; kept small so each "
                                                "CPU step takes seconds, not minutes (tiny runs)."),
    }
    r["grad_accumulation"] = Setting(1, "a CPU trains a small voice in minutes to hours, not days: every batch "
                                        "updates the weights. The GPUs' ~40000-frame effective batch would make "
                                        "each step 20 batches long here (measured on a 2-core CPU: in 3 minutes, "
                                        "23 learning steps and no usable voice, against ~370 steps and a first "
                                        "rough one).")
    workers = 0 if report.cpu_count <= 2 else min(2, report.cpu_count // 4 or 1)
    r["num_workers"] = Setting(workers, f"{report.cpu_count} CPU cores: the model needs them; "
                                        f"{'loading in the main process' if workers == 0 else f'{workers} loader worker(s)'}.")
    r["pin_memory"] = Setting(False, "no GPU to copy to.")
    r["separation_batch_size"] = Setting(1, "no GPU: one chunk at a time keeps memory flat.")
    r["distributed"] = Setting(False, "no GPU: a single process.")
    return r


def _recommend_mps(report: HardwareReport) -> dict[str, Setting]:
    r = _recommend_cpu(report)
    r["precision"] = Setting("fp32", "Apple GPU: full-size numbers, since half-size maths on Apple GPUs does not cover "
                                     "every step this model takes (fp32; MPS autocast).")
    r["attention"] = Setting("math", "Apple GPUs lack the faster methods: the standard one (SDPA math kernel; "
                                     "no FlashAttention on MPS).")
    r.update(batch_plan(8000, 1))
    r["max_frames_per_batch"] = Setting(8000, "Apple GPU shares system memory; a moderate batch keeps the OS "
                                              "responsive. " + r["max_frames_per_batch"].reason)
    r["separation_batch_size"] = Setting(2, "Apple GPU: small batches of music-removal chunks.")
    return r


def frames_that_fit(usable_gb: float, plan: MemoryPlan, factor: float) -> int:
    """Mel frames a micro-batch of the `plan`'s model can hold in `usable_gb` (x `factor` with recomputation)."""
    frames = usable_gb * 2**30 * 0.8 / plan.bytes_per_frame * factor
    return int(max(1000, min(400_000, frames)) // 1000 * 1000)


def batch_plan(fit: int, n_gpus: int, target: int = TARGET_FRAMES_PER_STEP, accum: int = 0) -> dict[str, Setting]:
    """Micro-batch x accumulation x GPUs = the effective batch the learning rates were chosen for (`target`
    frames per optimizer step), whatever the card: a GPU where more fits does not take a bigger step.

    `fit`: frames per micro-batch that fit (first guess or measured by the probe). Accumulation is the fewest
    micro-batches that reach `target`, and the micro-batch is then the even share of `target`, so an L4, an
    A100 40 GB, an A100 80 GB and an H100 all step on `target` frames. Only with many GPUs, where an even
    share would leave each card idle (< 2 x MIN_USEFUL_FRAMES), the effective batch grows; then
    `lr_batch_scale` is sqrt(effective / target), the square-root rule for Adam-type optimizers.
    `accum` > 0: the accumulation the user set; only the micro-batch is planned.
    """
    n = max(1, n_gpus)
    floor = 2 * MIN_USEFUL_FRAMES if n > 1 else 0
    accum = accum or max(1, math.ceil(target / (n * max(1, fit))))
    micro = min(fit, max(math.ceil(target / (n * accum)), floor))
    effective = micro * n * accum
    scale = lr_batch_scale(effective, target)
    shape = f"{micro} frames x {accum} micro-batch{'es' if accum > 1 else ''}" + (f" x {n} GPUs" if n > 1 else "")
    if scale > 1.0:
        why = (f"{shape} = {effective} frames per optimizer step: an even share of ~{target} would leave each of "
               f"the {n} GPUs under {floor} frames, so the step is larger and the learning rate x{scale:.2f} "
               "(square-root rule)")
    else:
        why = (f"{shape} = {effective} frames per optimizer step, the batch the learning rate was chosen for "
               f"(~{target}), the same on every GPU; {fit} frames fit per micro-batch")
    return {"max_frames_per_batch": Setting(micro, f"{why}."),
            "grad_accumulation": Setting(accum, f"{why}."),
            "effective_batch": Setting(effective, f"{why}."),
            "lr_batch_scale": Setting(round(scale, 4), f"{why}.")}


def lr_batch_scale(effective: int, target: int = TARGET_FRAMES_PER_STEP) -> float:
    """How much an automatic learning rate grows for a step of `effective` frames, larger than the `target` the rates
    were chosen for: the square-root rule for Adam-type optimizers (1.0 within 5 % of the target)."""
    return math.sqrt(effective / target) if effective > 1.05 * target else 1.0


def largest_useful_micro_batch(n_gpus: int, target: int = TARGET_FRAMES_PER_STEP) -> int:
    """The most frames `batch_plan` ever puts in one micro-batch: the whole target on one GPU, an even share of it
    (or the floor that keeps a card busy) on several. A probe that finds more room measures nothing it can use."""
    n = max(1, n_gpus)
    return max(math.ceil(target / n), 2 * MIN_USEFUL_FRAMES if n > 1 else 0)


def with_measured_batch(report: HardwareReport, max_frames: int, detail: str, n_processes: int = 0,
                        accum: int = 0) -> HardwareReport:
    """Hook for the measured batch probe (utils/training): plan the batch from what really fits (`accum`: the
    accumulation the user set, if any)."""
    rec = dict(report.recommended)
    plan = batch_plan(max_frames, n_processes or max(1, len(report.gpus)), accum=accum)
    rec.update(plan)
    rec["max_frames_per_batch"] = Setting(plan["max_frames_per_batch"].value,
                                          f"measured: {detail}. {plan['max_frames_per_batch'].reason}")
    return replace(report, recommended=rec)


def describe(report: HardwareReport) -> str:
    lines = [f"Platform: {report.platform}, torch {report.torch_version}"
             + (f", CUDA {report.cuda_version}" if report.cuda_version else "")]
    if report.gpus:
        for g in report.gpus:
            lines.append(f"GPU {g.index}: {g.summary()}")
    else:
        lines.append("No GPU found" + (" (Apple MPS available)" if report.mps else "") + ": training runs on the CPU.")
    lines.append(f"CPU cores: {report.cpu_count}, RAM: {report.ram_gb:.1f} GiB, free disk: {report.disk_free_gb:.1f} GB")
    lines.append("\nRecommended settings:")
    for name, s in report.recommended.items():
        lines.append(f"  {name:22} {str(s.value):8} {s.reason}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- live usage
_CPU_MEASURED = False  # whether psutil has a CPU reading to measure the next one from (see live_usage)

def live_usage(pids: list[int] | None = None) -> dict:
    """Memory and utilization now: per GPU (NVML) and, where the driver allows, per process; CPU/RAM always."""
    import psutil

    global _CPU_MEASURED
    # cpu_percent(None) is the use since its last call: the first call has none and says 0 %; that one waits 0.2 s
    cpu = psutil.cpu_percent(interval=None if _CPU_MEASURED else 0.2)
    _CPU_MEASURED = True
    out: dict[str, Any] = {"cpu_percent": cpu,
                           "ram_used_gb": psutil.virtual_memory().used / 2**30,
                           "ram_total_gb": psutil.virtual_memory().total / 2**30, "gpus": []}
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # no driver / no GPU: NVML refuses to start
        out["nvml"] = f"unavailable ({type(exc).__name__})"
        return out
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            gpu = {"index": i, "used_gb": mem.used / 2**30, "total_gb": mem.total / 2**30,
                   "util_percent": _utilization(pynvml, h), "processes": _gpu_processes(pynvml, h, pids)}
            if gpu["processes"] == [] and pids is None and gpu["used_gb"] > HIDDEN_PROCESSES_GB:
                gpu["processes"] = None  # memory in use, nobody to hold it: a container hides the processes
            out["gpus"].append(gpu)
    finally:
        pynvml.nvmlShutdown()
    return out


HIDDEN_PROCESSES_GB = 0.5  # more than a driver holds by itself on an idle card


def _utilization(pynvml, handle) -> int | None:
    """Percent busy, or None where the driver does not measure it (a MIG slice, some virtual GPUs)."""
    try:
        return int(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    except pynvml.NVMLError:
        return None


def _gpu_processes(pynvml, handle, pids: list[int] | None) -> list[dict] | None:
    """The compute processes on a GPU (of `pids`, or all), or None where the driver hides them. Inside a container
    NVML reports the host's process ids (or none): a training process of ours is then not found by its pid."""
    try:
        return [{"pid": p.pid, "used_gb": (p.usedGpuMemory or 0) / 2**30}
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle) if pids is None or p.pid in pids]
    except pynvml.NVMLError:
        return None


def pci_bus_id(index: int) -> str | None:
    """CUDA device `index`'s PCI address as NVML writes it ("00000000:3B:00.0"). NVML numbers GPUs in PCI order and
    CUDA fastest first, and CUDA_VISIBLE_DEVICES may hold UUIDs or MIG slices: the address names the same card."""
    import torch

    p = torch.cuda.get_device_properties(index)
    if not hasattr(p, "pci_bus_id"):  # torch older than the field
        return None
    return f"{p.pci_domain_id:08X}:{p.pci_bus_id:02X}:{p.pci_device_id:02X}.0"


def process_gpu_usage(pid: int, device_index: int = 0, bus_id: str | None = None) -> dict:
    """NVML's view of one process on one GPU (what nvidia-smi shows), for the trainer's metrics: the card at PCI
    address `bus_id` (see `pci_bus_id`), else NVML's GPU `device_index`.

    Empty on machines without NVML; `nvml_process_gb` is missing where the driver hides processes."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return {}
    try:
        h = (pynvml.nvmlDeviceGetHandleByPciBusId(bus_id) if bus_id else
             pynvml.nvmlDeviceGetHandleByIndex(device_index))
        out = {"nvml_device_used_gb": pynvml.nvmlDeviceGetMemoryInfo(h).used / 2**30}
        if (util := _utilization(pynvml, h)) is not None:
            out["gpu_util_percent"] = float(util)
        for p in _gpu_processes(pynvml, h, [pid]) or []:
            if p["used_gb"]:
                out["nvml_process_gb"] = p["used_gb"]
        return out
    except Exception:
        return {}
    finally:
        pynvml.nvmlShutdown()
