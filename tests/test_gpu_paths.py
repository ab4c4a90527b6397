"""The code that only a GPU runs, reached from the CPU: guards over the source that keep a class of CUDA-only fault
out (a random draw on another device than its generator, a capability check that counts emulation, a process-wide
switch flipped in the app's process), and each CUDA-only finding of the GPU-paths review reproduced with a device
string, a fake report, a counting stub or a fake NVML. gpu_tests/ runs the same paths on a real GPU."""
from __future__ import annotations

import ast
import errno
import json
import os
import sys
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.conftest import ROOT
from tests.helpers import make_dataset
from utils import hardware
from utils.events import StudioError
from utils.training import compiled, failures
from utils.training import optimization as opt
from utils.training.config import TrainConfig
from utils.datasets import load_manifest
from utils.workspace import read_jsonl

torch.set_num_threads(1)
T4 = hardware.GPUInfo(0, "Tesla T4", 14.7, "7.5", 40)
A100 = hardware.GPUInfo(0, "NVIDIA A100-SXM4-80GB", 79.2, "8.0", 108)
APP_CODE = ("utils", "models", "webui", "app.py")


def python_files(*roots: str) -> list[Path]:
    out = []
    for root in roots:
        path = ROOT / root
        out += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return out


def calls(path: Path):
    """(call node, dotted name of what is called) of every call in a file."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            yield node, ast.unparse(node.func)


# ------------------------------------------------------------------------------------ guards over the source
RANDOM_DRAWS = ("rand", "randn", "randint", "randperm", "normal", "multinomial", "bernoulli", "poisson")


def test_every_seeded_random_draw_names_the_device_of_its_generator():
    """torch draws with a CUDA generator on the CPU fail ("Expected a 'cpu' device type for generator but found
    'cuda'"): an F5 voice could not speak on any GPU that way. A draw that takes generator= says device= too."""
    wrong = []
    for path in python_files(*APP_CODE, "bench", "gpu_tests"):
        for node, name in calls(path):
            keywords = {k.arg for k in node.keywords}
            if name.split(".")[-1] in RANDOM_DRAWS and "generator" in keywords and "device" not in keywords:
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert not wrong, wrong


def test_the_guard_catches_the_draw_that_silenced_f5_voices_on_gpus(tmp_path):
    """The guard's own check: the line as it was in utils/f5/speech.py is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nseed = torch.randint(0, 2**31 - 1, (1,), generator=generator)\n")
    node, name = next((n, f) for n, f in calls(bad) if f == "torch.randint")
    assert "generator" in {k.arg for k in node.keywords} and "device" not in {k.arg for k in node.keywords}


def test_gpu_capabilities_are_asked_only_through_utils_hardware():
    """torch.cuda.is_bf16_supported() says yes on a T4 (emulated bf16, slower than fp32); every capability question
    goes through utils.hardware's GPUInfo (bf16, TF32, FlashAttention at compute >= 8.0)."""
    asked = [f"{path.relative_to(ROOT)}:{node.lineno} {name}" for path in python_files(*APP_CODE)
             if path != ROOT / "utils" / "hardware.py" for node, name in calls(path)
             if name.split(".")[-1] in ("is_bf16_supported", "get_device_capability", "get_device_properties")]
    assert not asked, asked


def test_process_wide_backend_switches_are_flipped_only_by_the_trainer():
    """TF32 and cuDNN switches hold for a whole process: only the loop (a training process of its own) sets them;
    the app's process (UI, transcript check, speech) never does."""
    setters = []
    for path in python_files(*APP_CODE):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, (ast.AugAssign, ast.AnnAssign)) else []
            setters += [f"{path.relative_to(ROOT)}:{node.lineno}" for t in targets
                        if ast.unparse(t).startswith("torch.backends.")]
            if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in (
                    "apply_backend_flags", "set_float32_matmul_precision"):
                setters.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node.func)}")
    trainer = ["utils/training/loop.py"] + ["utils/training/optimization.py"] * 3  # one call, three switches
    assert sorted(s.split(":")[0] for s in setters) == trainer, setters
    engine_users = {str(p.relative_to(ROOT)) for p in python_files(*APP_CODE) for _, name in calls(p)
                    if name == "TrainingLoop"}
    # the trainers (each family's adapter, the vocoder's): never the app's services or tabs
    assert engine_users and not {u for u in engine_users if u.startswith(("webui/", "utils/inference", "utils/runs",
                                                                         "utils/transcripts", "app.py"))}, engine_users
    # loop.train (the families' one way in), the vocoder's trainer, a family's adapter
    assert all(u.endswith(("adapter.py", "training/loop.py", "vocoder/training.py")) for u in engine_users), \
        engine_users
    ui_trains = [f"{p.relative_to(ROOT)} {name}" for p in python_files("webui") for _, name in calls(p)
                 if name.endswith(("train_vocoder", "training.run", "acoustic.train", "adapter.train"))]
    assert not ui_trains, ui_trains


