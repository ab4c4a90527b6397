"""The trainer as its own OS process: SIGTERM stops cleanly, kill -9 resumes exactly, DDP with two
CPU processes (gloo), and the `app.py train` command end to end."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_training import corpus, losses, tiny_config  # noqa: F401  (module fixture)
from utils.jobs import torchrun
from utils.training import prepare_run, run
from utils.training.checkpoint import load_trainer_state, step_folders
from utils.workspace import read_json, read_jsonl
from utils.datasets import load_manifest

ROOT = Path(__file__).resolve().parent.parent


def start_trainer(config_path: Path, nproc: int = 1) -> subprocess.Popen:
    """The trainer as its own process; its output goes to a file beside the config (no pipe to fill)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    if nproc > 1:
        cmd = torchrun(nproc, "-m", "utils.training", "--config", str(config_path))
    else:
        cmd = [sys.executable, "-m", "utils.training", "--config", str(config_path)]
    out = open(Path(config_path).parent / "stdout.log", "wb")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    proc.output_path = out.name
    out.close()
    return proc


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(f"trainer exited early ({proc.returncode}):\n{Path(proc.output_path).read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("timed out waiting for the trainer")


def test_sigterm_finishes_the_step_saves_a_checkpoint_and_exits_0(corpus):
    path = prepare_run(tiny_config(corpus, "sigterm", max_steps=10_000, checkpoint_every=10_000))
    run_dir = corpus.run_dir("sigterm")
    launched = time.time()
    proc = start_trainer(path)
    wait_for(lambda: (read_json(run_dir / "status.json", {}) or {}).get("step", 0) >= 2, proc)
    status = read_json(run_dir / "status.json")
    assert status["state"] == "running" and status["pid"] == proc.pid and status["eta_s"] is not None
    # the time its start took (said before the next Start) counts from the process's start: the imports it waited on
    start = next(r for r in read_jsonl(run_dir / "metrics.jsonl") if "start_s" in r)
    counted_from = start["time"] - start["start_s"]
    assert abs(counted_from - launched) < 1.0 and counted_from < status["started"] - 0.2
    beat = status["heartbeat"]
    time.sleep(3)  # the heartbeat refreshes status.json every 2 s, between steps too
    assert read_json(run_dir / "status.json")["heartbeat"] > beat
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 0
    status = read_json(run_dir / "status.json")
    assert status["state"] == "stopped" and "a stop signal: Stop pressed" in status["message"]
    assert "SIGTERM" not in status["message"]  # the Training tab shows this message: plain words
    saved = step_folders(run_dir / "checkpoints")
    assert saved and saved[-1][0] == status["step"] and status["last_checkpoint"] == str(saved[-1][1])


def test_kill_9_then_resume_auto_continues_exactly(corpus):
    reference = run(prepare_run(tiny_config(corpus, "ref30", max_steps=30, checkpoint_every=1000)))
    assert reference["step"] == 30
    path = prepare_run(tiny_config(corpus, "killed", max_steps=30, checkpoint_every=2))
    run_dir = corpus.run_dir("killed")
    proc = start_trainer(path)
    wait_for(lambda: any(s >= 4 for s, _ in step_folders(run_dir / "checkpoints")), proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    killed_at = step_folders(run_dir / "checkpoints")[-1][0]
    assert killed_at < 30, "the run finished before it could be killed"
    result = run(path)  # resume "auto"
    assert result["state"] == "finished" and result["step"] == 30
    a, b = losses(corpus.run_dir("ref30")), losses(run_dir)
    for step in range(1, 31):
        assert b[step] == pytest.approx(a[step], rel=1e-5, abs=1e-6), step
    # no half-written checkpoint folder is left behind, and only the newest K are kept
    names = [p.name for p in (run_dir / "checkpoints").iterdir()]
    assert all(n.startswith("step-") for n in names) and len(names) <= 2


def test_ddp_two_cpu_processes_with_gloo_train_in_lock_step(corpus):
    path = prepare_run(tiny_config(corpus, "ddp", max_steps=4, checkpoint_every=4, eval_every=0))
    proc = start_trainer(path, nproc=2)
    proc.wait(timeout=300)
    assert proc.returncode == 0, Path(proc.output_path).read_text(errors="replace")[-3000:]
    run_dir = corpus.run_dir("ddp")
    log = (run_dir / "train.log").read_text()
    assert "machine: cpu, 2 process(es)" in log
    assert read_json(run_dir / "status.json")["state"] == "finished"
    assert [s for s, _ in step_folders(run_dir / "checkpoints")] == [4]
    rows = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]  # one writer (rank 0), not two


def test_ddp_resume_continues_every_ranks_own_random_stream(corpus):
    """Two gloo processes, 4 steps straight vs. resumed from the straight run's step-2 checkpoint: the same
    weights at step 4. The flow-matching noise differs per rank, so a resume that gave every rank rank 0's
    generator (as it once did) trains another model."""
    from utils.safeload import load_safetensors

    straight = prepare_run(tiny_config(corpus, "ddp-straight", max_steps=4, checkpoint_every=2, keep_checkpoints=3,
                                       ema_decay=0.0))
    proc = start_trainer(straight, nproc=2)
    assert proc.wait(timeout=300) == 0, Path(proc.output_path).read_text(errors="replace")[-3000:]
    middle = corpus.run_dir("ddp-straight") / "checkpoints" / "step-2"
    resumed = prepare_run(tiny_config(corpus, "ddp-resumed", max_steps=4, checkpoint_every=2, keep_checkpoints=3,
                                      ema_decay=0.0, resume=str(middle)))
    proc = start_trainer(resumed, nproc=2)
    assert proc.wait(timeout=300) == 0, Path(proc.output_path).read_text(errors="replace")[-3000:]
    a = load_safetensors(corpus.run_dir("ddp-straight") / "checkpoints" / "step-4" / "model.safetensors")
    b = load_safetensors(corpus.run_dir("ddp-resumed") / "checkpoints" / "step-4" / "model.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        assert (a[name] - b[name]).abs().max() <= 1e-6, name


def test_app_train_command_trains_and_reports(corpus, capsys):
    sys.path.insert(0, str(ROOT))
    import app

    code = app.main(["train", "--workspace", str(corpus.root), "--dataset", "am", "--run", "cli", "--preset", "tiny",
                     "--max-steps", "2", "--grad-accumulation", "1", "--max-frames-per-batch", "400",
                     "--mcd", "logmel", "--eval-clips", "1", "--ode-steps", "2", "--checkpoint-every", "2",
                     "--attention", "flash", "--compile", "false"])
    out = capsys.readouterr().out
    assert code == 0 and "finished" in out and "step-2" in out
    config = json.loads((corpus.run_dir("cli") / "config.json").read_text())
    assert config["resolved"]["attention"] == "flash" and config["reasons"]["attention"] == "set by the user"
    assert config["train"]["max_steps"] == 2 and config["resolved"]["compile"] is False


def test_ctrl_c_in_the_terminal_saves_the_run_and_exits_130_so_a_command_after_it_does_not_run(corpus):
    """`app.py train ... && app.py export-voice ...` exported a half-trained voice: Ctrl+C was handled (the step
    finished, a checkpoint was saved) and the command then said 0, as if every step had been trained."""
    run_dir = corpus.run_dir("ctrl-c")
    out = open(corpus.root / "ctrl-c.log", "wb")
    proc = subprocess.Popen([sys.executable, "app.py", "train", "--workspace", str(corpus.root), "--dataset", "am",
                             "--run", "ctrl-c", "--preset", "tiny", "--max-steps", "10000", "--eval-every", "0",
                             "--max-frames-per-batch", "400", "--grad-accumulation", "1"], cwd=ROOT,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)
    proc.output_path = out.name
    out.close()
    wait_for(lambda: (read_json(run_dir / "status.json", {}) or {}).get("step", 0) >= 2, proc)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal sends the foreground process group
    assert proc.wait(timeout=120) == 130, Path(proc.output_path).read_text(errors="replace")[-3000:]
    printed = Path(proc.output_path).read_text()
    assert "stopped: stopped by request (Ctrl+C in the terminal)" in printed and "Traceback" not in printed
    assert step_folders(run_dir / "checkpoints")[-1][0] == read_json(run_dir / "status.json")["step"]


def test_app_train_without_an_eval_choice_checks_quality_on_the_training_tabs_schedule(tmp_path):
    """Same schedule as a run started on the Training tab: a 300-step run is checked every 50 steps, a
    20000-step one every 1000; a step count given on the command line is kept, 0 included."""
    sys.path.insert(0, str(ROOT))
    import app

    def eval_every(*flags):
        args = app.build_parser().parse_args(["train", "--workspace", str(tmp_path), "--dataset", "am", *flags])
        return app.train_config(args).eval_every

    assert eval_every("--max-steps", "300") == 50
    assert eval_every("--max-steps", "2000") == 334
    assert eval_every("--max-steps", "20000") == 1000
    assert eval_every("--max-steps", "300", "--eval-every", "7") == 7
    assert eval_every("--max-steps", "300", "--eval-every", "0") == 0


def test_app_train_background_queues_the_run_as_a_job_on_the_device_the_ui_would_pick(corpus, capsys):
    sys.path.insert(0, str(ROOT))
    import app
    from utils import jobs

    code = app.main(["train", "--workspace", str(corpus.root), "--dataset", "am", "--run", "cli-bg", "--preset", "tiny",
                     "--max-steps", "2", "--grad-accumulation", "1", "--max-frames-per-batch", "400", "--mcd", "logmel",
                     "--eval-clips", "1", "--ode-steps", "2", "--checkpoint-every", "2", "--background"])
    assert code == 0 and "on cpu; follow" in capsys.readouterr().out
    run_dir = corpus.run_dir("cli-bg")
    end = time.time() + 240
    while jobs.reconcile(run_dir).get("state") not in jobs.FINAL and time.time() < end:
        time.sleep(0.5)
    status = read_json(run_dir / "status.json")
    assert status["state"] == "finished" and status["devices"] == "cpu", (run_dir / "train.log").read_text()[-2000:]


def test_a_probe_that_fits_nothing_on_one_rank_fails_every_rank_with_its_words(corpus):
    """One GPU with less free memory than the others (another process on it) fits not one longest clip: that rank
    raised alone, the other waited in the probe's all-reduce until torchrun took it down, and the words were in one
    rank's log only. The ranks agree on the least that fits first, then every rank refuses it, in the run's status."""
    path = prepare_run(tiny_config(corpus, "ddp-probe", max_steps=2, probe="true", max_frames_per_batch="auto",
                                   fault_oom_above_frames=1, fault_oom_ranks=[1], eval_every=0))
    proc = start_trainer(path, nproc=2)
    try:
        assert proc.wait(timeout=300) != 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    status = read_json(corpus.run_dir("ddp-probe") / "status.json")
    assert status["state"] == "failed" and "Not even one of the longest clips" in status["message"], status
    output = Path(proc.output_path).read_text(errors="replace")
    assert output.count("Not even one of the longest clips") >= 2, output[-3000:]  # both ranks say it


def test_ddp_out_of_memory_on_one_rank_is_recovered_by_all_ranks_together(corpus):
    """Only rank 1 runs out of memory: both ranks halve their micro-batch and go on; none waits for ever."""
    rows = [r for r in load_manifest(corpus, "am") if r["split"] == "train"]
    longest = -(-max(int(r["duration"] * 24000) // 256 + 1 for r in rows) // 4) * 4
    path = prepare_run(tiny_config(corpus, "ddp-oom", max_steps=3, checkpoint_every=3, eval_every=0,
                                   max_frames_per_batch=4 * longest, fault_oom_above_frames=2 * longest,
                                   fault_oom_ranks=[1]))
    proc = start_trainer(path, nproc=2)
    try:
        assert proc.wait(timeout=300) == 0, Path(proc.output_path).read_text(errors="replace")[-3000:]
    finally:
        if proc.poll() is None:  # a hang: take the whole torchrun group down with it
            os.killpg(proc.pid, signal.SIGKILL)
    log = (corpus.run_dir("ddp-oom") / "train.log").read_text()
    assert "out of memory in another process at step 0: micro-batch halved" in log  # rank 0's log: rank 1 ran out
    assert read_json(corpus.run_dir("ddp-oom") / "status.json")["state"] == "finished"
    state = load_trainer_state(corpus.run_dir("ddp-oom") / "checkpoints" / "step-3")
    assert state["split"] >= 2
