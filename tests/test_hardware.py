"""Hardware detection and the settings each machine class gets."""
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from utils import hardware
from utils.hardware import GPUInfo, HardwareReport, recommend

REQUIRED = ("precision", "tf32", "attention", "grad_checkpointing", "compile", "max_frames_per_batch",
            "grad_accumulation", "num_workers", "pin_memory", "separation_batch_size")


def fake_cuda(monkeypatch, name: str, gib: float, cc: tuple[int, int], count: int = 1):
    """Stand in for GPUs this machine lacks: fake torch's device queries, the boundary detect() reads."""
    props = SimpleNamespace(name=name, total_memory=int(gib * 2**30), major=cc[0], minor=cc[1], multi_processor_count=100)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)


# (name as the driver reports it, GiB reported, capability) -> expected precision, attention, nominal size
CLASSES = [
    ("NVIDIA H100 80GB HBM3", 79.2, (9, 0), "bf16", "flash", 80),
    ("NVIDIA H200", 139.8, (9, 0), "bf16", "flash", 141),
    ("NVIDIA A100-SXM4-80GB", 79.2, (8, 0), "bf16", "flash", 80),
    ("NVIDIA A100-SXM4-40GB", 39.4, (8, 0), "bf16", "flash", 40),
    ("NVIDIA L4", 22.5, (8, 9), "bf16", "flash", 24),
    ("NVIDIA A10G", 22.1, (8, 6), "bf16", "flash", 24),
    ("Tesla T4", 14.7, (7, 5), "fp16", "efficient", 16),
    ("Tesla V100-SXM2-16GB", 15.8, (7, 0), "fp16", "efficient", 16),
    ("NVIDIA GeForce RTX 4090", 23.6, (8, 9), "bf16", "flash", 24),
    ("NVIDIA GeForce RTX 3060", 11.8, (8, 6), "bf16", "flash", 12),
    ("NVIDIA GeForce RTX 2070", 7.8, (7, 5), "fp16", "efficient", 8),
]


@pytest.mark.parametrize("name,gib,cc,precision,attention,nominal", CLASSES)
def test_each_gpu_class_gets_supported_precision_and_constant_effective_batch(monkeypatch, name, gib, cc, precision,
                                                                             attention, nominal):
    fake_cuda(monkeypatch, name, gib, cc)
    report = hardware.detect()
    gpu = report.gpus[0]
    assert gpu.nominal_gb == nominal and abs(gpu.memory_gb - gib) < 0.01
    rec = report.recommended
    assert set(REQUIRED) <= set(rec) and all(rec[k].reason for k in REQUIRED)
    assert rec["precision"].value == precision
    assert rec["attention"].value == attention
    assert rec["tf32"].value == (cc >= (8, 0))
    assert rec["pin_memory"].value is True
    frames, accum = rec["max_frames_per_batch"].value, rec["grad_accumulation"].value
    # the effective batch is the target on every card (the micro-batch is its even share, rounded up)
    assert frames * accum == rec["effective_batch"].value
    assert hardware.TARGET_FRAMES_PER_STEP <= frames * accum < hardware.TARGET_FRAMES_PER_STEP + accum
    assert rec["lr_batch_scale"].value == 1.0


def test_reported_memory_below_nominal_still_counts_as_the_big_card():
    # 79.2 GiB is what an 80 GB card reports; a static ">= 80" tier would drop it to the 40 GB class
    big = recommend(HardwareReport([GPUInfo(0, "NVIDIA A100-SXM4-80GB", 79.2, "8.0")], 16, 128, 100))
    small = recommend(HardwareReport([GPUInfo(0, "NVIDIA A100-SXM4-40GB", 39.4, "8.0")], 16, 128, 100))
    assert GPUInfo(0, "x", 79.2, "8.0").nominal_gb == 80
    assert big["separation_batch_size"].value > small["separation_batch_size"].value


