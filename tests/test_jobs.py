"""The job service with the real trainer: queue per device, stop = save and exit, second stop kills,
SIGKILL shows as failed with the last log lines, runs survive the UI (reconcile from files), resume."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import cli, make_dataset
from utils import families, jobs
from utils.datasets import load_manifest, save_manifest
from utils.events import StudioError
from utils.runs import control, settings, views
from utils.training import speed
from utils.workspace import Workspace

TINY = dict(preset="tiny", max_frames_per_batch=400, grad_accumulation=1, log_every=1, eval_every=0,
            checkpoint_every=1000, mcd="logmel", eval_clips=1, sample_clips=1, ode_steps=2, warmup_steps=1)


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("jobs"), n_train=3, n_val=1, max_chars=25)


def wait(predicate, what: str, timeout: float = 180):
    end = time.time() + timeout
    while time.time() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def state(ws, name):
    return jobs.reconcile(ws.run_dir(name))


def ended(ws, name: str, timeout: float = 300) -> dict:
    """The run's status once it has a state and it is no longer queued, running or stopping: a run that failed in
    seconds is reported then, with its message (a CI run waited 300 s for "finished" from a run that failed in 8)."""
    return wait(lambda: ws.run_dir(name).exists() and (s := state(ws, name)).get("state") not in (None, *jobs.ACTIVE)
                and s, f"run {name} to end", timeout)


def start(ws, name, steps=100_000):
    control.start_training(ws, "am", run=name, max_steps=steps, overrides={**TINY, "max_steps": steps})


def test_second_run_queues_then_stop_saves_and_the_queue_moves_on(ws):
    start(ws, "first")
    wait(lambda: state(ws, "first").get("state") == "running" and state(ws, "first").get("step", 0) >= 2, "first running")
    start(ws, "second")
    queued = state(ws, "second")
    assert queued["state"] == "queued" and "first" in queued["message"]

    assert "finishes the current step" in jobs.stop(ws, "first")
    final = wait(lambda: (s := state(ws, "first")).get("state") in jobs.FINAL and s, "first to stop")
    assert final["state"] == "stopped" and "stopped by request (the Stop button)" in final["message"], final
    view = views.view(ws, "first")
    assert view.checkpoints and view.checkpoints[-1][0] == final["step"]

    wait(lambda: state(ws, "second").get("state") == "running", "second to start once the device is free")
    wait(lambda: state(ws, "second").get("step", 0) >= 1, "second stepping")
    jobs.stop(ws, "second")
    wait(lambda: state(ws, "second").get("state") in jobs.FINAL, "second to stop")

    # resume continues from the saved step, not from zero
    control.resume_training(ws, "first")
    wait(lambda: state(ws, "first").get("state") == "running", "resumed run")
    resumed = wait(lambda: (s := state(ws, "first")).get("step", 0) > final["step"] and s, "steps after resume")
    assert "resume: continuing from" in views.view(ws, "first").log
    assert resumed["step"] > final["step"]
    # a second Stop kills at once
    jobs.stop(ws, "first")
    assert "killed" in jobs.stop(ws, "first")
    assert state(ws, "first")["state"] == "stopped"
    wait(lambda: not jobs.pid_alive(state(ws, "first").get("pid")), "the killed trainer to be gone", 30)


def test_trainer_killed_with_sigkill_shows_failed_with_its_last_log_lines(ws):
    start(ws, "killed")
    pid = wait(lambda: (s := state(ws, "killed")).get("step", 0) >= 1 and s.get("pid"), "killed running")
    os.kill(pid, signal.SIGKILL)
    final = wait(lambda: (s := state(ws, "killed")).get("state") in jobs.FINAL and s, "failure to be recorded")
    assert final["state"] == "failed"
    assert "signal 9" in final["message"] and "step" in final["message"]  # the last log lines come along


def test_runs_whose_processes_vanished_are_marked_failed_on_the_next_look(ws):
    start(ws, "orphan")
    status = wait(lambda: (s := state(ws, "orphan")).get("step", 0) >= 1 and s, "orphan running")
    for pid in (status["launcher_pid"], status["pid"]):  # as if the machine had restarted
        os.kill(pid, signal.SIGKILL)
    wait(lambda: not jobs.pid_alive(status["pid"]) and not jobs.pid_alive(status["launcher_pid"]), "processes gone", 30)
    table = {r["run"]: r for r in views.run_table(ws)}  # what a freshly started UI does first
    assert table["orphan"]["status"] == "failed"
    assert "Last log lines" in state(ws, "orphan")["message"]


def test_starting_a_run_that_exists_or_on_a_missing_dataset_says_what_to_do(ws):
    with pytest.raises(StudioError, match="exists already"):
        start(ws, "killed")
    with pytest.raises(StudioError, match="no prepared dataset"):
        control.start_training(ws, "nope", run="x")


def test_a_run_that_fails_keeps_the_trainers_reason(ws):
    control.start_training(ws, "am", run="diverges", overrides={**TINY, "max_steps": 50, "max_bad_steps": 2,
                                                              "fault_nan_steps": list(range(0, 50))})
    final = wait(lambda: (s := state(ws, "diverges")).get("state") in jobs.FINAL and s, "the run to fail")
    assert final["state"] == "failed"
    assert "non-finite loss" in final["message"]  # the trainer's own reason survives the launcher


def test_resume_pressed_while_the_old_launcher_is_still_finishing_keeps_the_new_run(ws):
    """The trainer writes "stopped" before its launcher records the end; a Resume in between must not
    let the old launcher mark the resumed run finished (the launcher is frozen to make that moment last).
    The run is long: status.json shows the step only every 2-s heartbeat, so a short run could already be
    in its final evaluation when Stop arrives on a fast CPU, and end "finished" instead of "stopped"."""
    start(ws, "quick")
    try:
        old = wait(lambda: (s := state(ws, "quick")).get("state") == "running" and s.get("step", 0) >= 2 and s,
                   "quick running")
        os.kill(old["launcher_pid"], signal.SIGSTOP)
        try:
            assert "finishes the current step" in jobs.stop(ws, "quick")
            stopped = wait(lambda: (s := jobs.read_status(ws.run_dir("quick"))).get("state") == "stopped"
                           and not jobs.pid_alive(old["pid"]) and s, "the trainer to save and exit")
            control.resume_training(ws, "quick")
        finally:
            os.kill(old["launcher_pid"], signal.SIGCONT)
        wait(lambda: not jobs.pid_alive(old["launcher_pid"]), "the old launcher to finish", 30)
        after = jobs.read_status(ws.run_dir("quick"))
        assert after["state"] in ("queued", "running") and after["ended"] is None, after
        # the resumed run goes on under its own trainer, and its own Stop still ends it
        wait(lambda: (s := state(ws, "quick")).get("step", 0) > stopped["step"] and s.get("pid") != old["pid"],
             "the resumed run to step on")
        jobs.stop(ws, "quick")
        final = wait(lambda: (s := state(ws, "quick")).get("state") in jobs.FINAL and s, "the resumed run to stop")
        assert final["state"] == "stopped" and final["step"] > stopped["step"], final
        wait(lambda: not jobs.pid_alive(final.get("launcher_pid")), "the new launcher to finish", 30)
    finally:  # a failure must not leave an endless run holding the CPU queue: Stop twice kills (no-op if ended)
        jobs.stop(ws, "quick")
        jobs.stop(ws, "quick")


def test_a_vocoder_trains_as_a_job_from_the_training_tab_and_resumes_with_its_own_trainer(ws):
    from tests.helpers import serve_tab
    from utils import inference
    from webui import training as tab

    with serve_tab(tab, ws, "Training") as client:
        note, _, _ = client.predict("am", "(from scratch)", "tiny", 2, False, api_name="/start_vocoder_training")
    name = re.search(r"Vocoder run \*\*(\S+)\*\*", note).group(1)
    assert "quality (MCD and samples) checked at its end" in note  # not "every 500 steps" of a 2-step run
    final = wait(lambda: (s := state(ws, name)).get("state") in jobs.FINAL and s, "the vocoder run to end", 300)
    assert final["state"] == "finished", views.view(ws, name).log[-2000:]
    row = {r["run"]: r for r in views.run_table(ws)}[name]
    assert row["preset"] == "vocoder (tiny)" and row["dataset"] == "am"
    assert any(v.startswith(f"runs/{name}/checkpoints/step-2") for v in inference.list_vocoders(ws))
    assert "batch_size" in json.loads((ws.run_dir(name) / "config.json").read_text())["train"]["reasons"]
    with pytest.raises(StudioError, match=f"{name} has done its 2 steps. To train it longer, set the steps"):
        control.resume_training(ws, name)  # not a trainer that starts and finishes at once, saying nothing
    assert "finished · at step 2: to train it longer, set the vocoder steps above 2" in views.state_line(ws, name)
    settings.save_settings(ws, {"max_minutes": 30})  # this session's time limit, saved on the Optimizations tab
    try:
        with serve_tab(tab, ws, "Training") as client:  # Resume reads the vocoder's steps box for a vocoder run
            client.predict(name, 2000, 3, api_name="/resume_training")  # the trainer again, from its checkpoint
    finally:
        settings.settings_path(ws).unlink()
    assert json.loads((ws.run_dir(name) / "config.json").read_text())["train"]["max_minutes"] == 30
    wait(lambda: state(ws, name).get("state") in jobs.FINAL and "resume: continuing from" in views.view(ws, name).log,
         "the vocoder run to resume", 300)
    assert state(ws, name)["state"] == "finished"
    assert json.loads((ws.run_dir(name) / "config.json").read_text())["train"]["max_steps"] == 3
    with pytest.raises(StudioError, match="no prepared dataset"):
        control.start_vocoder_training(ws, "nope")


@pytest.mark.slow  # about 3 minutes on 2 shared CPU cores: 100 real steps and two evaluations
def test_a_short_run_started_without_an_eval_choice_shows_its_quality_several_times(ws):
    """A 300-step run is checked every 50 steps (6 times), not once at its end; a long one keeps the default's
    1000; the curator's own choice (TINY's 0: only at the end) is kept. Here a 100-step run, checked at 50 and 100."""
    assert [settings.eval_schedule(n, 1000) for n in (300, 2000, 20_000, 30)] == [50, 334, 1000, 50]
    no_choice = {k: v for k, v in TINY.items() if k != "eval_every"}
    status = control.start_training(ws, "am", run="checked", max_steps=100, overrides={**no_choice, "max_steps": 100})
    assert status["eval_every"] == 50
    wait(lambda: state(ws, "checked").get("state") in jobs.FINAL, "the short run to finish", timeout=600)
    v = views.view(ws, "checked")
    assert [row["step"] for row in v.series(lambda k: k == "mcd")] == [50, 100]
    assert sorted({step for step, _ in v.samples}) == [50, 100]
    start(ws, "chosen", steps=100)  # TINY says eval_every 0
    assert json.loads((ws.run_dir("chosen") / "config.json").read_text())["train"]["eval_every"] == 0
    jobs.stop(ws, "chosen"), jobs.stop(ws, "chosen")


def test_after_stop_the_heartbeat_keeps_saying_stopping_until_the_trainer_ends(tmp_path, monkeypatch):
    """The trainer's heartbeat rewrote "running" over the UI's "stopping" within 2 s; a long evaluation (minutes for
    F5) then looked like training, the curator pressed Stop again, and the second press killed the run before its
    stop checkpoint."""
    from utils.training import runfiles
    from utils.workspace import read_json

    monkeypatch.setattr(runfiles, "HEARTBEAT_S", 0.05)
    run_dir = tmp_path / "runs" / "evaluating"
    run_dir.mkdir(parents=True)
    trainer = subprocess.Popen(["sleep", "60"])  # what Stop signals (it ends at SIGTERM, as a trainer would not)
    files = runfiles.RunFiles(run_dir, tensorboard=False, echo=False)
    files.status(state="running", pid=trainer.pid, devices="cpu", step=40)
    files.start_heartbeat()
    try:
        assert "Stop again to kill it" in jobs.stop(Workspace.open(tmp_path), "evaluating")
        time.sleep(0.3)  # several heartbeats, as during an evaluation that reads no STOP file
        assert read_json(run_dir / "status.json")["state"] == "stopping"
        files.status(state="stopped", step=40)  # the trainer saved and ended
        assert read_json(run_dir / "status.json")["state"] == "stopped"
    finally:
        files.close()
        trainer.kill()
        trainer.wait()


def test_a_stop_pressed_as_a_run_gets_its_turn_never_starts_the_trainer(tmp_path, monkeypatch):
    """Stop pressed while the launcher had its turn but read the transcripts again (the trainer not yet started) was
    lost: the signal was the launcher's and the trainer's start cleared the STOP request, so the run trained on after
    "left the queue" (a cancelled transcript check's aligner went on training in its folder, holding the device)."""
    run_dir = tmp_path / "runs" / "late-stop"
    run_dir.mkdir(parents=True)
    jobs.update_status(run_dir, state="queued", devices="cpu", nproc=1, queued=time.time(), machine=jobs.machine_id(),
                       config=str(run_dir / "config.json"), message="starting")
    started, popen = [], subprocess.Popen
    monkeypatch.setattr(jobs, "read_transcripts_again", lambda *_: jobs.stop(Workspace.open(tmp_path), "late-stop"))
    monkeypatch.setattr(jobs.subprocess, "Popen", lambda *a, **k: started.append(a) or popen(["true"]))
    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert jobs.launch(run_dir) == 0  # in this process: Stop's signal comes here
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert started == []
    assert jobs.read_status(run_dir)["state"] == "stopped"


def test_a_second_stop_ends_every_rank_of_a_torchrun_run(tmp_path):
    """torch elastic starts each rank in a session of its own: killing the launcher's and rank 0's process groups
    left ranks 1.. alive, holding their GPU memory until the 45-minute collective timeout."""
    import sys

    import psutil

    pids = tmp_path / "ranks.txt"
    launcher = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time\n"
        "ranks = [subprocess.Popen(['sleep', '120'], start_new_session=True) for _ in range(2)]\n"
        f"open({str(pids)!r}, 'w').write(' '.join(str(r.pid) for r in ranks))\n"
        "time.sleep(120)\n")], start_new_session=True)
    try:
        wait(lambda: pids.exists() and pids.read_text().strip(), "the ranks to start", 30)
        ranks = [int(p) for p in pids.read_text().split()]
        run_dir = tmp_path / "runs" / "two-gpus"
        run_dir.mkdir(parents=True)
        (run_dir / "status.json").write_text(json.dumps({
            "state": "running", "devices": "cuda:0,1", "nproc": 2, "pid": ranks[0], "launcher_pid": launcher.pid,
            "created": 1.0, "step": 86}))
        (run_dir / "checkpoints" / "step-50").mkdir(parents=True)
        ws = Workspace.open(tmp_path)
        jobs.stop(ws, "two-gpus", by="python app.py stop")  # ranks that run would stop after their step: these never do
        assert (run_dir / "STOP").read_text() == "python app.py stop\n"  # who asked, not "from the UI"
        # what the kill keeps and loses is said: "stopped at step 86" was all, of a run whose work ended at step 50
        said = jobs.stop(ws, "two-gpus")
        assert said == ("two-gpus was killed. Its last saved checkpoint, step-50, is kept: the 36 step(s) after it are "
                        "lost, and Resume goes on from it.")
        assert "step-50, is kept: the 36 step(s)" in json.loads((run_dir / "status.json").read_text())["message"]
        launcher.wait(timeout=10)

        def gone(pid):
            try:
                return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return True

        wait(lambda: all(gone(p) for p in ranks), "every rank to end", 10)
    finally:
        launcher.kill()
        launcher.wait()


