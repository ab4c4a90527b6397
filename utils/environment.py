"""Is this Python environment able to run the studio? Checked once at start by `app.py`.

A broken install (a torch wheel for another CUDA or Python, a half-finished upgrade, a torch older than
the code needs) would otherwise surface as a traceback from deep inside feature extraction. Here it
becomes one sentence with the command that fixes it. The studio needs torch alone: it computes its mel
features and Griffin-Lim with torch (utils/audio.py), so a torchaudio built for another torch, as Colab
images or the registry can pair them, no longer matters.
"""
from __future__ import annotations

import shutil
import subprocess

MIN_TORCH = (2, 5)  # torch.nn.attention.sdpa_kernel (2.3); torch.compile through SDPA without graph breaks (2.5)
REINSTALL = "python -m pip install --force-reinstall 'torch>=2.5'"
UPGRADE = "python -m pip install --upgrade 'torch>=2.5'"


def torch_problem() -> str:
    """Empty when torch imports and is new enough; else what is wrong and the command that fixes it."""
    try:
        import torch
    except Exception as exc:  # ImportError, OSError (a missing or mismatched shared library), RuntimeError
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return f"PyTorch does not load in this Python ({reason}). Fix it with: {REINSTALL}"
    if _version(torch.__version__) < MIN_TORCH:
        need = ".".join(map(str, MIN_TORCH))
        return f"PyTorch {torch.__version__} is older than {need}, which the studio needs. Upgrade it with: {UPGRADE}"
    return ""


def gpu_warning() -> str:
    """A GPU is in the machine but this torch cannot use it (a CPU build, or a CUDA build newer than the
    driver): training would quietly run on the CPU. Empty when there is nothing to say."""
    import torch

    if torch.cuda.is_available() or not _nvidia_gpu_present():
        return ""
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "no CUDA (a CPU-only build)"
    return (f"This machine has an NVIDIA GPU, but PyTorch {torch.__version__} (built with {build}) cannot use "
            "it, so everything will run on the CPU. Install the torch build that matches your driver "
            "(nvidia-smi shows its CUDA version), e.g.: python -m pip install --force-reinstall torch "
            "--index-url https://download.pytorch.org/whl/cu126")


def _nvidia_gpu_present() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return listed.returncode == 0 and "GPU" in listed.stdout


def _version(text: str) -> tuple[int, int]:
    parts = text.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


def install_report(torch_before: str) -> str:
    """What `pip install -r requirements.txt` did to a preinstalled torch (Colab, Lightning AI), in one line.

    `torch_before`: the version that imported before the install ("" when none did)."""
    problem = torch_problem()
    if problem:
        return problem
    import torch

    need = ".".join(map(str, MIN_TORCH))
    if not torch_before:
        line = f"Installed PyTorch {torch.__version__}."
    elif torch_before == torch.__version__:
        line = f"Kept the preinstalled PyTorch {torch.__version__} (the studio needs {need} or newer)."
    else:
        line = (f"Replaced the preinstalled PyTorch {torch_before} with {torch.__version__}: the studio needs "
                f"{need} or newer (fast attention and torch.compile through it).")
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""
    return line + (f" GPU: {gpu}." if gpu else "") + (f" {gpu_warning()}" if not gpu and gpu_warning() else "")


if __name__ == "__main__":  # python -m utils.environment [TORCH_VERSION_BEFORE_THE_INSTALL]
    import sys

    print(install_report(sys.argv[1] if len(sys.argv) > 1 else ""))