# ------------------------------------------------------------------------------------ precision on each card
def test_a_t4_never_trains_or_speaks_in_emulated_bf16(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # what torch says on a T4
    gan = opt.resolve_gan(device="cuda", gpus=[T4])
    assert gan.precision == "fp32" and "no bf16 tensor cores" in gan.reasons["precision"] and not gan.tf32
    with pytest.raises(StudioError, match="Tesla T4 .* has no bf16 tensor cores"):
        opt.resolve_gan(device="cuda", precision="bf16", gpus=[T4])
    assert opt.resolve_gan(device="cuda", gpus=[A100]).precision == "bf16"
    report = hardware.HardwareReport(gpus=[T4], cpu_count=2, ram_gb=12, disk_free_gb=50)
    report.recommended = hardware.recommend(report)
    assert opt.resolve(TrainConfig(preset="small"), report).precision == "fp16"
    with pytest.raises(StudioError, match="no bf16 tensor cores"):
        opt.resolve(TrainConfig(preset="small", precision="bf16"), report)
    assert hardware.inference_precision("cuda", [T4]) == "fp16"
    assert hardware.inference_precision("cuda", [A100]) == "bf16"
    assert hardware.inference_precision("cpu") == "fp32"


def test_an_f5_voice_speaks_under_the_autocast_its_card_gets():
    """F5 in fp32 takes seconds a sentence on a T4: on a GPU the voice speaks under bf16/fp16 autocast (here the CPU's
    own bf16 autocast stands in for CUDA's), and its mel comes out fp32 as Matcha's does."""
    from models.f5 import PRESETS, F5Config, F5TTS
    from utils.f5.speech import F5Speaker

    torch.manual_seed(0)
    model = F5TTS(F5Config.from_dict({**PRESETS["tiny"].to_dict(), "text_num_embeds": 20})).eval()
    seen = []
    model.transformer.proj_out.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    for precision, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        speaker = F5Speaker(model, torch.randn(12, model.cfg.mel_dim), [1, 2, 3], precision)
        out = speaker.synthesise_batch([[4, 5]], [0], n_steps=2, temperature=1.0, length_scale=1.0,
                                       generator=torch.Generator().manual_seed(0))
        assert seen[-1] == dtype and out[0]["mel"].dtype == torch.float32


# ------------------------------------------------------------------------------------ the batch probe
def test_the_probe_tries_the_largest_batch_the_plan_can_use_and_nothing_larger():
    from utils.training.probe import probe_limit, probe_max_frames

    limit = probe_limit(1, 0.85)
    assert limit == -(-hardware.TARGET_FRAMES_PER_STEP * 100 // 85)  # the plan's 40000 before the 15 % headroom
    tried = []
    fitted, _ = probe_max_frames(lambda f: tried.append(f), start=30_000, longest=500, limit=limit,
                                 log=lambda s: None)
    assert max(tried) == limit == fitted and len(tried) == 2  # 30000 fits, then the limit itself: done
    assert hardware.largest_useful_micro_batch(8) == 2 * hardware.MIN_USEFUL_FRAMES
    assert probe_limit(8, 1.0) == 2 * hardware.MIN_USEFUL_FRAMES


def test_the_probe_measures_beside_the_ema_and_the_optimizer_state_the_run_will_hold(tmp_path):
    """AdamW makes its two moments at the first step and the EMA is a third copy: for F5 on a T4 ~4 GB the probe
    did not see. Each probe step now runs with the EMA made and the moments' size held as ballast."""
    from utils.matcha.adapter import MatchaAdapter
    from utils.training.loop import TrainingLoop, drain
    from utils.training.faults import with_faults
    from utils.training.probe import probe_limit

    ws = make_dataset(tmp_path, n_train=4, n_val=1, max_chars=30)
    cfg = TrainConfig(workspace=str(ws.root), dataset="am", run="probe", preset="tiny", max_steps=1, lr=1e-3,
                      eval_every=0, checkpoint_every=1, probe="true", max_frames_per_batch="auto", ema_decay=0.99,
                      mcd="logmel", eval_clips=1, sample_clips=0, ode_steps=2, fault_oom_above_frames=1500)
    from utils.training import prepare_run

    prepare_run(cfg)
    adapter = MatchaAdapter(cfg)
    trainer = TrainingLoop(with_faults(adapter, cfg.fault_oom_above_frames,
                                       measure=lambda b: b["mels"].shape[0] * b["mels"].shape[-1]), echo=False)
    seen = []
    probe_batch = adapter.probe_batch

    def recording(frames):
        seen.append((frames, trainer.ema is not None, sum(t.numel() for t in trainer.probe_ballast)))
        return probe_batch(frames)

    adapter.probe_batch = recording
    assert drain(trainer.run())["state"] == "finished"
    moments = 2 * sum(p.numel() * p.element_size() for p in adapter.model.parameters() if p.requires_grad)
    assert seen and all(ema and ballast == moments for _, ema, ballast in seen), seen
    assert max(f for f, _, _ in seen) <= probe_limit(1, cfg.probe_headroom)
    assert trainer.probe_ballast == []  # handed back before training


# ------------------------------------------------------------------------------------ what runs is what is said
def test_f5_gets_the_attention_kernel_and_recomputation_the_log_names(tmp_path):
    from utils.f5.adapter import F5Adapter
    from utils.training import prepare_run
    from utils.training.loop import Context
    from utils.training.ddp import Dist

    ws = make_dataset(tmp_path, n_train=4, n_val=1, max_chars=30)
    cfg = TrainConfig(workspace=str(ws.root), dataset="am", run="f5", engine="f5", preset="tiny", max_steps=1,
                      attention="math", grad_checkpointing="true")
    prepare_run(cfg)
    adapter = F5Adapter(cfg)
    adapter.build(Context("cpu", Dist(), lambda *a, **k: None, None, lambda: opt.autocast(adapter.machine)))
    kernels = {m.backend for m in adapter.model.modules() if hasattr(m, "attend")}
    assert kernels == {"math"} and adapter.model.transformer.checkpoint_activations is True


def test_flash_and_fp8_are_named_only_where_they_run(monkeypatch):
    from models.matcha import MatchaConfig, MatchaTTS

    model = MatchaTTS(MatchaConfig.preset_config("tiny", n_symbols=20))
    fp32 = opt.Machine()
    for name, value in (("device", "cuda"), ("precision", "fp32"), ("attention", "flash")):
        fp32.set(name, value, "test")
    opt.set_attention_honestly(model, fp32)
    assert fp32.attention == "efficient" and "needs bf16 or fp16" in fp32.reasons["attention"]
    assert {m.backend for m in model.modules() if hasattr(m, "attend")} == {"efficient"}
    bf16 = opt.Machine()
    for name, value in (("device", "cuda"), ("precision", "bf16"), ("attention", "flash")):
        bf16.set(name, value, "test")
    opt.set_attention_honestly(model, bf16)
    assert bf16.attention == "flash" and "padded batches" in bf16.reasons["attention"]
    monkeypatch.setattr(opt, "convert_to_fp8", lambda model: 0)
    m = opt.Machine()
    for name, value in (("device", "cpu"), ("precision", "fp32"), ("attention", "math"), ("grad_checkpointing", False),
                        ("mas", "cython"), ("fp8", True)):
        m.set(name, value, "test")
    opt.apply_model_settings(model, m)
    assert m.fp8 is False and "no Linear layer" in m.reasons["fp8"]


@pytest.mark.parametrize("family", ["matcha", "f5"])
def test_an_attention_kernel_the_device_lacks_is_said_and_the_standard_one_runs(family):
    """A GPU without the chosen fused kernel for these shapes (an older card, a head size it does not take) ended
    the run at its first step ("No available kernel"). The CPU lacks the memory-efficient kernel: the same path."""
    from models.attention import kernel_failure

    if family == "matcha":
        from models.matcha import MatchaConfig, MatchaTTS
        model = MatchaTTS(MatchaConfig.preset_config("tiny", n_symbols=20))
    else:
        from models.f5 import PRESETS, F5Config, F5TTS
        model = F5TTS(F5Config.from_dict({**PRESETS["tiny"].to_dict(), "text_num_embeds": 20}))
    m = opt.Machine()
    for name, value in (("device", "cpu"), ("precision", "fp32"), ("attention", "efficient")):
        m.set(name, value, "test")
    opt.set_attention_honestly(model, m)
    assert m.attention == "math"
    assert "the efficient kernel does not run here (No viable backend" in m.reasons["attention"]
    assert {x.backend for x in model.modules() if hasattr(x, "attend")} == {"math"}
    assert kernel_failure(model, torch.float32) == ""  # what the run now uses runs
    for kernel in ("math", "flash"):  # kernels the CPU has: kept, nothing said
        m.set("attention", kernel, "test")
        opt.set_attention_honestly(model, m)
        assert m.attention == kernel and m.reasons["attention"] == "test"


def test_a_compiled_run_says_it_compiles_and_evaluates_without_compiling_again(tmp_path, monkeypatch):
    """Evaluation switches to eval mode and meets synthesis lengths: each a new graph to compile (minutes on a
    2-core Colab, with nothing in the log). A counting backend sees every compilation."""
    from utils.training import prepare_run, run

    built = []

    def counting(graph, example_inputs):
        built.append(len(graph.graph.nodes))
        return graph.forward

    monkeypatch.setattr(compiled, "OPTIONS", {"backend": counting})
    from utils.matcha.adapter import MatchaAdapter

    evaluate = MatchaAdapter.evaluate
    during_eval = []

    def counted_evaluate(self, step, samples):
        before = len(built)
        out = evaluate(self, step, samples)
        during_eval.append(len(built) - before)
        return out

    monkeypatch.setattr(MatchaAdapter, "evaluate", counted_evaluate)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "elsewhere"))  # put back after the test
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))  # as an earlier compilation in a process sets it
    ws = make_dataset(tmp_path, n_train=4, n_val=1, max_chars=30)
    cfg = TrainConfig(workspace=str(ws.root), dataset="am", run="compiled", preset="tiny", max_steps=2, lr=1e-3,
                      eval_every=1, checkpoint_every=100, compile="true", max_frames_per_batch=400,
                      grad_accumulation=1, mcd="logmel", eval_clips=1, sample_clips=0, ode_steps=2)
    assert run(prepare_run(cfg))["state"] == "finished"
    log = (ws.run_dir("compiled") / "train.log").read_text(encoding="utf-8")
    assert built and "compiling 2 part(s) of the model" in log and "first step took" in log
    assert during_eval == [0] * 4, during_eval  # 2 evaluations x (the averaged, the raw weights)
    # Inductor's kernels are kept in the workspace (a resume, a new Colab session reuse them), and what each graph
    # cost is kept for the next run's decision
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str((ws.root / "cache" / "inductor").resolve())
    from torch._inductor.runtime.cache_dir_utils import triton_cache_dir

    assert Path(triton_cache_dir(0)).is_relative_to(ws.root / "cache" / "inductor")  # the GPU kernels too
    costs = read_jsonl(ws.root / "cache" / "compile_seconds.jsonl")
    assert len(costs) == len(built) and all(c["seconds"] >= 0 and c["machine"].endswith("cores") for c in costs)


