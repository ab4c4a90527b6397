"""Every speed/memory setting in one place: resolve "auto" from utils.hardware, then apply each one as a
single visible line (TF32, cuDNN benchmark, autocast dtype, gradient scaler, attention kernel,
gradient checkpointing, FP8 matmuls, torch.compile, fused AdamW, loader settings). Each resolved value carries
the reason it is on or off; the trainer logs them all at start.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace

import torch

from models.alignment import cython_available, mas_disagreement
from models.attention import kernel_failure
from utils import families, hardware
from utils.events import StudioError
from utils.family_contract import family_optional
from utils.training import compile_pays
from utils.training.compiled import CompiledParts, first_line, part_names
from utils.training.config import AUTO, TrainConfig, as_bool
from utils.training.shapes import BUCKETS
from utils.training.speed import peak_tflops

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class Setting:
    """One resolved setting of a Machine, read as `m.<name>` from `m.values` (its reason is `m.reasons[name]`); an
    unset one raises AttributeError, so `getattr(m, name, default)` works."""

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, m, owner=None):
        if m is None:
            return self
        try:
            return m.values[self.name]
        except KeyError as exc:
            raise AttributeError(self.name) from exc


@dataclass
class Machine:
    """The resolved settings for this machine and run (value + reason for each). `values` keeps the order they were
    resolved in (config.json's "resolved", the start-of-run log); each one has its line below."""
    values: dict = field(default_factory=dict)
    reasons: dict = field(default_factory=dict)
    auto_lr: tuple | None = None  # (rate, reason) before any batch scaling, when lr is "auto"
    report: object = None  # utils.hardware's report of the machine it was resolved for ("auto" settles later too)

    device = Setting()  # "cuda" or "cpu"
    precision = Setting()  # "bf16", "fp16" or "fp32": the autocast dtype
    tf32 = Setting()  # TF32 tensor cores for fp32 matmuls and convolutions
    cudnn_benchmark = Setting()  # time cuDNN's convolution methods once per shape
    attention = Setting()  # the SDPA kernel: "flash", "efficient", "math" (or "none": no attention layers)
    grad_checkpointing = Setting()  # recompute block activations in backward
    compile = Setting()  # torch.compile the adapter's compile targets
    fp8 = Setting()  # FP8 matmuls (torchao float8 training)
    mas = Setting()  # where the monotonic alignment search runs: "triton", "cython" or "torch"
    max_frames_per_batch = Setting()  # one micro-batch, in frames (MMS: clips x median frames)
    grad_accumulation = Setting()  # micro-batches per optimizer step
    effective_batch = Setting()  # frames per optimizer step, over every process
    num_workers = Setting()  # loader worker processes
    pin_memory = Setting()  # page-locked loader batches
    persistent_workers = Setting()  # loader workers kept between epochs
    length_multiple = Setting()  # clip lengths padded to a multiple of this many frames
    probe = Setting()  # measure the largest batch that fits with one real step
    fused_adamw = Setting()  # one fused AdamW kernel (else for-each)
    lr = Setting()  # peak learning rate
    new_rows_lr = Setting()  # F5: the rate of the rows a vocabulary adds to a pretrained table
    betas = Setting()  # MMS: AdamW's betas
    ema_decay = Setting()  # the EMA's decay once warmed up
    blanks = Setting()  # a blank between text symbols

    def set(self, name: str, value, reason: str) -> None:
        if not isinstance(getattr(type(self), name, None), Setting):
            raise AttributeError(f"Machine has no setting {name!r}: add its line to Machine")
        self.values[name] = value
        self.reasons[name] = reason

    def set_family_lr(self, rate: float, reason: str) -> None:
        """A family's own automatic learning rate (a fine-tune's ~1e-5): also the rate that set_effective_batch scales
        after the batch probe, which would otherwise put back the default family's (Matcha's 2e-4 or more)."""
        self.set("lr", rate, reason)
        if self.auto_lr is not None:
            self.auto_lr = (rate, reason)

    def describe(self) -> list[str]:
        return [f"{k:22} {str(v):10} {self.reasons[k]}" for k, v in self.values.items()]


def resolve(cfg: TrainConfig, report=None, world_size: int = 1, plan: hardware.MemoryPlan | None = None) -> Machine:
    """TrainConfig (with "auto") + hardware report -> Machine with a value and a reason per setting. `plan`: the
    model's memory for the batch guess (its family says it, utils/families.py; None: a `base`-sized model)."""
    if report is None:
        report = hardware.detect()
    if cfg.device == "cpu" and report.device != "cpu":  # the CPU on a GPU machine: a CPU's settings, not the GPU's
        cpu = replace(report, gpus=[], mps=False)  # (bf16, 40,000-frame batches, compile: slow or refused there)
        report = replace(cpu, recommended=hardware.recommend(cpu))
    rec = dict(report.recommended)
    if report.gpus:  # the model changes how many frames fit; the batch is planned for the processes that run
        gpus = report.gpus[:max(1, world_size)]  # one process on a box of several GPUs plans for one
        rec = {**rec, **hardware.recommend(replace(report, gpus=gpus), plan or hardware.MemoryPlan())}
    m = Machine(report=report)

    def pick(name: str, requested, convert=lambda v: v, fallback=None):
        if requested != AUTO and requested is not None and requested != "":
            m.set(name, convert(requested), "set by the user")
        elif name in rec:
            m.set(name, convert(rec[name].value), rec[name].reason)
        else:
            m.set(name, fallback[0], fallback[1])

    device = cfg.device if cfg.device != AUTO else report.device
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise StudioError("device cuda was asked for but no CUDA GPU is visible; use --device cpu or auto.")
    m.set("device", device, "set by the user" if cfg.device != AUTO else "no GPU found: the CPU trains (small models)"
          if report.device == "cpu" else f"detected: a {report.device} GPU, 10-100x faster than a CPU for this model")
    on_gpu = device == "cuda"

    pick("precision", cfg.precision)
    if cfg.precision == "bf16" and on_gpu and (why := hardware.bf16_missing(report.gpus)):
        raise StudioError(f"bf16 was asked for but {why}; use fp16 or auto.")
    if m.precision == "fp16" and not on_gpu:
        m.set("precision", "fp16", "set by the user: half-size numbers with automatic scaling run on a CPU "
                                   "too, but slowly; it is there to test that path (fp16 autocast, loss scaling)")
    pick("tf32", cfg.tf32, lambda v: as_bool(v, "tf32"))
    if m.tf32 and not on_gpu:
        m.set("tf32", False, "off: it speeds up newer NVIDIA GPUs only (TF32); this run is on the CPU")
    pick("attention", cfg.attention)
    if m.attention in ("efficient",) and not on_gpu:
        m.set("attention", "math", "the memory-saving method needs an NVIDIA GPU: the standard one on the CPU "
                                    "(SDPA math kernel; memory-efficient is CUDA only)")
    pick("grad_checkpointing", cfg.grad_checkpointing, lambda v: as_bool(v, "grad_checkpointing"))
    pick("compile", cfg.compile, lambda v: as_bool(v, "compile"))
    pick("max_frames_per_batch", cfg.max_frames_per_batch, int)
    pick("grad_accumulation", cfg.grad_accumulation, int)
    if cfg.compile == AUTO and m.compile:  # the most graphs a run can need; the adapter counts its own once read
        m.set("compile", *compile_verdict(cfg, m, report, plan, BUCKETS * compile_pays.MOST_PARTS))
    pick("num_workers", cfg.num_workers, int)
    pick("pin_memory", cfg.pin_memory, lambda v: as_bool(v, "pin_memory"))
    if m.pin_memory and not on_gpu:
        m.set("pin_memory", False, "nothing to copy to without a GPU")
    pick("fused_adamw", cfg.fused_adamw, lambda v: as_bool(v, "fused_adamw"),
         (on_gpu, "the GPU updates all the weights in one go (one fused AdamW kernel, fewer launches)" if on_gpu else
          "on a CPU the weights are updated group by group, as fast at this size (for-each AdamW; the "
          "fused CPU kernel gains little)"))
    pick("cudnn_benchmark", cfg.cudnn_benchmark, lambda v: as_bool(v, "cudnn_benchmark"),
         (on_gpu, "clips grouped by length make the same sizes recur, so timing the GPU's convolution methods "
          "once per size pays off (cuDNN benchmark)"
          if on_gpu else "off: only an NVIDIA GPU has convolution methods to time (cuDNN); a CPU has nothing to gain"))
    _resolve_fp8(cfg, m, report, on_gpu)
    own = cfg.family_options  # the family's own settings: those the machine decides too
    if hasattr(own, "mas"):
        _resolve_mas(own.mas, m, on_gpu)
    by_family = family_auto_settings(cfg)  # what "auto" means where no hardware decides: the family says
    pick("lr", cfg.lr, float, by_family["lr"])
    pick("ema_decay", cfg.ema_decay, float, ema_for_run(cfg.max_steps))
    m.auto_lr = (m.lr, m.reasons["lr"]) if cfg.lr == AUTO else None
    set_effective_batch(m, cfg, world_size, rec)
    if hasattr(own, "blanks"):
        pick("blanks", own.blanks, lambda v: as_bool(v, "blanks"), by_family["blanks"])
    workers = m.num_workers
    pick("persistent_workers", cfg.persistent_workers, lambda v: as_bool(v, "persistent_workers"),
         (workers > 0, "the loading helpers keep running between rounds, their cache warm "
          "(persistent workers, no re-fork)"
          if workers > 0 else "no worker processes: loading happens in the training process"))
    if cfg.length_multiple != AUTO:
        m.set("length_multiple", int(cfg.length_multiple), "set by the user")
    elif m.compile:
        m.set("length_multiple", 64, "the code is optimised before training for each batch shape, so batches "
                                     "take a few fixed shapes (up to 8 length groups placed where the clips are, "
                                     "bounds at multiples of 64 frames): the optimised code is reused instead of "
                                     "redone (torch.compile graphs)")
    else:
        m.set("length_multiple", *EAGER_LENGTH)
    probe = cfg.probe if cfg.probe != AUTO else on_gpu and cfg.max_frames_per_batch == AUTO
    m.set("probe", as_bool(probe, "probe"),
          "set by the user" if cfg.probe != AUTO else
          "a GPU and an automatic batch: one real step on the longest batch, then halving the gap to "
          "the largest that fits (bisection)" if probe else
          "no GPU (RAM is not the limit) or the batch size was set by hand")
    return m


EAGER_LENGTH = (4, "clips padded only to the multiple of 4 frames the decoder needs: the least wasted work (no "
                   "compile)")


def compile_verdict(cfg: TrainConfig, m: Machine, report, plan: hardware.MemoryPlan | None,
                    graphs: int, done_steps: int = 0) -> tuple[bool, str]:
    """Whether compiling `graphs` graphs pays over the steps this run has left after `done_steps` (a resume) on this
    machine (utils/training/compile_pays.py): (compile, why). The slowest of the run's GPUs sets the pace of a step.
    A time limit (max_minutes) caps the steps at those it leaves time for at the eager pace: compiling pays within
    it only where the time the faster steps save is more than the graphs cost."""
    gpu = min(report.gpus, key=lambda g: peak_tflops(g))
    step_s = compile_pays.step_seconds(peak_tflops(gpu), m.max_frames_per_batch * m.grad_accumulation,
                                       (plan or hardware.MemoryPlan()).frame_factor)
    warm = bool(cfg.workspace) and compile_pays.warm(cfg.workspace)
    graph_s, source = compile_pays.graph_seconds(cfg.workspace, compile_pays.machine_key(report), report.cpu_count,
                                                 warm)
    return compile_pays.verdict(graphs, max(0, cfg.max_steps - done_steps), graph_s, source, step_s,
                                limit_s=max(0.0, float(cfg.max_minutes or 0)) * 60)


def resolve_gan(device: str = AUTO, precision: str = AUTO, gpus: list | None = None) -> Machine:
    """The vocoder GAN's machine. bf16 autocast where the GPU has bf16 tensor cores (compute >= 8.0; a T4 only
    emulates it, slower than fp32): bf16 keeps fp32's exponent range, so the GAN needs no loss scaling; fp16 is
    refused (the generator's log-magnitudes and the discriminators' feature maps overflow it). TF32 and cuDNN
    autotuning on a GPU: every batch is the same crop shape. `gpus`: utils.hardware's GPUInfo list (queried when
    None; tests pass a T4's)."""
    if precision not in (AUTO, "bf16", "fp32"):
        raise StudioError(f"Vocoder precision {precision!r} is not one of auto, bf16, fp32.")
    asked = device
    if device == AUTO:
        try:
            from utils.hardware import device as detected_device

            device = detected_device()
        except Exception:  # the hardware probe must never stop a training run
            device = "cuda" if torch.cuda.is_available() else "cpu"
    m = Machine()
    m.set("device", device, "set by the user" if asked != AUTO else "the GPU" if device == "cuda" else "no GPU found")
    on_gpu = device == "cuda"
    gpus = (hardware.query_gpus() if gpus is None else gpus) if on_gpu else []
    no_bf16 = hardware.bf16_missing(gpus) if on_gpu else "there is no GPU"
    gpu_bf16 = on_gpu and not no_bf16
    if precision == "bf16" and on_gpu and not gpu_bf16:
        raise StudioError(f"bf16 was asked for but {no_bf16}; use fp32 or auto.")
    if precision == "fp32":
        m.set("precision", "fp32", "fp32: set by the user")
    elif precision == "bf16" or gpu_bf16:
        m.set("precision", "bf16", "bf16 autocast for the backbone's and discriminators' matmuls and convolutions; "
              "the ISTFT head, STFTs, mel loss and loss sums stay fp32" + ("" if gpu_bf16 else " (set by the user)"))
    else:
        m.set("precision", "fp32", "fp32: no GPU here; bf16 autocast would be slower on this CPU" if not on_gpu
              else f"fp32: {no_bf16}")
    ampere = on_gpu and bool(gpus) and all(g.tf32 for g in gpus)
    m.set("tf32", ampere, "on: the GPU's fast matrix units take ordinary numbers too, slightly less exact and much "
          "faster (TF32, Ampere or newer)" if ampere else "off: it speeds up newer NVIDIA GPUs only (TF32, Ampere or newer)")
    m.set("cudnn_benchmark", on_gpu, "on: every batch has the same shape, so timing the GPU's convolution "
          "methods once pays off (cuDNN benchmark)" if on_gpu else "off: only an NVIDIA GPU has convolution methods to time (cuDNN)")
    for name, value, reason in (("grad_accumulation", 1, "one batch of crops per step (the Vocos recipe)"),
                                ("probe", False, "fixed-size crops: the batch is set in crops, not measured"),
                                ("compile", False, "the GAN runs eager"), ("pin_memory", False, "crops are made per step")):
        m.set(name, value, reason)
    return m


def set_effective_batch(m: Machine, cfg: TrainConfig, world_size: int, rec: dict) -> None:
    """Record micro-batch x accumulation x processes = frames per optimizer step, with its reason, and scale an
    automatic learning rate when many GPUs make the step larger than the one the rates were chosen for."""
    effective = m.max_frames_per_batch * m.grad_accumulation * max(1, world_size)
    planned = rec.get("effective_batch")
    by_user = cfg.max_frames_per_batch != AUTO or cfg.grad_accumulation != AUTO
    if planned and not by_user and planned.value == effective:  # the plan's reason already says how it adds up
        reason = planned.reason
    else:
        accum = m.grad_accumulation
        reason = (f"{m.max_frames_per_batch} frames x {accum} micro-batch{'es' if accum > 1 else ''}"
                  + (f" x {world_size} processes" if world_size > 1 else "") + f" = {effective} frames per optimizer "
                  "step" + ("; set by the user" if by_user else f". {planned.reason}" if planned else ""))
    m.set("effective_batch", effective, reason)
    scale = rec["lr_batch_scale"].value if "lr_batch_scale" in rec and not by_user else 1.0
    if m.auto_lr:
        rate, why = m.auto_lr
        m.set("lr", rate * scale, why if scale == 1.0 else f"{why}; x{scale:.2f} for the larger step "
                                                             f"({rec['lr_batch_scale'].reason})")


def family_auto_settings(cfg: TrainConfig) -> dict:
    """{setting: (value, why)}: what "auto" means for the settings no hardware decides (lr by model size, blanks), as
    the run's family says (its optional auto_settings, utils/family_contract.py), else as the default family says."""
    default = families.get(families.DEFAULT).auto_settings(cfg)
    own = family_optional(families.get(cfg.engine), "auto_settings")
    return {**default, **(own(cfg) if own else {})}


def fp8_unavailable(report, on_gpu: bool) -> str:
    """Why FP8 training cannot run here ("" when it can): it needs FP8 tensor cores and torchao."""
    if not on_gpu or not report.gpus:
        return ("quarter-size maths needs a CUDA GPU of compute 8.9 or newer (FP8 matmuls: Ada, Hopper); this "
                "run has none")
    weakest = min(report.gpus, key=lambda g: g.capability)
    if weakest.capability < (8, 9):
        return f"{weakest.name} (compute {weakest.compute_capability}) has no FP8 tensor cores (needs >= 8.9)"
    import importlib.util

    if importlib.util.find_spec("torchao") is None:
        return "torchao is not installed (pip install torchao)"
    return ""


def _resolve_fp8(cfg: TrainConfig, m: Machine, report, on_gpu: bool) -> None:
    if cfg.fp8 == AUTO or not as_bool(cfg.fp8, "fp8"):
        m.set("fp8", False, "set by the user" if cfg.fp8 != AUTO else
              "off unless asked: quarter-size numbers pay off only in much bigger layers than this model's (at most "
              "768 wide), and much of its time goes to convolutions, which they leave alone (FP8 matmuls, torchao "
              "float8)")
        return
    why_not = fp8_unavailable(report, on_gpu)
    m.set("fp8", not why_not, f"asked for, but off: {why_not}" if why_not else
          "set by the user: Linear layers with sizes divisible by 16 run FP8 matmuls (torchao float8 training)")


def _resolve_mas(asked: str, m: Machine, on_gpu: bool) -> None:
    """Where the monotonic alignment search runs, for a family that takes `mas` (Matcha, MMS)."""
    import importlib.util

    if asked != AUTO:  # one of MAS()'s choices: TrainConfig refused any other when it was made
        if asked == "triton" and not on_gpu:
            raise StudioError("mas triton runs on a CUDA GPU; use cython (or auto) on this machine.")
        m.set("mas", asked, "set by the user")
    elif on_gpu and importlib.util.find_spec("triton") is not None:
        m.set("mas", "triton", "words are lined up with the audio on the GPU in one go, so no step waits while "
                               "the CPU does it (one Triton kernel for the monotonic alignment search)")
    elif cython_available():
        m.set("mas", "cython", "the fastest way on a CPU, every clip of a batch at once (the compiled Cython search)"
              if not on_gpu else
              "done on the CPU while the GPU waits each step, since Triton is not installed (Cython kernel)")
    else:
        m.set("mas", "torch", "a slower way, since its compiled package is missing (torch monotonic alignment search)")


# ---------------------------------------------------------------------------- apply settings
def apply_backend_flags(m: Machine) -> None:
    """Process-wide switches. Each one is a line; the reason is in m.reasons."""
    if m.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = m.tf32  # TF32 tensor cores for fp32 matmuls
        torch.backends.cudnn.allow_tf32 = m.tf32  # ... and for cuDNN convolutions
        torch.backends.cudnn.benchmark = m.cudnn_benchmark  # time conv algorithms once per shape


def autocast(m: Machine):
    """The mixed-precision context of the forward pass (nullcontext in fp32)."""
    if m.precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=m.device, dtype=DTYPES[m.precision])