def planned_run(ws, name, steps, **status):
    """A run's files as a trainer leaves them (no training): its config and its status."""
    ws.run_dir(name).mkdir(parents=True, exist_ok=True)
    (ws.run_dir(name) / "config.json").write_text(json.dumps({"train": {**TINY, "dataset": "am", "run": name,
                                                                        "max_steps": steps}}))
    jobs.update_status(ws.run_dir(name), **status)
    return ws.run_dir(name) / "config.json"


def test_the_command_line_neither_rewrites_a_run_in_use_nor_takes_a_count_that_trains_nothing(ws, capsys,
                                                                                              monkeypatch):
    """`app.py train --run X` on a run training in the browser started a second trainer that wrote its settings over
    the run's (250 steps became 5), and --max-steps -5 made a "finished" run of nothing that the form then could not
    load. Both are refused with what to do, and nothing is written."""
    import app
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a machine without a GPU, whatever runs this
    config = planned_run(ws, "busy", 250, state="running", step=140, pid=os.getpid(), launcher_pid=os.getpid(),
                         heartbeat=time.time(), machine=jobs.machine_id())
    before = config.read_bytes()
    for argv, said in ((["--run", "busy", "--dataset", "am", "--max-steps", "5"],
                        "A run called busy exists already (running, at step 140): add --continue"),
                       (["--run", "busy", "--continue", "--max-steps", "500"],
                        "Run busy is running now (step 140): stop it first; its settings were not changed"),
                       (["--run", "fresh", "--dataset", "am", "--max-steps", "-5"],
                        "max_steps must be 1 or more, not -5 (--max-steps on the command line)"),
                       # what the trainer refused only once started, leaving a failed run (or a bare folder) behind
                       (["--run", "fresh", "--dataset", "am", "--lr", "-1"],
                        "lr must be 0 or more, not -1 (--lr on the command line); nothing was started"),
                       (["--run", "fresh", "--dataset", "am", "--compile", "maybe"],
                        "compile must be true, false or auto, not 'maybe' (--compile on the command line)"),
                       (["--run", "fresh", "--dataset", "am", "--max-minutes", "-2"],
                        "max_minutes must be 0 or more, not -2.0 (--max-minutes on the command line)"),
                       (["--run", "fresh", "--dataset", "am", "--device", "cuda"],
                        "device cuda was asked for but no CUDA GPU is visible here: use cpu or auto"),
                       (["--run", "fresh", "--dataset", "am", "--resume", "runs"],
                        "runs is not a checkpoint folder (no config.json): give auto, none, or a checkpoint")):
        assert app.main(["train", "--workspace", str(ws.root), *argv]) == 2, argv
        assert said in capsys.readouterr().err, argv
    assert config.read_bytes() == before and not ws.run_dir("fresh").exists()
    # train-vocoder's word for a fresh start (--resume no) is train's too, not a folder called "no" that fails later
    from utils.training import TrainConfig, prepare_run

    path = prepare_run(TrainConfig.from_dict({**TINY, "workspace": str(ws.root), "dataset": "am", "run": "anew",
                                              "resume": "no"}))
    assert json.loads(path.read_text())["train"]["resume"] == "none"
    shutil.rmtree(path.parent)