# ------------------------------------------------------------------------------------ the app's own process
def test_the_transcript_checks_aligner_trains_in_a_process_of_its_own(tmp_path):
    """Trained in a thread of the app, the aligner left its GPU memory cached in the app and its TF32 switch set
    process-wide; now it is a queued training run whose trainer is another process."""
    from utils.events import run_to_end
    from utils.transcripts import scoring

    ws = make_dataset(tmp_path, n_train=5, n_val=1, max_chars=30)
    result = run_to_end(scoring.check_transcripts(ws, "am", method="alignment", steps=2, device="cpu"))
    assert result["rows"]
    status = json.loads((ws.run_dir(scoring.check_run("am")) / "status.json").read_text())
    assert status["state"] == "finished" and status["pid"] != os.getpid() and status["devices"] == "cpu"
    config = json.loads((ws.run_dir(scoring.check_run("am")) / "config.json").read_text())
    assert config["resolved"]["compile"] is False and config["resolved"]["probe"] is False


def test_the_alignment_kernels_start_up_check_runs_every_warp_count(monkeypatch):
    """Checked only on batches under 40 tokens, the Triton kernel was proved with one warp; real batches with
    blanks (300-800 tokens) run 4 or 8."""
    import models.mas_triton
    from models.alignment import CHECK_TOKENS, mas_disagreement, maximum_path_torch

    widths = []

    def reference(log_p, mask):  # stands in for the GPU kernel: same answer, records the batch width
        widths.append(log_p.shape[1])
        return maximum_path_torch(log_p, mask)

    monkeypatch.setattr(models.mas_triton, "maximum_path_triton", reference)
    assert mas_disagreement("triton", "cpu") == ""
    assert {models.mas_triton.kernel_warps(n) for n in widths} == {1, 2, 4, 8}
    assert sorted(set(widths)) == sorted(CHECK_TOKENS)


