"""Hardware detection and the settings each machine class gets."""
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from tests.conftest import ROOT
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
    # the effective batch reaches the target on every card, without overshooting by a whole micro-batch
    assert frames * accum >= hardware.TARGET_FRAMES_PER_STEP > frames * (accum - 1)


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


def test_measured_probe_replaces_the_first_guess():
    report = hardware.detect()
    measured = hardware.with_measured_batch(report, 12_000, "largest batch that fit with 15% headroom")
    assert measured.recommended["max_frames_per_batch"].value == 12_000
    assert measured.recommended["max_frames_per_batch"].reason.startswith("measured")
    assert 12_000 * measured.recommended["grad_accumulation"].value >= hardware.TARGET_FRAMES_PER_STEP


def test_live_usage_without_gpu_reports_cpu_and_ram():
    usage = hardware.live_usage()
    assert usage["gpus"] == [] and usage["ram_total_gb"] > 0 and "nvml" in usage


def test_hardware_cli_json_has_the_documented_fields(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "app.py"), "hardware", "--json", "--workspace", str(tmp_path)],
                         capture_output=True, text=True, cwd=ROOT, timeout=120, check=True)
    data = json.loads(out.stdout)
    assert {"gpus", "cpu_count", "ram_gb", "disk_free_gb", "recommended"} <= set(data)
    for key in REQUIRED:
        assert set(data["recommended"][key]) == {"value", "reason"}
    text = subprocess.run([sys.executable, str(ROOT / "app.py"), "hardware"], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, check=True).stdout
    assert "No GPU found" in text and "precision" in text