def grad_scaler(m: Machine) -> torch.amp.GradScaler:
    """fp16 gradients underflow without loss scaling; bf16/fp32 need none (scaler disabled = pass-through)."""
    return torch.amp.GradScaler(m.device if m.device in ("cuda", "cpu") else "cpu", enabled=m.precision == "fp16")


def apply_model_settings(model, m: Machine, compile_targets: list = ()) -> None:
    """Put the machine's settings on a model (Matcha, F5), and make the Machine say what really runs: the log and
    config.json never claim a kernel, FP8 or an alignment kernel that did not happen. `compile_targets`: the parts
    of `model` to torch.compile when the machine compiles (its family's, e.g. utils.matcha.settings.compile_targets);
    none leaves torch.compile to the loop (the trainer compiles its adapter's compile_targets() after its batch
    probe: every probed size would otherwise be a new shape to compile, minutes each)."""
    set_attention_honestly(model, m)  # the SDPA kernel every attention layer runs
    if hasattr(model, "mas_implementation"):  # models with an aligner (Matcha): where alignment search runs
        if m.mas == "triton" and (why := mas_disagreement("triton", m.device)):  # never train on a wrong alignment
            m.set("mas", "cython", f"the Triton kernel did not match the reference on this GPU ({why}): Cython kernel")
        model.mas_implementation = m.mas
    model.set_grad_checkpointing(m.grad_checkpointing)  # recompute block activations in backward
    if m.values.get("fp8"):  # before compile, so the compiled graphs contain the FP8 casts
        swapped = convert_to_fp8(model)
        m.set("fp8", swapped > 0, f"{swapped} Linear layers run FP8 matmuls (torchao float8 training)" if swapped else
              "asked for, but off: no Linear layer of this model has sizes FP8 matmuls accept (multiples of 16)")
    if compile_targets:
        compile_model(model, m, compile_targets)