class FakeNVML(SimpleNamespace):
    """pynvml as a container or a MIG slice shows it: memory in use, no processes, no utilization counter."""
    class NVMLError(Exception):
        pass

    def __init__(self, used_gb: float, processes: list, utilization: bool):
        super().__init__(used_gb=used_gb, processes=processes, utilization=utilization)

    def nvmlInit(self): pass
    def nvmlShutdown(self): pass
    def nvmlDeviceGetCount(self): return 1
    def nvmlDeviceGetHandleByIndex(self, i): return i
    def nvmlDeviceGetMemoryInfo(self, h): return SimpleNamespace(used=self.used_gb * 2**30, total=80 * 2**30)
    def nvmlDeviceGetComputeRunningProcesses(self, h): return self.processes

    def nvmlDeviceGetUtilizationRates(self, h):
        if not self.utilization:
            raise FakeNVML.NVMLError("Not Supported")
        return SimpleNamespace(gpu=37)


def test_gpu_readings_in_a_container_and_on_a_mig_slice(monkeypatch):
    from webui.system import sample_usage

    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML(used_gb=20.0, processes=[], utilization=False))
    now = hardware.live_usage()
    assert now["gpus"][0]["processes"] is None and now["gpus"][0]["util_percent"] is None
    text, *_ = sample_usage([])
    assert "hidden here" in text and "busy: not measured here" in text and "no programs" not in text
    assert hardware.process_gpu_usage(os.getpid()) == {"nvml_device_used_gb": 20.0}
    mine = SimpleNamespace(pid=os.getpid(), usedGpuMemory=3 * 2**30)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNVML(used_gb=20.0, processes=[mine], utilization=True))
    assert hardware.process_gpu_usage(os.getpid()) == {"nvml_device_used_gb": 20.0, "gpu_util_percent": 37.0,
                                                       "nvml_process_gb": 3.0}
    idle = FakeNVML(used_gb=0.3, processes=[], utilization=True)
    monkeypatch.setitem(sys.modules, "pynvml", idle)
    assert hardware.live_usage()["gpus"][0]["processes"] == []


def test_an_unsupported_cudnn_setting_is_not_taken_for_out_of_memory():
    error = RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a "
                         "non-contiguous input.")
    assert not failures.is_oom(error) and "precision to fp32" in failures.explain_failure(error)
    assert failures.is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    # the libraries' own words when a handle or workspace finds no memory left: halving the batch helps there too
    for said in ("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
                 "cuDNN error: CUDNN_STATUS_ALLOC_FAILED", "cuFFT error: CUFFT_ALLOC_FAILED"):
        assert failures.is_oom(RuntimeError(said)), said
    assert not failures.is_oom(RuntimeError("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm`"))


# ------------------------------------------------------------------------------------ checkpoints of a large model
def test_a_checkpoint_streams_to_disk_instead_of_doubling_in_memory(tmp_path):
    """F5's trainer state (~5.4 GB) went through an in-memory buffer: twice its size in RAM at each save."""
    from utils.training import checkpoint as ckpt

    weights = {"w": torch.randn(4_000_000)}  # 16 MB
    state = {"modules": {"model": {"w": torch.randn(4_000_000)}}, "optimizers": {"m": torch.randn(8_000_000)}}
    tracemalloc.start()
    folder = ckpt.save_checkpoint(tmp_path / "step-1", weights, {"step": 1}, state)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 8 * 2**20, peak  # the state alone is 48 MB
    assert torch.equal(ckpt.load_weights(folder)["w"], weights["w"])
    assert torch.equal(ckpt.load_trainer_state(folder)["optimizers"]["m"], state["optimizers"]["m"])


def test_a_full_disk_while_streaming_a_checkpoint_is_named_as_a_full_disk(tmp_path):
    """Written by safetensors or torch.save straight to the file, a full disk is still the OSError the trainer names
    ("The disk is full ..."), not "unexpected pos 704 vs 598" or a library's serializing error."""
    from tests.test_faults import small_disk
    from utils.training import checkpoint as ckpt

    with small_disk(tmp_path / "disk", "2m") as disk:
        for weights, state in (({"w": torch.zeros(1_000_000)}, None), ({"w": torch.zeros(10)},
                                                                         {"big": torch.zeros(1_000_000)})):
            with pytest.raises(OSError) as full:
                ckpt.save_checkpoint(disk / "step-1", weights, {"step": 1}, state)
            assert full.value.errno == errno.ENOSPC
            assert not list(disk.iterdir())  # the half-written folder is gone


def test_only_the_newest_f5_checkpoint_keeps_its_trainer_state(tmp_path):
    from utils.training import checkpoint as ckpt

    for step in (1, 2, 3):
        ckpt.save_checkpoint(tmp_path / f"step-{step}", {"w": torch.zeros(3)}, {"step": step}, {"step": step})
        ckpt.prune(tmp_path, keep=3, state_newest_only=True)
    assert [(p / "trainer_state.pt").exists() for _, p in ckpt.step_folders(tmp_path)] == [False, False, True]
    assert ckpt.latest_resumable(tmp_path) == tmp_path / "step-3"
    assert all((p / "model.safetensors").exists() for _, p in ckpt.step_folders(tmp_path))


def test_a_vocos_config_whose_head_names_no_padding_is_refused_not_misread(tmp_path):
    """The reference Vocos reads a head without `padding` as "same" (the mel extractor's default is "center"); read
    as "center", a third-party vocoder was vocoded shifted instead of being refused."""
    from utils.vocoder import public_config

    yaml_text = ("feature_extractor:\n  class_path: vocos.feature_extractors.MelSpectrogramFeatures\n  init_args:\n"
                 "    sample_rate: 24000\n    n_fft: 1024\n    hop_length: 256\n    n_mels: 100\n"
                 "backbone:\n  class_path: vocos.models.VocosBackbone\n  init_args:\n    input_channels: 100\n"
                 "    dim: 512\n    intermediate_dim: 1536\n    num_layers: 8\n"
                 "head:\n  class_path: vocos.heads.ISTFTHead\n  init_args:\n    dim: 512\n    n_fft: 1024\n"
                 "    hop_length: 256\n")
    path = tmp_path / "config.yaml"
    path.write_text(yaml_text)
    with pytest.raises(StudioError, match="names none, which Vocos reads as 'same'"):
        public_config(path)
    path.write_text(yaml_text + "    padding: center\n")
    assert public_config(path).n_fft == 1024


