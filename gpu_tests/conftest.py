"""GPU checks: the CUDA code paths that CI (no GPU) cannot run. Not collected by the default suite
(pytest.ini's testpaths is tests/); run them on a CUDA machine:

    python -m pytest gpu_tests -q                          # speaks its corpus with espeak-ng
    STUDIO_GPU_WORKSPACE=WS python -m pytest gpu_tests -q  # or uses WS/datasets/bench (bench/common.espeak_dataset)

Without a CUDA device the session fails at once: a GPU check that skips would pass without checking anything.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def pytest_sessionstart(session):
    if not torch.cuda.is_available():
        pytest.exit("gpu_tests need a CUDA GPU (torch.cuda.is_available() is False)", returncode=2)


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