def test_the_command_line_stops_and_deletes_a_run_as_the_training_tab_does(ws, capsys):
    """A run queued with --background could be stopped only by a STOP file or kill, and deleted by hand."""
    import app

    planned_run(ws, "waiting", 250, state="queued", step=0, queued=time.time(), machine=jobs.machine_id())
    assert app.main(["delete-run", "waiting", "--yes", "--workspace", str(ws.root)]) == 2
    assert "waiting is queued: stop it before deleting it" in capsys.readouterr().err
    assert app.main(["stop", "waiting", "--workspace", str(ws.root)]) == 0
    assert "waiting left the queue" in capsys.readouterr().out and (ws.run_dir("waiting") / "STOP").exists()
    shutil.rmtree(ws.run_dir("waiting"))  # a queued run of no launcher would hold the CPU's queue for later tests

    planned_run(ws, "old", 250, state="finished", step=250)
    for step in (100, 20):
        folder = ws.run_dir("old") / "checkpoints" / f"step-{step}"
        folder.mkdir(parents=True)
        for name in ("model.safetensors", "config.json"):
            (folder / name).write_text("{}")
    assert app.main(["delete-run", "old", "--workspace", str(ws.root)]) == 2  # without --yes: refused, saying what goes
    assert "Deleting run old removes its 2 checkpoint(s) (step-20, step-100)" in capsys.readouterr().err
    assert ws.run_dir("old").exists()
    assert app.main(["delete-run", "old", "--yes", "--workspace", str(ws.root)]) == 0
    assert "Deleted run old." in capsys.readouterr().out and not ws.run_dir("old").exists()
    assert app.main(["stop", "old", "--workspace", str(ws.root)]) == 2
    assert "There is no run called old" in capsys.readouterr().err