# ------------------------------------------------------------------------------------ separation batches
def test_music_removal_batched_gives_what_each_chunk_gives_alone(monkeypatch):
    """The short last chunk of a file was padded with zeros to its batch's width: on a GPU (batches of 16) the end
    of every long file came out other than on a CPU (batches of 1)."""
    import numpy as np

    from utils.separation import api, spleeter

    torch.manual_seed(0)
    states = [net.state_dict() for net in spleeter.build_networks("cpu")]  # random: only equality is asked
    monkeypatch.setattr(spleeter, "load_networks", lambda device: spleeter.build_networks(device, states))
    api.get_backend.cache_clear()  # a backend made with the random networks must not outlive this test
    monkeypatch.setattr(api, "get_backend", api.get_backend.__wrapped__)
    mixture = (0.1 * np.random.default_rng(0).standard_normal((2, 44_100 * 15))).astype(np.float32)
    alone = api.separate_verbose(mixture, 44_100, backend="spleeter", gate=False, batch=1, device="cpu").speech
    together = api.separate_verbose(mixture, 44_100, backend="spleeter", gate=False, batch=4, device="cpu").speech
    assert np.abs(together - alone).max() < 1e-4 * np.abs(alone).max()


# ------------------------------------------------------------------------------------ the job queue's GPUs
def running(ws, name: str, devices: str, nproc: int = 1, state: str = "running"):
    from utils import jobs

    ws.run_dir(name).mkdir(parents=True, exist_ok=True)
    jobs.update_status(ws.run_dir(name), state=state, devices=devices, nproc=nproc, pid=os.getpid(),
                       launcher_pid=os.getpid(), machine=jobs.machine_id(), heartbeat=__import__("time").time(),
                       queued=1.0)


def test_a_run_on_every_gpu_and_a_run_on_gpu_0_exclude_each_other(tmp_path):
    from utils import jobs
    from utils.runs.control import pick_devices
    from utils.workspace import Workspace

    ws = Workspace.open(tmp_path)
    running(ws, "all-gpus", "cuda:0,1", nproc=2)
    assert jobs.device_busy(ws, "cuda:0") == ["all-gpus"] and jobs.device_busy(ws, "cuda:1") == ["all-gpus"]
    assert jobs.device_busy(ws, "cpu") == [] and jobs._holders(ws.run_dir("next"), "cuda:0") == ["all-gpus"]
    assert pick_devices(ws, 3, all_gpus=False) == ("cuda:2", 1)
    both = jobs._device_locks(ws.run_dir("all-gpus"), "cuda:0,1")
    assert jobs._take_all(both)
    one = jobs._device_locks(ws.run_dir("next"), "cuda:0")
    assert not jobs._take_all(one)  # GPU 0 is held by the run on every GPU
    for lock in both:
        lock.close()
    assert jobs._take_all(one)


def test_a_run_gets_the_machines_gpus_the_app_was_given(tmp_path, monkeypatch):
    from utils import jobs
    from utils.workspace import Workspace

    assert jobs.physical_gpus("0", "2,3") == "2" and jobs.physical_gpus("0,1", "2,3") == "2,3"
    assert jobs.physical_gpus("1", "") == "1"
    ws = Workspace.open(tmp_path)
    started = {}

    class Popen:
        def __init__(self, command, env, **kw):
            started.update(env)
            self.pid = 424242  # never a process of this machine's: nothing is signalled

    monkeypatch.setattr(jobs.subprocess, "Popen", Popen)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    (ws.run_dir("r") / "config.json").parent.mkdir(parents=True)
    jobs.start(ws, "r", ws.run_dir("r") / "config.json", devices="cuda:0")
    assert started["CUDA_VISIBLE_DEVICES"] == "2"


def test_the_first_stop_of_a_torchrun_run_asks_through_the_stop_file_alone(tmp_path, monkeypatch):
    """torchrun passes a SIGTERM on to its ranks and kills them 30 s later, in the middle of their last save."""
    from utils import jobs
    from utils.workspace import Workspace

    ws = Workspace.open(tmp_path)
    signalled = []
    monkeypatch.setattr(jobs, "_signal", lambda pid, sig: signalled.append(pid))
    for name, nproc in (("two-gpus", 2), ("one-gpu", 1)):
        running(ws, name, "cuda:0,1" if nproc == 2 else "cuda:2", nproc=nproc)
        jobs.stop(ws, name)
        assert (ws.run_dir(name) / "STOP").exists() and jobs.read_status(ws.run_dir(name))["state"] == "stopping"
    assert signalled == [os.getpid(), os.getpid()]  # the one-GPU run's trainer and launcher only


def test_resume_picks_the_devices_of_the_machine_it_resumes_on(tmp_path, monkeypatch):
    from utils import jobs
    from utils.runs import control
    from utils.workspace import Workspace

    ws = Workspace.open(tmp_path)
    monkeypatch.setattr(hardware, "query_gpus", lambda: [A100])
    asked = {}
    monkeypatch.setattr(jobs, "start", lambda ws, name, path, devices, nproc, **kw: asked.update(
        {name: (devices, nproc)}) or {})
    for name, device in (("was-on-two", "auto"), ("cpu-run", "cpu")):
        running(ws, name, "cuda:0,1", nproc=2, state="stopped")
        (ws.run_dir(name) / "config.json").write_text(json.dumps({"train": {"device": device}}))
        control.resume_training(ws, name)
    assert asked == {"was-on-two": ("cuda:0", 1), "cpu-run": ("cpu", 1)}