def set_attention_honestly(model, m: Machine) -> None:
    """Point the model's attention layers at m.attention, then say which kernel runs: FlashAttention needs bf16 or
    fp16 and takes no padding mask, so in fp32 it never runs and with masks only on unpadded batches."""
    if not model.set_attention_backend(m.attention):
        m.set("attention", "none", "this model has no attention layers")
        return
    if m.attention == "flash" and m.device == "cuda":
        if m.precision == "fp32":
            m.set("attention", "efficient", "memory-efficient kernel: FlashAttention needs bf16 or fp16, this run is "
                                            "fp32")
            model.set_attention_backend("efficient")
        elif getattr(model, "masks_attention", True):
            m.set("attention", "flash", "FlashAttention on batches without padding; padded batches (most of them) run "
                                        "the memory-efficient kernel, since FlashAttention takes no padding mask")
    # tried once where the model trains (a GPU-only failure: a CPU test reaches it with a kernel the CPU lacks)
    on_its_device = next(model.parameters()).device.type == m.device
    if m.attention != "math" and on_its_device and (why := kernel_failure(model, DTYPES[m.precision])):
        m.set("attention", "math", f"the {m.attention} kernel does not run here ({why}): the standard one (SDPA math; "
                                   "it needs more memory, the batch probe measures with it)")
        model.set_attention_backend("math")