def test_resume_auto_on_the_command_line_goes_on_with_the_run_as_continue_does(ws, capsys):
    """Its help said "auto: continue this run's newest checkpoint"; with a run's name it was refused ("exists
    already: add --continue"). Now it takes the --continue way (here: a run training now is not touched)."""
    import app

    config = planned_run(ws, "going", 250, state="running", step=140, pid=os.getpid(), launcher_pid=os.getpid(),
                         heartbeat=time.time(), machine=jobs.machine_id())
    before = config.read_bytes()
    assert app.main(["train", "--workspace", str(ws.root), "--run", "going", "--dataset", "am", "--resume", "auto",
                     "--max-steps", "500"]) == 2
    assert "Run going is running now (step 140): stop it first" in capsys.readouterr().err
    assert config.read_bytes() == before


def test_resume_trains_a_finished_run_longer_only_when_asked_and_never_shortens_one(ws):
    """Resume on a finished run started a trainer that finished at once, saying nothing; the steps box (left at
    another run's value) must not cut or stretch a run stopped halfway, while --max-steps, said on purpose, does."""
    def steps(name):
        return json.loads((ws.run_dir(name) / "config.json").read_text())["train"]["max_steps"]

    planned_run(ws, "done", 60, state="finished", step=60)
    with pytest.raises(StudioError, match="done has done its 60 steps. To train it longer, set the steps .* above 60 "
                                          "and resume: it goes on from step 60"):
        control.plan_resume(ws, "done", 40)
    control.plan_resume(ws, "done", 170)
    assert steps("done") == 170

    planned_run(ws, "halfway", 250, state="stopped", step=151)
    for box in (5, 2000):
        control.plan_resume(ws, "halfway", box)
        assert steps("halfway") == 250
    control.plan_resume(ws, "halfway", 400, extend_unfinished=True)  # the command line's --continue --max-steps
    assert steps("halfway") == 400
    control.plan_resume(ws, "halfway", 300, extend_unfinished=True)
    assert steps("halfway") == 400

    # finished by its time budget (max_minutes) at step 90 of 250: evaluated and saved, and Resume trains on to 250;
    # finished early for good (held-out MCD stopped improving, on_overfit stop) is refused as a run that is done
    planned_run(ws, "timed", 250, state="finished", step=90, ended_by="time budget")
    control.plan_resume(ws, "timed", 5)
    assert steps("timed") == 250
    assert "time budget ran out before step 250; Resume trains on" in views.state_line(ws, "timed")
    planned_run(ws, "overfit", 250, state="finished", step=90)
    listed = {r["run"]: r for r in views.run_table(ws)}  # `app.py list` and the Training tab's run list
    assert listed["timed"]["doing"] == "its time limit ended it; Resume trains on" and not listed["overfit"]["doing"]
    with pytest.raises(StudioError, match="overfit finished early, at step 90 of 250. To train it longer, set the steps"):
        control.plan_resume(ws, "overfit", 5)