def test_gpu_metrics_name_the_card_by_its_pci_address(monkeypatch):
    props = SimpleNamespace(pci_domain_id=0, pci_bus_id=0x3B, pci_device_id=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    assert hardware.pci_bus_id(0) == "00000000:3B:00.0"
    nvml = FakeNVML(used_gb=5.0, processes=[], utilization=True)
    by_bus = []
    nvml.nvmlDeviceGetHandleByPciBusId = lambda bus: by_bus.append(bus) or 7
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert hardware.process_gpu_usage(os.getpid(), 0, "00000000:3B:00.0")["nvml_device_used_gb"] == 5.0
    assert by_bus == ["00000000:3B:00.0"]


def test_ranks_wait_for_rank_0s_evaluation_and_save_longer_than_nccls_default(monkeypatch):
    from datetime import timedelta

    from utils.training import ddp

    joined = {}
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: joined.update(device=i))
    monkeypatch.setattr(ddp.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(ddp.dist, "init_process_group", lambda **kw: joined.update(kw))
    d = ddp.setup("cuda")
    assert d.rank == 1 and joined["backend"] == "nccl" and joined["device"] == 1
    assert joined["timeout"] >= timedelta(minutes=30) and joined["device_id"] == torch.device("cuda", 1)


# ------------------------------------------------------------------------------------ the app's GPU memory
def test_recognition_in_the_app_lets_the_gpu_go_and_keeps_off_a_gpu_a_run_holds(tmp_path, monkeypatch):
    from tests.helpers import tiny_recognizer
    from utils.events import run_to_end
    from utils.transcripts import asr
    from utils.workspace import write_jsonl

    ws = make_dataset(tmp_path / "ws", n_train=3, n_val=0)
    rows = load_manifest(ws, "am")
    rows[0].update(text="", normalized="")
    write_jsonl(ws.dataset_dir("am") / "manifest.jsonl", rows)
    monkeypatch.setenv(asr.SOURCE_ENV, str(tiny_recognizer(tmp_path / "rec" / "tiny-amharic-ctc")))
    run_to_end(asr.fetch(ws))

    class OnTheGPU(asr.Recognizer):  # the real recognizer, run on the CPU, said to be on "cuda"
        def __init__(self, folder, device):
            super().__init__(folder, "cpu")
            self.device = device

        def transcribe(self, waves):
            said, self.device = self.device, "cpu"
            try:
                return super().transcribe(waves)
            finally:
                self.device = said

    freed = []
    monkeypatch.setattr(asr, "Recognizer", OnTheGPU)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: freed.append(1))
    run_to_end(asr.transcribe_missing(ws, "am"))
    assert asr._LOADED == {} and freed  # loaded on the GPU for the drafts, then let go
    assert asr.work_device(ws) == "cuda"
    running(ws, "training", "cuda:0")
    assert asr.work_device(ws) == "cpu" and asr.work_device(ws, "cuda") == "cuda"


def test_speech_models_cached_on_the_gpu_are_let_go_when_a_run_takes_it(tmp_path, monkeypatch):
    from utils.inference import voices
    from utils.workspace import Workspace

    ws = Workspace.open(tmp_path)
    freed = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: freed.append(1))
    monkeypatch.setattr(voices, "_MODELS", voices.OrderedDict({("acoustic:cuda", "a", 1): "gpu model",
                                                               ("acoustic:cpu", "a", 1): "cpu model"}))
    assert voices.pick_device(ws, "auto") == ("cuda", "GPU") and len(voices._MODELS) == 2
    running(ws, "training", "cuda:0")
    assert voices.pick_device(ws, "auto")[0] == "cpu"
    assert list(voices._MODELS) == [("acoustic:cpu", "a", 1)] and freed