COMPILE_FAILED = "torch.compile failed"  # how a compile reason begins once compilation failed (compile_model)


def compile_model(model, m: Machine, targets: list) -> None:
    """torch.compile `targets` (parts of `model`) in place, guarded (utils/training/compiled.py), when m.compile.
    A compilation that fails runs eager, and the machine says so (compile: False, why): what reads it after the
    steps (a bench's row) never reports eager speed as compiled."""
    def failed(part: str, exc: BaseException) -> None:
        m.set("compile", False, f"{COMPILE_FAILED} in the {part} ({first_line(exc)}): ran uncompiled")

    if m.compile:
        CompiledParts(targets, part_names(targets, {"model": model}), failed)


def convert_to_fp8(model) -> int:
    """Swap Linear layers whose sizes FP8 matmuls accept (multiples of 16) for torchao's Float8Linear
    (same parameters and state_dict keys); returns how many were swapped."""
    from torchao.float8 import convert_to_float8_training

    def fits(module, name: str) -> bool:
        return (isinstance(module, torch.nn.Linear) and module.in_features % 16 == 0
                and module.out_features % 16 == 0)

    before = sum(type(mod) is torch.nn.Linear for mod in model.modules())
    convert_to_float8_training(model, module_filter_fn=fits)
    return before - sum(type(mod) is torch.nn.Linear for mod in model.modules())


