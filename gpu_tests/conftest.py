"""GPU checks: the CUDA code paths that CI (no GPU) cannot run. Not collected by the default suite
(pytest.ini's testpaths is tests/); run them on a CUDA machine:

    python -m pytest gpu_tests -q                          # speaks its corpus with espeak-ng
    STUDIO_GPU_WORKSPACE=WS python -m pytest gpu_tests -q  # or uses WS/datasets/bench (bench/common.espeak_dataset)

Without a CUDA device the session fails at once: a GPU check that skips would pass without checking anything.
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def pytest_sessionstart(session):
    if not torch.cuda.is_available():
        pytest.exit("gpu_tests need a CUDA GPU (torch.cuda.is_available() is False)", returncode=2)


_started: dict[str, float] = {}


def pytest_runtest_logstart(nodeid, location):
    _started[nodeid] = time.monotonic()


def pytest_runtest_logfinish(nodeid, location):
    """Each test's seconds as it ends: a lane cut by the suite's deadline prints no --durations table (the first H200
    run's curator paths: which of its tests took the time was lost)."""
    print(f"  [{nodeid.rsplit('::', 1)[-1]}: {time.monotonic() - _started.pop(nodeid, time.monotonic()):.0f} s]",
          file=sys.stderr, flush=True)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """A workspace with the dataset `bench` (espeak-ng Amharic, two voices, a val split), copied so the
    tests' runs never write into the given one."""
    from utils.workspace import Workspace

    root = tmp_path_factory.mktemp("ws")
    given = os.environ.get("STUDIO_GPU_WORKSPACE")
    if given:
        shutil.copytree(Path(given) / "datasets", root / "datasets")
        return Workspace.open(root)
    import sys
    sys.path.insert(0, str(ROOT / "bench"))
    import common

    return common.espeak_dataset(root, n_train=120, n_val=4, max_chars=110)


@pytest.fixture
def forced_t4(monkeypatch):
    """This GPU reported as a T4 (compute 7.5, no bf16): the settings a T4 gets (fp16 with the gradient scaler,
    memory-efficient attention, no TF32), run on the real card."""
    from dataclasses import replace

    from utils import hardware

    real = hardware.query_gpus()
    monkeypatch.setattr(hardware, "query_gpus", lambda: [replace(g, name="Tesla T4 (forced)", compute_capability="7.5")
                                                         for g in real])


@pytest.fixture
def exact_fp32():
    """fp32 without TF32 and with cuDNN's fixed algorithm choice, as the CPU computes. Default torch lets cuDNN
    convolve in TF32, and a trainer run in this process turns on TF32 matmuls and cuDNN's per-shape timing: a padded
    batch and a lone sentence then take different kernels, whose 10-bit rounding differs, and Griffin-Lim's phase
    search spreads such differences (the first H200 run, with TF32 on: 21 % of the peak between batched and alone
    in some samples; on the CPU, 0.07 %)."""
    flags = (torch.backends.cuda.matmul, "allow_tf32"), (torch.backends.cudnn, "allow_tf32"), \
        (torch.backends.cudnn, "benchmark")
    before = [getattr(owner, name) for owner, name in flags]
    for owner, name in flags:
        setattr(owner, name, False)
    yield
    for (owner, name), value in zip(flags, before):
        setattr(owner, name, value)