@pytest.mark.parametrize("where", ["forward", "backward"])
def test_a_compilation_that_fails_mid_run_costs_speed_not_the_run(tmp_path, monkeypatch, where):
    """On the first GPU run Inductor raised while it rebuilt a graph for a new shape, a minute in, and the run died.
    A backend that raises on its second compilation (of a forward graph; or of a backward graph, which AOT autograd
    builds at the first backward, outside the compiled call): the run finishes, says so once (log, config.json's
    reasons, status), and the failing step and every later one run eager."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    from utils.training import prepare_run, run

    built = []

    def second_one_fails(graph, example_inputs):
        built.append(len(graph.graph.nodes))
        if len(built) == 2:
            raise RuntimeError("Inductor could not tile this node\nmore detail")
        return make_boxed_func(graph.forward) if where == "backward" else graph.forward

    backend = second_one_fails if where == "forward" else aot_autograd(
        fw_compiler=lambda graph, inputs: make_boxed_func(graph.forward), bw_compiler=second_one_fails)
    monkeypatch.setattr(compiled, "OPTIONS", {"backend": backend})
    torch._dynamo.reset()
    ws = make_dataset(tmp_path, n_train=6, n_val=1, max_chars=30)
    cfg = TrainConfig(workspace=str(ws.root), dataset="am", run="fails", preset="tiny", max_steps=4, lr=1e-3,
                      eval_every=0, checkpoint_every=100, compile="true", max_frames_per_batch=400,
                      grad_accumulation=1, mcd="logmel", eval_clips=1, sample_clips=0, ode_steps=2, log_every=1)
    result = run(prepare_run(cfg))
    assert result["state"] == "finished" and result["step"] == 4, result
    run_dir = ws.run_dir("fails")
    log = (run_dir / "train.log").read_text(encoding="utf-8")
    assert log.count("(torch.compile) failed") == 1, log
    assert "RuntimeError: Inductor could not tile this node" in log and "continues uncompiled" in log
    assert ("in the backward pass" in log) == (where == "backward")
    assert len(built) == 2, built  # nothing compiled after the failure
    config = json.loads((run_dir / "config.json").read_text())
    assert config["resolved"]["compile"] is False and "(torch.compile) failed" in config["reasons"]["compile"]
    status = json.loads((run_dir / "status.json").read_text())
    assert "(torch.compile) failed" in status["compile_note"] and status["state"] == "finished"
    from utils.runs.views import view  # the Training tab's summary of the run says it too
    shown = view(ws, "fails")
    assert "(torch.compile) failed" in shown.summary()
    rows = [r for r in shown.metrics if "loss" in r and "mcd" not in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]


@pytest.mark.parametrize("fallback, budget", [("fp32", 1), ("split", compiled.MAX_GRAPHS)])
def test_after_a_fallback_the_graphs_are_built_again_within_the_budget_or_compiling_stops(tmp_path, monkeypatch,
                                                                                        fallback, budget):
    """Going on in fp32 (every graph is specialised on the autocast state) or cutting batches after an out-of-memory
    (a new shape) threw the compiled graphs away in silence; the budget was usually spent by then and the rest of the
    run went eager while config.json still said `compile: true`. Where each part's budget has room the graphs are
    built again, said in the log; where it has none, compiling stops and config.json and the status say why."""
    from utils.training import prepare_run, run

    built = []

    def counting(graph, example_inputs):
        built.append(len(graph.graph.nodes))
        return graph.forward

    monkeypatch.setattr(compiled, "OPTIONS", {"backend": counting})
    monkeypatch.setattr(compiled, "MAX_GRAPHS", budget)
    ws = make_dataset(tmp_path, n_train=4, n_val=1, max_chars=30)
    faults = ({"precision": "bf16", "fault_nan_steps": [1, 2], "max_bad_steps": 2} if fallback == "fp32" else
              {"fault_oom_above_frames": 600})  # two clips of 512 frames do not fit; one does
    cfg = TrainConfig(workspace=str(ws.root), dataset="am", run=fallback, preset="tiny", max_steps=5, lr=1e-3,
                      evaluate=False, checkpoint_every=100, compile="true", max_frames_per_batch=1024,
                      length_multiple=512, grad_accumulation=1, log_every=1, **faults)  # one shape: a graph a part
    assert run(prepare_run(cfg))["state"] == "finished"
    log = (ws.run_dir(fallback) / "train.log").read_text(encoding="utf-8")
    config = json.loads((ws.run_dir(fallback) / "config.json").read_text())
    if fallback == "fp32":  # one graph a part built for bf16; the budget has no room for fp32's
        assert "continuing in fp32" in log and len(built) == 2, built
        reason = config["reasons"]["compile"]
        assert config["resolved"]["compile"] is False and "stopped at step 3: the run went on in fp32" in reason
        assert "continues uncompiled" in json.loads((ws.run_dir(fallback) / "status.json").read_text())["compile_note"]
    else:
        assert "cut in 2 pieces after running out of memory: the compiled graphs are built again, up to 1 a part" in log
        assert config["resolved"]["compile"] is True and len(built) == 2, built


def test_a_compile_failure_is_told_from_the_models_own_errors(monkeypatch):
    """The guard redoes a failing compiled call eager; an error the model raises eagerly too is the model's and goes
    on unchanged (never hidden as a 'compile failure'); an out-of-memory goes on to the loop's halving."""
    failures = []

    class Buggy(torch.nn.Module):
        def forward(self, x):
            raise ValueError("the model's own bug")

    class Fine(torch.nn.Module):
        def forward(self, x):
            return x * 2

    def fails(graph, example_inputs):
        raise RuntimeError("backend down\nsecond line")

    monkeypatch.setattr(compiled, "OPTIONS", {"backend": fails})
    torch._dynamo.reset()
    buggy, fine = Buggy(), Fine()
    mine = compiled.CompiledParts([buggy], ["buggy"], lambda name, exc: failures.append(name))
    with pytest.raises(ValueError, match="own bug"):
        buggy(torch.ones(3))
    assert mine.failure is None and failures == []
    parts = compiled.CompiledParts([fine], ["fine"], lambda name, exc: failures.append(name))
    assert torch.equal(fine(torch.ones(2)), torch.full((2,), 2.0))  # redone eager
    assert parts.failure == "fine: RuntimeError: backend down" and not parts and failures == ["fine"]
    assert fine._compiled_call_impl is None and torch.equal(fine(torch.ones(1)), torch.full((1,), 2.0))
    assert not compiled.is_compile_failure(ValueError("plain"))
    assert not compiled.is_compile_failure(torch.OutOfMemoryError("CUDA out of memory"))
    try:
        torch.compile(lambda x: x + 1, backend=fails)(torch.ones(1))
    except Exception as exc:  # what Dynamo raises for a failing backend
        assert compiled.is_compile_failure(exc)
    else:
        raise AssertionError("the failing backend did not raise")


def test_while_a_graph_compiles_the_status_says_so_and_the_eta_leaves_compiling_out(tmp_path, monkeypatch):
    """Each compile froze the step counter for minutes with no word, and the ETA counted compiling as training (794 h
    after a 143 s first step). A stand-in backend that takes a second more a graph: status.json, read as the Training
    tab and `app.py list` read it, says "compiling graph k of ~n (part)" meanwhile, and the ETAs it shows are those of
    the steps left at the pace of steps that compiled nothing, far below what the compiling first step took."""
    import re
    import threading
    import time

    from utils.training import prepare_run, run, runfiles
    from utils.workspace import read_json

    def slow(graph, example_inputs):
        time.sleep(1.0)
        return graph.forward

    monkeypatch.setattr(compiled, "OPTIONS", {"backend": slow})
    monkeypatch.setattr(runfiles, "HEARTBEAT_S", 0.1)  # the step and its ETA reach status.json at each heartbeat
    ws = make_dataset(tmp_path, n_train=4, n_val=1, max_chars=30)
    seen, done = [], threading.Event()

    def watch():  # what a poll of the run's files finds
        while not done.is_set():
            if status := read_json(ws.run_dir("slow") / "status.json", default=None):
                seen.append(status)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    cfg = TrainConfig(workspace=str(ws.root), dataset="am", run="slow", preset="tiny", max_steps=8, lr=1e-3,
                      evaluate=False, checkpoint_every=100, compile="true", max_frames_per_batch=1024,
                      length_multiple=512, grad_accumulation=1, log_every=1)  # every clip in one bucket: 2 graphs
    try:
        assert run(prepare_run(cfg))["state"] == "finished"
    finally:
        done.set()
        watcher.join()
    running = [s for s in seen if s.get("state") == "running"]
    said = [s["message"] for s in running if s.get("message", "").startswith("compiling graph")]
    assert {"compiling graph 1 of ~2 (encoder)", "compiling graph 2 of ~2 (decoder.estimator)"} <= set(said), said
    log = (ws.run_dir("slow") / "train.log").read_text(encoding="utf-8")
    assert re.search(r"graph 1 of ~2 built for the encoder \(input 2x\d+\) in \d+\.\d s", log), log
    first_step = float(re.search(r"first step took (\d+) s", log).group(1))  # 2 graphs: 2 s and more
    etas = [s["eta_s"] for s in running if s.get("eta_s") is not None]
    assert etas and max(etas) < first_step / 2, (etas, first_step)  # counted as before: 7 x the first step