def test_a_resume_takes_the_time_limit_of_the_session_it_starts_in(ws, capsys):
    """`--continue --max-minutes 1` ran on with the run's own limit (2.5 min): a time limit belongs to the session (a
    new Colab session has less time left than the one that began the run). The command line's flag, and the
    Optimizations tab's saved limit for the Training tab's Resume, set it; another flag given with --continue is
    said not to apply, naming it, instead of being dropped in silence."""
    import app

    def limit(name):
        return json.loads((ws.run_dir(name) / "config.json").read_text())["train"].get("max_minutes")

    planned_run(ws, "timed", 250, state="finished", step=90, ended_by="time budget")
    control.plan_resume(ws, "timed", None, max_minutes=40)
    assert limit("timed") == 40
    control.plan_resume(ws, "timed")  # none given: the run's own
    assert limit("timed") == 40
    with pytest.raises(StudioError, match="max_minutes must be 0 or more, not -1"):
        control.plan_resume(ws, "timed", max_minutes=-1)
    args = app.build_parser().parse_args(["train", "--workspace", str(ws.root), "--run", "timed", "--continue",
                                          "--max-minutes", "5", "--lr", "1e-3", "--compile", "false"])
    app.continued_run(args)
    assert limit("timed") == 5
    assert ("note: run timed goes on with its own settings: --lr, --compile not applied" in capsys.readouterr().err)
    args = app.build_parser().parse_args(["train", "--workspace", str(ws.root), "--run", "timed", "--continue",
                                          "--dataset", "am"])  # the run's own dataset, said again: nothing to note
    app.continued_run(args)
    assert limit("timed") == 5 and "not applied" not in capsys.readouterr().err
    # steps that a resume does not take are said too: fewer than the plan (never shortened), or the Training tab's
    # box above the plan of a run that has not done its steps (the box may hold another run's number)
    args = app.build_parser().parse_args(["train", "--workspace", str(ws.root), "--run", "timed", "--continue",
                                          "--max-steps", "100"])
    app.continued_run(args)
    assert ("note: --max-steps 100 not applied: timed goes on to step 250, its own plan, not to 100: a resume never "
            "shortens a run; to end it sooner, stop it.") in capsys.readouterr().err
    control.plan_resume(ws, "timed", 1000)  # the tab's Resume
    assert "keeps its plan until it has done its steps; then Resume with more" in control.steps_not_taken(ws, "timed", 1000)
    assert control.steps_not_taken(ws, "timed", 250) is None and control.steps_not_taken(ws, "timed", None) is None
    # the time a resume is told is of the steps after its newest checkpoint, with its time limit: a resume at step
    # 292 of 900 said "about 5 min for 900 steps" (its 608 took 3.6), and a limit that would end it went unsaid
    from utils.training import read_run_config

    (ws.run_dir("timed") / "checkpoints" / "step-90").mkdir(parents=True)
    cfg = read_run_config(ws.run_dir("timed") / "config.json")[0]
    said = control.time_ahead(ws, cfg, going_on=True)
    assert said[0] == f"It goes on from step 90 of {cfg.max_steps:,}: the time below is of the {cfg.max_steps - 90:,} steps left."
    assert f"for {cfg.max_steps - 90:,} steps" in said[1] and said[-1].startswith("Time limit: 5 min: a run that takes")
    assert f"for {cfg.max_steps:,} steps" in control.time_ahead(ws, cfg)[0]  # a new run: every step


