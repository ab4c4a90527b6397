"""`python app.py` checks the Python environment before anything else: a broken or too old torch gets one
plain sentence with the command that fixes it, not a traceback from inside feature extraction."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def app(tmp_path: Path, *args: str, fake_torch: str | None = None, path_dir: Path | None = None):
    env = dict(os.environ)
    if fake_torch is not None:  # a torch package that shadows the real one, as a broken install would
        (tmp_path / "fake" / "torch").mkdir(parents=True, exist_ok=True)
        (tmp_path / "fake" / "torch" / "__init__.py").write_text(fake_torch)
        env["PYTHONPATH"] = str(tmp_path / "fake")
    if path_dir is not None:
        env["PATH"] = f"{path_dir}{os.pathsep}{env['PATH']}"
    return subprocess.run([sys.executable, str(ROOT / "app.py"), *args, "--workspace", str(tmp_path / "ws")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_a_torch_that_does_not_load_is_one_sentence_with_the_fix(tmp_path):
    broken = 'raise OSError("libtorch_cuda.so: undefined symbol: cudaGetDriverEntryPointByVersion")'
    for command in (["hardware"], ["g2p", "ሰላም"]):
        done = app(tmp_path, *command, fake_torch=broken)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        assert "PyTorch does not load in this Python (libtorch_cuda.so: undefined symbol" in done.stderr
        assert "python -m pip install --force-reinstall 'torch>=2.5'" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_torch_older_than_the_code_needs_says_to_upgrade(tmp_path):
    done = app(tmp_path, "g2p", "ሰላም", fake_torch='__version__ = "2.1.2+cu121"\n')
    assert done.returncode == 2
    assert "PyTorch 2.1.2+cu121 is older than 2.5" in done.stderr
    assert "python -m pip install --upgrade 'torch>=2.5'" in done.stderr


def test_a_gpu_this_torch_cannot_use_is_named_and_the_command_still_runs(tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-0)'\n")
    (tools / "nvidia-smi").chmod(0o755)
    with_gpu = app(tmp_path, "g2p", "ሰላም", path_dir=tools)  # this machine's torch sees no CUDA device
    assert with_gpu.returncode == 0, with_gpu.stderr
    assert "has an NVIDIA GPU, but PyTorch" in with_gpu.stderr and "cannot use it" in with_gpu.stderr
    assert "ሰላም" in with_gpu.stdout
    without = app(tmp_path, "g2p", "ሰላም")
    assert without.returncode == 0 and "warning" not in without.stderr


def test_the_install_report_says_whether_a_preinstalled_torch_was_kept_or_replaced(tmp_path):
    import torch

    def report(before: str) -> str:
        done = subprocess.run([sys.executable, "-m", "utils.environment", before], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert report(torch.__version__) == f"Kept the preinstalled PyTorch {torch.__version__} (the studio needs 2.5 or newer)."
    replaced = report("2.4.1+cu121")
    assert replaced.startswith(f"Replaced the preinstalled PyTorch 2.4.1+cu121 with {torch.__version__}: the studio "
                               "needs 2.5 or newer")
    assert report("") == f"Installed PyTorch {torch.__version__}."


def test_openmp_threads_sleep_soon_as_torch_loads_unless_the_user_chose_otherwise(tmp_path):
    """libgomp reads GOMP_SPINCOUNT once, when torch loads it: at its 300,000 spins two CPU trainings at once took
    ~25x longer a step than at 1,000 (bench/cpu_sharing.py). A stand-in torch records what it would have read, for
    the app and for a training's own process; a value the user set is theirs."""
    seen = tmp_path / "seen.txt"
    recorder = (f"import os, pathlib; pathlib.Path({str(seen)!r}).write_text(os.environ.get('GOMP_SPINCOUNT', "
                "'unset')); raise OSError('the stand-in torch stops here')")
    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    assert app(tmp_path, "hardware", fake_torch=recorder).returncode == 2 and seen.read_text() == "1000"
    seen.unlink()
    env["PYTHONPATH"] = str(tmp_path / "fake")  # the stand-in written by app() above
    trainer = subprocess.run([sys.executable, "-c", "import utils.training.loop"],  # what a trainer's process loads
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert trainer.returncode != 0 and seen.read_text() == "1000"
    mine = subprocess.run([sys.executable, str(ROOT / "app.py"), "hardware", "--workspace", str(tmp_path / "ws")],
                          cwd=tmp_path, env={**env, "GOMP_SPINCOUNT": "77"}, capture_output=True, text=True,
                          timeout=120)
    assert mine.returncode == 2 and seen.read_text() == "77"