def test_f5s_compiled_transformer_builds_one_graph_a_batch_shape(tmp_path, monkeypatch):
    """F5's DiT compiles by the same rule as Matcha: a graph per shape of the plan. Its audio-drop coin reached the
    compiled transformer as a Python flag, so each shape was compiled twice (dropped and kept)."""
    import re

    from utils.training import prepare_run, run

    built = []

    def counting(graph, example_inputs):
        built.append(len(graph.graph.nodes))
        return graph.forward

    monkeypatch.setattr(compiled, "OPTIONS", {"backend": counting})
    ws = make_dataset(tmp_path, n_train=6, n_val=1, max_chars=30)
    cfg = TrainConfig.from_dict(dict(engine="f5", workspace=str(ws.root), dataset="am", run="f5", preset="tiny",
                                     max_steps=12, evaluate=False, checkpoint_every=100, compile="true",
                                     max_frames_per_batch=600, grad_accumulation=1))
    assert run(prepare_run(cfg))["state"] == "finished"
    log = (ws.run_dir("f5") / "train.log").read_text(encoding="utf-8")
    shapes = int(re.search(r"batches: (\d+) shapes", log).group(1))
    assert len(built) == shapes and 12 / shapes >= 3, (built, shapes)  # each shape met several times, both coins


def test_each_compiled_part_has_a_graph_budget_of_its_own(monkeypatch):
    """Dynamo counts a function's graphs on its code object, and `module._call_impl` was one code object for every
    part: two parts of one class shared one budget, the first used it up and the second ran eager. Now part B still
    compiles its shapes after part A reached its limit, and each new graph is told (part, shape, seconds)."""
    built, told = [], []

    def counting(graph, example_inputs):
        built.append(graph)
        return graph.forward

    class Part(torch.nn.Module):
        def forward(self, x):
            return x * 2

    monkeypatch.setattr(compiled, "OPTIONS", {"backend": counting})
    monkeypatch.setattr(compiled, "MAX_GRAPHS", 2)
    torch._dynamo.reset()
    a, b = Part(), Part()
    with torch._dynamo.config.patch(recompile_limit=1, accumulated_recompile_limit=1):  # CompiledParts raises them
        parts = compiled.CompiledParts([a, b], ["a", "b"],
                                       on_graph=lambda name, shape, seconds: told.append((name, shape, seconds >= 0)))
        for n in (1, 2, 3):  # the third shape is past a's budget: it runs eager
            assert torch.equal(a(torch.ones(n)), torch.full((n,), 2.0))
        for n in (1, 2):
            b(torch.ones(n, 2))
    assert parts.graphs_by_part() == {"a": 2, "b": 2} and len(built) == 4
    assert told == [("a", "1", True), ("a", "2", True), ("b", "1x2", True), ("b", "2x2", True)]


def test_a_bench_model_whose_compilation_fails_says_it_ran_eager(monkeypatch):
    """bench/common.train_step compiles through apply_model_settings, with no loop to tell: a failure there used to
    run eager in silence, and the ladder's compiled rows printed eager speed as compiled. The machine says it."""
    from models.matcha import MatchaConfig, MatchaTTS
    from tests.test_training_optimizations import cpu_report
    from utils.matcha.settings import compile_targets
    from utils.training import optimization as opt

    def fails(graph, example_inputs):
        raise RuntimeError("Inductor could not tile this node")

    monkeypatch.setattr(compiled, "OPTIONS", {"backend": fails})
    torch._dynamo.reset()
    m = opt.resolve(TrainConfig.from_dict({"preset": "tiny", "compile": "true", "mas": "torch"}), cpu_report())
    model = MatchaTTS(MatchaConfig.preset_config("tiny", n_symbols=20))
    opt.apply_model_settings(model, m, compile_targets(model))
    assert m.compile is True  # nothing compiled yet
    losses = model(torch.randint(1, 20, (2, 8)), torch.tensor([8, 6]), torch.randn(2, 100, 40), torch.tensor([40, 32]),
                   torch.zeros(2, dtype=torch.long))
    assert torch.isfinite(losses["loss"])  # redone eager
    assert m.compile is False and m.reasons["compile"].startswith(opt.COMPILE_FAILED)
    assert "RuntimeError: Inductor could not tile this node" in m.reasons["compile"]


def test_the_graph_limit_is_raised_under_either_name_dynamo_has_used(monkeypatch):
    """torch 2.7 renamed cache_size_limit to recompile_limit; the requirements allow 2.5, where setting the new name
    would raise AttributeError at the first compiled run."""
    class OlderConfig:  # what torch._dynamo.config holds on torch 2.5: only the older name
        cache_size_limit = 8

    monkeypatch.setattr(torch._dynamo, "config", OlderConfig())
    compiled.raise_limit("recompile_limit", "cache_size_limit", compiled.MAX_GRAPHS)
    assert torch._dynamo.config.cache_size_limit == compiled.MAX_GRAPHS
    assert not hasattr(torch._dynamo.config, "recompile_limit")