def test_the_command_line_starts_where_the_training_tab_would_on_this_machine(ws):
    """`app.py train` without --preset made the `small` model (the tabs say tiny on a CPU) and without --max-steps a
    GPU's 20,000 steps."""
    import app
    from utils import hardware

    args = app.build_parser().parse_args(["train", "--workspace", str(ws.root), "--dataset", "am", "--run", "cli-d"])
    cfg = app.new_run_config(args)
    assert cfg.preset == settings.recommended_preset() == ("base" if hardware.query_gpus() else "tiny")
    assert cfg.max_steps == settings.default_steps(ws)
    given = app.build_parser().parse_args(["train", "--workspace", str(ws.root), "--dataset", "am", "--run", "cli-e",
                                           "--preset", "small", "--max-steps", "7"])
    assert (app.new_run_config(given).preset, app.new_run_config(given).max_steps) == ("small", 7)


def launch_here(run_dir, monkeypatch, command: list[str]) -> dict:
    """jobs.launch of a queued run in this process, its trainer `command`: the run's final status."""
    run_dir.mkdir(parents=True)
    jobs.update_status(run_dir, state="queued", devices="cpu", nproc=1, queued=time.time(), machine=jobs.machine_id(),
                       config=str(run_dir / "config.json"), message="starting")
    (run_dir / "train.log").write_text("step 40/40 loss 2.56\nfinished 40 steps\n")
    popen = subprocess.Popen
    monkeypatch.setattr(jobs.subprocess, "Popen", lambda *a, **k: popen(command, cwd=jobs.ROOT))
    monkeypatch.setattr(jobs, "read_transcripts_again", lambda *_: None)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert jobs.launch(run_dir) == 0
    finally:
        signal.signal(signal.SIGTERM, previous)
    return jobs.read_status(run_dir)