def test_small_card_turns_on_checkpointing_and_accumulates_more():
    small = recommend(HardwareReport([GPUInfo(0, "NVIDIA GeForce RTX 3050", 3.8, "8.6")], 8, 16, 100))
    large = recommend(HardwareReport([GPUInfo(0, "NVIDIA H100 80GB HBM3", 79.2, "9.0")], 16, 128, 100))
    assert small["grad_checkpointing"].value is True and large["grad_checkpointing"].value is False
    assert small["grad_accumulation"].value > large["grad_accumulation"].value


def test_several_gpus_use_ddp_split_workers_and_the_smallest_card_decides(monkeypatch):
    fake_cuda(monkeypatch, "NVIDIA A100-SXM4-80GB", 79.2, (8, 0), count=4)
    report = hardware.detect()
    report.cpu_count = 32
    rec = recommend(report)
    assert len(report.gpus) == 4 and rec["distributed"].value is True
    assert rec["num_workers"].value == 7  # 32 cores / 4 GPUs, one left for each trainer process
    mixed = HardwareReport([GPUInfo(0, "NVIDIA A100-SXM4-80GB", 79.2, "8.0"), GPUInfo(1, "Tesla T4", 14.7, "7.5")],
                           16, 64, 100)
    assert recommend(mixed)["precision"].value == "fp16"  # the T4 has no bf16


def test_apple_mps_gets_fp32_without_pinned_memory():
    rec = recommend(HardwareReport([], 8, 16, 100, mps=True))
    assert rec["precision"].value == "fp32" and rec["pin_memory"].value is False
    assert rec["attention"].value == "math"


def test_cpu_only_machine_gets_working_settings():
    report = hardware.detect()  # the real path on this machine: no GPU here
    assert report.gpus == [] and report.device == "cpu"
    rec = report.recommended
    assert rec["precision"].value == "fp32" and rec["compile"].value is False and rec["pin_memory"].value is False
    assert rec["grad_accumulation"].value == 1  # every batch a step: a CPU run is minutes, not a day
    assert 0 <= rec["num_workers"].value < max(report.cpu_count, 1)
    assert report.cpu_count >= 1 and report.ram_gb > 0 and report.disk_free_gb > 0


def test_measured_probe_replaces_the_first_guess_and_keeps_the_effective_batch():
    report = hardware.detect()
    measured = hardware.with_measured_batch(report, 12_000, "largest batch that fit with 15% headroom")
    rec = measured.recommended
    assert rec["max_frames_per_batch"].reason.startswith("measured")
    assert (rec["max_frames_per_batch"].value, rec["grad_accumulation"].value) == (10_000, 4)  # 12000 fit
    assert "10000 frames x 4 micro-batches = 40000 frames per optimizer step" in rec["max_frames_per_batch"].reason


@pytest.mark.parametrize("measured_fit", [
    {"NVIDIA L4": 31_000, "NVIDIA A100-SXM4-40GB": 66_000, "NVIDIA A100-SXM4-80GB": 150_000, "NVIDIA H100 80GB HBM3": 190_000},
    {"NVIDIA L4": 9_000, "NVIDIA A100-SXM4-40GB": 17_000, "NVIDIA A100-SXM4-80GB": 39_000, "NVIDIA H100 80GB HBM3": 41_000},
])
def test_every_gpu_steps_on_the_same_effective_batch_whatever_the_probe_measures(monkeypatch, measured_fit):
    """The probe used to raise the micro-batch to whatever fitted: an H100 then took a ~5x larger step than an
    L4 at the same learning rate. Now the probe only decides how the target is split."""
    for name, fit in measured_fit.items():
        fake_cuda(monkeypatch, name, 79.2 if "80" in name else 39.4 if "40GB" in name else 22.5, (8, 9))
        rec = hardware.with_measured_batch(hardware.detect(), fit, "test").recommended
        frames, accum = rec["max_frames_per_batch"].value, rec["grad_accumulation"].value
        assert frames <= fit, name
        assert frames * accum == rec["effective_batch"].value, name
        assert hardware.TARGET_FRAMES_PER_STEP <= frames * accum < hardware.TARGET_FRAMES_PER_STEP + accum, name