def param_groups(model, weight_decay: float) -> list[dict]:
    """Decay matrices and convolutions; not norms, biases, embeddings or SnakeBeta's alpha/beta."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 and "emb" not in name else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model, cfg: TrainConfig, m: Machine) -> torch.optim.Optimizer:
    kind = {"fused": True} if m.fused_adamw else {"foreach": True}
    return torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=m.lr, betas=(cfg.beta1, cfg.beta2), **kind)


def ema_for_run(max_steps: int) -> tuple[float, str]:
    """(decay, why) of an EMA whose average spans about a tenth of the run (20 to 1000 updates)."""
    span = int(min(1000, max(20, max_steps // 10)))
    return round(1.0 - 1.0 / span, 6), (f"the average spans about the last {span} updates, a tenth of this "
                                       f"{max_steps}-step run (a fixed 0.999 spans 1000: on a short fine-tune the "
                                       "average lags behind what the weights have learnt, F5-TTS issue 1238); "
                                       "evaluations score it beside the raw weights and keep the better")


def early_evaluations(cfg) -> tuple[int, ...]:
    """The extra evaluation steps of `cfg.early_evals` (see TrainConfig): a curator hears early whether the voice,
    or the language, is coming, instead of waiting for the first scheduled evaluation."""
    value = str(cfg.early_evals).strip().lower()
    if value in ("none", "", "0"):
        return ()
    if value == AUTO:
        first = cfg.eval_every or cfg.max_steps
        return tuple(s for s in EARLY_EVALS if s < first and s < cfg.max_steps)
    try:
        steps = sorted({int(s) for s in value.replace(" ", "").split(",") if s})
    except ValueError:
        raise StudioError(f"early_evals must be auto, none or steps such as 100,300; not {cfg.early_evals!r}.") from None
    return tuple(s for s in steps if 0 < s < cfg.max_steps)


EARLY_EVALS = (200, 500, 1000)


def faster_rows(optimizer: torch.optim.Optimizer, table: torch.nn.Parameter, first: int, factor: float) -> None:
    """Rows `first`.. of `table` learn `factor` times faster than the rest: each step's change to them is scaled.
    For AdamW that is exactly a `factor` times larger learning rate (its update and decoupled decay are both
    proportional to it). Rows of one tensor cannot be a parameter group of their own; this gives them one's rate
    while the table stays one tensor for every checkpoint, voice and the reference's loader."""
    before = {}

    def keep(opt, args, kwargs):
        before["rows"] = table.detach()[first:].clone()

    def scale(opt, args, kwargs):
        old = before.pop("rows")
        with torch.no_grad():
            table[first:] = old + factor * (table[first:] - old)

    optimizer.register_step_pre_hook(keep)
    optimizer.register_step_post_hook(scale)


def ema_decay_at(step: int, cfg) -> float:
    """The EMA's decay after `step` updates: (1 + step) / (10 + step) until it reaches cfg.ema_decay (`cfg`: a
    TrainConfig or the loop's LoopSettings). A constant 0.999 from the first step would leave a 2000-step run's
    average 13 % random initial weights (0.999^2000)."""
    return min(cfg.ema_decay, (1 + step) / (10 + step))


def warmup_updates(cfg: TrainConfig) -> int:
    """The warm-up's updates: the asked number, never more than a tenth of the run (a finetune CLI's 20 000 would be
    the whole of a small run, F5-TTS issue 1259). Counted in updates, so more GPUs do not lengthen it."""
    return min(cfg.warmup_steps, max(1, cfg.max_steps // 10))


def lr_at(step: int, cfg: TrainConfig, peak: float | None = None) -> float:
    """Linear warm-up to `peak` (the resolved lr; cfg.lr when it is a number), then cosine decay to
    peak * min_lr_ratio at max_steps."""
    import math

    peak = float(cfg.lr) if peak is None else peak
    warmup = warmup_updates(cfg)
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, cfg.max_steps - warmup))
    return peak * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))