def test_a_run_the_trainer_said_finished_stays_finished_when_its_exit_is_cut_short(tmp_path, monkeypatch):
    """A trainer killed while it shut down after its last checkpoint and "finished" (its loader workers, CUDA): the
    launcher rewrote the run as "failed (signal 15)" (the first H100 suite's transcript check, passed and then
    stopped with its lane); a trainer killed before it finished still reads failed."""
    for name, said in (("finished-then-killed", "finished"), ("killed-while-training", "running")):
        run_dir = tmp_path / "runs" / name
        says = (f"from utils import jobs; from pathlib import Path; jobs.update_status(Path('{run_dir}'), "
                f"state='{said}', message='finished 40 steps')")
        final = launch_here(run_dir, monkeypatch, ["sh", "-c", f'{sys.executable} -c "{says}" && kill -TERM $$'])
        if said == "finished":
            assert final["state"] == "finished" and final["message"] == "finished 40 steps", final
        else:
            assert final["state"] == "failed" and "signal 15" in final["message"], final


def test_a_stop_that_reaches_the_trainer_before_its_signal_handler_reads_stopped(tmp_path, monkeypatch):
    """Stop pressed while the trainer still imported torch (its SIGTERM handler not yet in place): the trainer died
    of the signal and the run read "failed (signal 15)", though the curator had stopped it."""
    # a trainer without a handler yet: Stop's SIGTERM to the launcher (this process) is passed on and ends it
    final = launch_here(tmp_path / "runs" / "stopped-early", monkeypatch,
                        ["sh", "-c", "kill -TERM $PPID; exec sleep 30"])
    assert final["state"] == "stopped" and "as the trainer started" in final["message"], final


def test_start_refuses_a_dataset_with_no_usable_clip_before_any_run_is_made(tiny_runs_copy):
    from utils.runs import control

    ws = tiny_runs_copy
    source = ws.dataset_dir("am")
    target = ws.dataset_dir("all-excluded")
    shutil.copytree(source, target)
    save_manifest(ws, "all-excluded", [{**r, "excluded": True} for r in load_manifest(ws, "am")])
    before = sorted(p.name for p in ws.runs.iterdir())
    for start in (lambda: control.start_training(ws, "all-excluded", "tiny", "no-clips"),
                  lambda: control.start_vocoder_training(ws, "all-excluded", preset="tiny", run="no-clips-voc")):
        with pytest.raises(StudioError, match="Dataset 'all-excluded' has no usable clip to train on"):
            start()
    proc = cli("train", "--dataset", "all-excluded", "--preset", "tiny", "--run", "no-clips-cli",
               "--workspace", str(ws.root))
    assert proc.returncode == 2 and "has no usable clip to train on" in proc.stderr
    assert sorted(p.name for p in ws.runs.iterdir()) == before