def test_many_gpus_keep_each_card_busy_and_scale_the_learning_rate_by_the_square_root_rule():
    two = hardware.batch_plan(100_000, 2)
    assert (two["max_frames_per_batch"].value, two["grad_accumulation"].value) == (20_000, 1)
    assert two["effective_batch"].value == 40_000 and two["lr_batch_scale"].value == 1.0
    eight = hardware.batch_plan(100_000, 8)
    assert eight["max_frames_per_batch"].value == 2 * hardware.MIN_USEFUL_FRAMES
    assert eight["effective_batch"].value == 8 * 16_000
    assert eight["lr_batch_scale"].value == pytest.approx((8 * 16_000 / 40_000) ** 0.5, rel=1e-3)
    assert "square-root rule" in eight["lr_batch_scale"].reason


@pytest.mark.parametrize("name, gib, cc, can, words", [
    ("Tesla T4", 15.0, (7, 5), True, "with gradient checkpointing; fp16 with loss scaling"),
    ("NVIDIA A100-SXM4-80GB", 80.0, (8, 0), True, "; bf16"),
    ("NVIDIA GeForce GTX 1080", 8.0, (6, 1), False, "use a 16 GiB GPU or larger"),
])
def test_the_f5_engine_verdict_follows_the_gpu_memory(monkeypatch, name, gib, cc, can, words):
    from utils import families

    fake_cuda(monkeypatch, name, gib, cc)
    verdict, why = families.get("f5").machine_verdict(hardware.detect())
    assert verdict is can and words in why
    assert "F5-TTS engine: " + ("yes" if can else "no") in "\n".join(families.machine_lines(hardware.detect()))


def test_a_cpu_is_told_it_cannot_fine_tune_f5_and_to_use_a_gpu():
    from utils import families

    report = replace(hardware.detect(), gpus=[])
    verdict, why = families.get("f5").machine_verdict(report)
    assert verdict is False and "use a GPU" in why and "MMS" not in why  # families.trains_here names what runs here


def test_the_first_cpu_reading_is_a_measurement_not_zero(monkeypatch):
    """The System tab's first CPU reading was always 0 %: psutil's cpu_percent(None) measures from its last call,
    and the first call has none."""
    import psutil

    from utils import hardware

    asked = []
    monkeypatch.setattr(hardware, "_CPU_MEASURED", False)
    monkeypatch.setattr(psutil, "cpu_percent", lambda interval=None: asked.append(interval) or 42.0)
    assert hardware.live_usage()["cpu_percent"] == 42.0 and hardware.live_usage()["cpu_percent"] == 42.0
    assert asked[0] and asked[0] > 0 and asked[1:] == [None]  # the first waits for a real interval, then none do


def test_the_helper_models_device_is_decided_in_one_place_for_the_recognizer_and_the_aligner(monkeypatch, tmp_path):
    """The recognizer and the transcript check's aligner ask utils.hardware where "auto" runs: the GPU when CUDA is
    there (asked at each call), the CPU otherwise; a device asked for is kept. The recognizer in the app's process
    keeps off a GPU a training run holds."""
    from utils import jobs
    from utils.transcripts import asr
    from utils.workspace import Workspace

    ws = Workspace.open(tmp_path / "ws")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert hardware.cuda_or_cpu() == "cpu" and hardware.cuda_or_cpu("cuda:1") == "cuda:1"
    assert asr.work_device(ws) == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert hardware.cuda_or_cpu() == "cuda" and hardware.cuda_or_cpu("cpu") == "cpu"
    assert asr.work_device(ws) == "cuda"
    monkeypatch.setattr(jobs, "gpu_runs", lambda ws: ["a-run"])
    assert asr.work_device(ws) == "cpu" and asr.work_device(ws, "cuda") == "cuda"