def test_the_time_before_start_counts_the_quality_checks_a_run_of_the_dataset_timed(tiny_runs):
    """A family's time is of its steps alone: a short CPU run spent a sixth of its time on quality checks (~45 s of
    268) that the estimate before Start left out. They are counted and timed as this dataset's runs timed them."""
    import dataclasses

    from utils.workspace import read_jsonl

    ws = tiny_runs
    cfg = control.new_config(ws, dict(workspace=str(ws.root), dataset="am", run="next", preset="tiny", max_steps=300))
    assert cfg.eval_every == 50  # as Start schedules them: about six a run
    each = [r["eval_s"] for r in read_jsonl(ws.run_dir("one") / "metrics.jsonl") if r.get("eval_s")]
    assert len(each) == 1  # run `one` evaluated at its end; `f5` is another family's and not counted
    assert control.checks_ahead(ws, cfg) == (
        "Also 6 quality checks (each speaks the held-out clips, scores them and saves): about "
        f"{speed.say_time(6 * each[0])} more, {speed.say_time(each[0])} each (measured by run one on this kind of "
        "machine).")
    assert control.checks_ahead(ws, cfg, done=200).startswith("Also 2 quality checks")  # a resume: those ahead
    assert control.checks_ahead(ws, dataclasses.replace(cfg, dataset="other")) == (
        "Also 6 quality checks (each speaks the held-out clips, scores them and saves): their time comes on top (no "
        "run of other here has timed one yet).")
    assert control.checks_ahead(ws, dataclasses.replace(cfg, evaluate=False)) is None
    ahead = control.time_ahead(ws, cfg)
    assert ahead[-2].startswith("Also 6 quality checks")
    # the steps, the loading and the checks added up, so that a curator does not add three numbers
    steps, loading, checks = ahead[0].seconds, control.loading_ahead(ws, cfg).seconds, 6 * each[0]
    assert steps > 0 and ahead[-1] == f"In all: about {speed.say_time(steps + loading + checks)} from Start to the run's end."
    assert ahead[-3].startswith("Before its first step") and len(ahead) == 4  # the steps' time first
    assert [speed.say_time(s) for s in (0.01, 0.3, 1.2, 89, 100)] == ["0.1 s", "0.3 s", "1 s", "89 s", "2 min"]  # not "0 s"
    other = control.beyond_the_steps(ws, dataclasses.replace(cfg, dataset="other"), said=ahead[:1])
    assert len(other) == 2 and not any(line.startswith("In all") for line in other)  # none timed yet: no sum said


def test_the_time_before_start_counts_the_loading_a_run_of_the_dataset_timed_and_the_clips_real_frames(tiny_runs):
    """The estimate before Start left out the loading before the first step, and reckoned each step at the batch's
    frame budget, where a dataset's clips fill ~82 % of it (espeak-ng, 2,000 frames: 1,650): a quarter too long."""
    import dataclasses

    from utils.datasets.manifest import load_manifest
    from utils.training.batching import FrameBatchSampler
    from utils.training.data import training_rows
    from utils.training.speed import MEL_FRAMES_PER_SECOND, batch_fill
    from utils.workspace import read_jsonl

    ws = tiny_runs
    cfg = control.new_config(ws, dict(workspace=str(ws.root), dataset="am", run="next", preset="tiny", max_steps=300))
    started = [r["start_s"] for r in read_jsonl(ws.run_dir("one") / "metrics.jsonl") if "start_s" in r]
    assert len(started) == 1 and started[0] > 0  # written by the run at its first step (step 0)
    assert control.loading_ahead(ws, cfg) == ("Before its first step it loads the data and the model: about "
                                              f"{speed.say_time(started[0])} (measured by run one on this kind of "
                                              "machine).")
    assert control.loading_ahead(ws, dataclasses.replace(cfg, dataset="other")) == (
        "Before its first step it loads the data and the model: that time comes on top too (no run of other here "
        "has timed it yet).")
    assert control.time_ahead(ws, cfg)[-3] == control.loading_ahead(ws, cfg)  # before the checks' and the sum's lines
    # the fill: the trainer's own batches of this dataset's training clips, at the frames a second of its mels
    train, _ = training_rows(ws, "am")
    frames = [int(r["duration"] * MEL_FRAMES_PER_SECOND) + 1 for r in train]
    for budget in (300, 1000, 2000):
        batches = FrameBatchSampler(frames, budget, length_multiple=4).epoch_batches(0)
        assert batch_fill(ws, "am", budget) == pytest.approx(min(1.0, sum(frames) / (len(batches) * budget)))
    assert 0.1 < batch_fill(ws, "am", 2000) < 0.9  # 4 short clips: a step holds them all, far from 2,000 frames
    assert len(load_manifest(ws, "am")) == len(train) + 1  # the held-out clip is not trained on, so not counted
    said = families.get("matcha").guidance(ws, dataclasses.replace(cfg, max_frames_per_batch=2000,
                                                                    grad_accumulation=1))[0]
    fill = batch_fill(ws, "am", 2000)
    fps = float(re.search(r"; ([\d,]+) frames a second", said).group(1).replace(",", ""))
    assert f"up to 2,000 frames a step (am's clips fill {fill:.0%} of them; " in said
    assert f"Time: about {speed.say_time(300 * 2000 * fill / fps)} for 300 steps" in said
