"""Training from a real browser: start, watch live, reload, stop, resume, queue; the curves and their axes;
messages taken down once they stop being true."""
from __future__ import annotations

import re
import subprocess
import time

import pytest
from playwright.sync_api import expect

from tests.conftest import serve
from tests.test_jobs import TINY
from tests.helpers import make_dataset, numeric_ticks, plot_seen, screenshot
from utils import jobs
from tests.test_training_live import fake_run
from utils.runs import control, settings, views
from webui import training as training_tab
from utils.workspace import append_jsonl, atomic_write_json, read_json


VISIBLE_POINTS_JS = """(sel) => [...document.querySelectorAll(sel + ' svg .role-mark path')]
  .filter(p => p.getAttribute('opacity') !== '0' && /[0-9.]+,[0-9.]+[^Z]*[AL]/.test(p.getAttribute('d') || ''))
  .length"""  # marks with an area or a length: a line through one point is 'M x,yZ', drawn as nothing


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    ws = make_dataset(tmp_path_factory.mktemp("browser") / "workspace", n_train=3, n_val=1, max_chars=25)
    settings.save_settings(ws, TINY)  # what the Optimizations tab saves: tiny CPU batches
    s = serve(ws)
    yield s
    for r in views.run_table(ws):
        if r["status"] in jobs.ACTIVE:
            jobs.stop(ws, r["run"]), jobs.stop(ws, r["run"])
    s.stop()


def choose(page, label: str, option: str) -> None:
    page.get_by_label(label, exact=True).click()
    page.get_by_role("option", name=option, exact=True).click()


def step_shown(page) -> int:
    match = re.search(r"step (\d+)", page.locator("#run-summary").inner_text())
    return int(match.group(1)) if match else -1


def open_training(page, url):
    page.goto(url)
    page.get_by_role("tab", name="Training").click()


def test_start_watch_reload_stop_resume_and_queue(server, page, tmp_path):
    open_training(page, server.url)
    choose(page, "dataset", "am")
    page.get_by_label("tiny").check()
    page.get_by_label("run name").fill("live")
    page.get_by_label("steps").fill("100000")
    page.get_by_role("button", name="Start training").click()
    expect(page.locator("#train-message")).to_contain_text("live", timeout=30_000)

    summary = page.locator("#run-summary")
    expect(summary).to_contain_text("running", timeout=120_000)
    message = page.locator("#train-message")  # follows the run's own state, not what Start said
    expect(message).to_contain_text("Run live (100000 steps) is training", timeout=30_000)
    expect(message).not_to_contain_text("queued")
    log = page.locator("#train-log textarea")
    expect(log).to_have_value(re.compile(r"training from step 0"), timeout=120_000)
    page.wait_for_function("() => { const s = document.querySelector('#run-summary'); "
                           "const m = s && s.innerText.match(/step (\\d+)/); return m && +m[1] >= 3; }", timeout=120_000)
    # the fresh workspace's first run draws its curves on numeric axes, each curve named in the legend
    from webui.training import curve_name

    for plot, curves in (("#loss-plot", ("loss", "cfm", "prior", "dur")), ("#lr-plot", ("lr",)),
                         ("#speed-plot", ("samples_per_s",))):
        # plain words first, the metric's name in brackets: "sound detail (cfm)"
        seen = plot_seen(page, plot, [curve_name(c) for c in curves])
        assert all(f"({c})" in curve_name(c) for c in curves)
        numeric_ticks(seen["x"])
        numeric_ticks(seen["y"])
        assert "series" not in seen["legend"] and "loss_scale" not in seen["legend"]
    screenshot(page.locator("#loss-plot"), tmp_path, "first-run-loss-plot")

    # the page reloads: the run is still there and still moving
    before = step_shown(page)
    page.reload()
    page.get_by_role("tab", name="Training").click()
    expect(summary).to_contain_text("live", timeout=30_000)
    # the form shows the running run's choices again, not a blank dataset and the default steps
    expect(page.get_by_label("dataset", exact=True)).to_have_value("am", timeout=30_000)
    expect(page.get_by_label("steps", exact=True)).to_have_value("100000")
    expect(page.get_by_label("tiny")).to_be_checked()
    screenshot(page.locator("#train-form"), tmp_path, "training-form-after-reload")
    page.wait_for_function(f"() => {{ const m = document.querySelector('#run-summary').innerText.match(/step (\\d+)/); "
                           f"return m && +m[1] > {before}; }}", timeout=120_000)

    # Start again without a new name (a double click, a reload) queues no second run of the same recordings
    runs = {p.name for p in server.ws.runs.iterdir()}
    page.get_by_label("run name").fill("")
    page.get_by_role("button", name="Start training").click()
    expect(page.locator("#train-message")).to_contain_text(re.compile(r"Run live is (running|training) on am now"))
    assert {p.name for p in server.ws.runs.iterdir()} == runs
    # a second run while the CPU is taken waits in the queue, with a message saying so
    page.get_by_label("run name").fill("waiting")
    page.get_by_role("button", name="Start training").click()
    expect(page.locator("#train-message")).to_contain_text(re.compile(r"waiting.*queued.*live holds it"),
                                                          timeout=30_000)
    assert "queued" in page.locator("#run-list").inner_text()
    jobs.stop(server.ws, "waiting")  # leave the queue (checked by the job-service tests)

    # Stop: the run saves a checkpoint and ends
    choose(page, "run shown below", "live")
    page.locator("#stop-button").click()
    run_said = page.locator("#run-message")  # under the run panel's buttons, where the eye is
    expect(run_said).to_contain_text("Stopping live: it finishes the current step, saves a checkpoint and exits")
    expect(summary).to_contain_text("stopped", timeout=120_000)
    expect(summary).to_contain_text("last checkpoint step-", timeout=30_000)
    expect(summary).to_contain_text("Stopped because Stop was pressed")
    stopped_at = step_shown(page)
    assert views.view(server.ws, "live").checkpoints[-1][0] == stopped_at

    # Resume: the step count continues from the checkpoint
    page.locator("#resume-button").click()
    expect(run_said).to_contain_text("Resumed live: it goes on from its newest checkpoint")
    expect(summary).to_contain_text("running", timeout=120_000)
    page.wait_for_function(f"() => {{ const m = document.querySelector('#run-summary').innerText.match(/step (\\d+)/); "
                           f"return m && +m[1] > {stopped_at}; }}", timeout=120_000)
    expect(log).to_have_value(re.compile(rf"resume: continuing from .*step-{stopped_at}"), timeout=30_000)
    page.locator("#stop-button").click()
    expect(summary).to_contain_text("stopped", timeout=120_000)


def test_a_trainer_killed_with_sigkill_shows_failed_with_its_last_log_lines(server, page):
    import os
    import signal

    control.start_training(server.ws, "am", run="doomed", overrides={**TINY, "max_steps": 100_000})
    deadline = time.time() + 180
    while time.time() < deadline and not (jobs.reconcile(server.ws.run_dir("doomed")).get("step") or 0) >= 1:
        time.sleep(0.3)
    os.kill(jobs.read_status(server.ws.run_dir("doomed"))["pid"], signal.SIGKILL)
    open_training(page, server.url)
    choose(page, "run shown below", "doomed")
    summary = page.locator("#run-summary")
    expect(summary).to_contain_text("failed", timeout=60_000)
    expect(summary).to_contain_text("Last log lines")
    expect(page.locator("#run-list")).to_contain_text("failed")


def test_a_vocoder_is_trained_from_the_training_tab_and_watched_like_any_run(server, page):
    open_training(page, server.url)
    choose(page, "dataset", "am")
    page.get_by_text("Vocoder: a natural voice").click()
    steps = page.locator("#vocoder-steps input")
    steps.fill("2")
    steps.press("Tab")  # commit the typed value before the click reads it
    expect(steps).to_have_value("2")
    # the label comes back from the server's change handler: the app holds 2 before the click sends it
    expect(page.locator("#vocoder-start")).to_have_text("Train vocoder (2 steps)", timeout=30_000)
    page.locator("#vocoder-start").click()
    expect(page.locator("#train-message")).to_contain_text("Vocoder run", timeout=30_000)
    expect(page.locator("#train-message")).to_contain_text("(2 steps)")
    name = re.search(r"Vocoder run (\S+)", page.locator("#train-message").inner_text()).group(1)
    expect(page.locator("#run-summary")).to_contain_text(f"{name}: finished", timeout=240_000)
    expect(page.locator("#train-log textarea")).to_have_value(re.compile(r"training from scratch, preset tiny"))
    expect(page.locator("#run-list")).to_contain_text("vocoder (tiny)", timeout=30_000)


def test_a_reload_after_an_f5_run_brings_the_form_back_on_f5_with_its_licence_and_clip(server, page, tmp_path):
    """The form comes back as the last run was started: an F5 run's engine, its licence yes and reference clip
    (the Matcha model size hidden), so Start starts another F5 run, not a Matcha one (which this CPU refuses)."""
    from tests.test_f5_engine import gpu_machine
    from utils import hardware
    from utils.f5 import HUB_ID
    from utils.training import TrainConfig, prepare_run

    ws = server.ws
    # what the tab's Start writes for an F5 run (engine, the base, licence yes, clip) on a machine whose GPU can
    # fine-tune the base; the run is left as failed, as it would end on a machine that cannot download it
    cfg = TrainConfig.from_dict({**settings.saved_settings(ws), "workspace": str(ws.root), "dataset": "am",
                                 "preset": "base", "run": "f5-last", "engine": "f5", "init": HUB_ID,
                                 "prompt": "am-001", "max_steps": 300})
    with pytest.MonkeyPatch.context() as gpu:
        gpu.setattr(hardware, "detect", lambda *a, **k: gpu_machine())
        jobs.update_status(prepare_run(cfg, accept_licence=True).parent, state="failed", created=time.time())
    open_training(page, server.url)
    expect(page.get_by_role("radio", name=re.compile("^F5-TTS"))).to_be_checked(timeout=30_000)
    expect(page.locator("#base-licence input")).to_be_checked()
    expect(page.locator("#reference-clip textarea, #reference-clip input").first).to_have_value("am-001")
    expect(page.locator("#train-form").get_by_label("tiny")).to_be_hidden()  # the size is the pretrained base's
    expect(page.get_by_label("learn everything")).to_be_hidden()  # F5 always learns everything: no mode to pick
    expect(page.locator("#start-from")).to_be_hidden()  # its base box says what it starts from, not "(from scratch)"
    expect(page.get_by_label("steps", exact=True)).to_have_value("300")
    screenshot(page.locator("#train-form"), tmp_path, "f5-form-after-reload")

    page.get_by_label("run name").fill("f5-again")
    page.get_by_role("button", name="Start training").click()  # the same F5 start, here: this CPU cannot run it
    expect(page.locator("#train-message")).to_contain_text("This machine cannot fine-tune the F5-TTS base",
                                                           timeout=30_000)
    assert not ws.run_dir("f5-again").exists()
    expect(page.locator("#base-licence input")).to_be_checked()
    page.get_by_role("radio", name=re.compile("^MMS")).check()  # a yes is to one licence: MMS asks its own
    expect(page.locator("#base-licence input")).not_to_be_checked()
    expect(page.locator("#base-licence")).to_contain_text("MMS-TTS base's licence")
    page.get_by_role("radio", name=re.compile("^Matcha")).check()  # back on Matcha: its size and modes return
    expect(page.get_by_label("learn everything")).to_be_visible()
    expect(page.locator("#train-form").get_by_label("tiny")).to_be_visible()
    expect(page.locator("#start-from")).to_be_visible()


def test_every_evaluation_adds_a_point_to_the_validation_mcd_curve(server, page, tmp_path):
    """The quality curve a curator watches: a run that evaluates every 2 steps draws its held-out MCD over the
    steps, with the same numbers as its metrics file, on numeric axes."""
    from tests.test_jobs import ended
    from utils.workspace import read_jsonl

    control.start_training(server.ws, "am", run="evaluated", max_steps=6, overrides={**TINY, "max_steps": 6,
                                                                                   "eval_every": 2})
    status = ended(server.ws, "evaluated")
    assert status["state"] == "finished", status.get("message")
    evaluations = [m for m in read_jsonl(server.ws.run_dir("evaluated") / "metrics.jsonl") if "mcd" in m]
    assert len(evaluations) >= 3, evaluations

    open_training(page, server.url)
    choose(page, "run shown below", "evaluated")
    seen = plot_seen(page, "#mcd-plot", ("distance from the real voice (mcd)",))
    steps, values = numeric_ticks(seen["x"]), numeric_ticks(seen["y"])
    assert steps[0] <= evaluations[0]["step"] and steps[-1] >= evaluations[-1]["step"]
    mcds = [m["mcd"] for m in evaluations]
    gap = values[1] - values[0] if len(values) > 1 else 1.0  # the axis spans the run's numbers, within a tick
    assert values[0] - gap <= min(mcds) and max(mcds) <= values[-1] + gap
    screenshot(page.locator("#mcd-plot"), tmp_path, "validation-mcd-plot")


def test_an_omnivoice_fine_tune_starts_from_the_tab_with_its_guidance_and_finishes(server, page, tmp_path):
    """OmniVoice picked on the Training tab: its licence box and reference-clip box under its own name, the
    guidance (time, memory, disk) before Start; started from a base folder in the hub's layout (the tiny random
    one), the run trains in its own process, evaluates and finishes, and its checkpoint is a voice folder."""
    from tests.helpers import add_joined_clips
    from tests.test_jobs import ended
    from utils.omnivoice.tiny import write_tiny_base

    ws = server.ws
    make_dataset(ws.root, name="omni", n_train=3, n_val=1, max_chars=25)
    add_joined_clips(ws, "omni")  # a 3-20 s reference clip
    write_tiny_base(ws.root / "pretrained" / "tiny-omnivoice")
    open_training(page, server.url)
    choose(page, "dataset", "omni")
    page.get_by_role("radio", name=re.compile("^OmniVoice")).check()
    expect(page.locator("#base-licence")).to_contain_text("OmniVoice base's licence")
    expect(page.locator("#reference-clip")).to_contain_text("OmniVoice reference clip")
    page.get_by_label("OmniVoice base to start from").fill("pretrained/tiny-omnivoice")
    page.get_by_label("run name").fill("omni-tab")
    page.get_by_label("steps", exact=True).fill("2")
    expect(page.locator("#run-guidance")).to_contain_text("Memory: about", timeout=30_000)
    screenshot(page.locator("#train-form"), tmp_path, "omnivoice-form")
    page.get_by_role("button", name="Start training").click()
    status = ended(ws, "omni-tab")
    assert status["state"] == "finished", status.get("message")
    assert read_json(ws.run_dir("omni-tab") / "config.json")["train"]["dataset"] == "omni"
    log = (ws.run_dir("omni-tab") / "train.log").read_text()
    assert "fine-tune: starting from the OmniVoice base" in log and "eval step 2" in log
    assert (ws.run_dir("omni-tab") / "checkpoints" / "step-2" / "prompt.wav").is_file()


def test_a_run_of_120_steps_reads_its_steps_and_a_gpus_speed_as_plain_numbers(server, page):
    """The step axes of a 120-step run read 1e+2, 1.1e+2, 1.2e+2 ('~g' took as many significant digits as the
    ticks' spacing), and so would a GPU's 150 samples a second: plain numbers, as on a ruler."""
    run_dir = server.ws.run_dir("ruler")
    run_dir.mkdir(parents=True)
    atomic_write_json(run_dir / "config.json", {"train": {"dataset": "am", "preset": "tiny", "max_steps": 120}})
    atomic_write_json(run_dir / "status.json", {"state": "finished", "step": 120, "max_steps": 120,
                                                "created": time.time(), "ended": time.time()})
    for step in range(5, 121, 5):  # as the trainer writes them (log_every 5)
        append_jsonl(run_dir / "metrics.jsonl", {"step": step, "loss": 3.0 - step / 100, "lr": 2e-4,
                                                 "samples_per_s": 100.0 + step, "time": time.time()})
    append_jsonl(run_dir / "metrics.jsonl", {"step": 120, "mcd": 15.5, "time": time.time()})

    open_training(page, server.url)
    choose(page, "run shown below", "ruler")
    for plot in ("#loss-plot", "#mcd-plot", "#lr-plot", "#speed-plot"):
        seen = plot_seen(page, plot)
        assert all(re.fullmatch(r"\d+", t.replace(",", "")) for t in seen["x"]), (plot, seen["x"])
        assert numeric_ticks(seen["x"])[-1] >= 100, (plot, seen["x"])
    speeds = plot_seen(page, "#speed-plot")["y"]
    assert all(re.fullmatch(r"\d+", t.replace(",", "")) for t in speeds) and numeric_ticks(speeds)[-1] >= 200, speeds


def test_the_first_evaluation_shows_as_a_point_with_plain_axis_labels(server, page, tmp_path):
    run_dir = server.ws.run_dir("first-eval")  # a run of 100 steps at its first evaluation, step 50
    run_dir.mkdir(parents=True)
    atomic_write_json(run_dir / "config.json", {"train": {"dataset": "am", "preset": "tiny", "max_steps": 100}})
    atomic_write_json(run_dir / "status.json", {"state": "finished", "created": time.time(), "step": 50,
                                                "max_steps": 100})
    append_jsonl(run_dir / "metrics.jsonl", {"step": 50, "loss": 3.0, "time": time.time()})
    append_jsonl(run_dir / "metrics.jsonl", {"step": 50, "mcd": 12.34567, "time": time.time()})
    open_training(page, server.url)
    choose(page, "run shown below", "first-eval")
    seen = plot_seen(page, "#mcd-plot", ("distance from the real voice (mcd)",))
    steps, values = numeric_ticks(seen["x"]), numeric_ticks(seen["y"])  # the point stands off the plot's edges
    assert steps[0] == 0 and steps[-1] > 50 and values[0] < 12.3457 < values[-1], seen
    assert page.evaluate(VISIBLE_POINTS_JS, "#mcd-plot") == 1
    screenshot(page.locator("#mcd-plot"), tmp_path, "first-evaluation-point")

    # the run's last evaluation: Gradio drew a plot whose axes moved with the points it held before, so this point
    # stayed missing until a reload
    append_jsonl(run_dir / "metrics.jsonl", {"step": 100, "mcd": 11.5, "time": time.time()})
    atomic_write_json(run_dir / "status.json", {"state": "finished", "created": time.time(), "step": 100,
                                                "max_steps": 100})
    expect_points = time.time() + 40
    while page.evaluate(VISIBLE_POINTS_JS, "#mcd-plot") != 2 and time.time() < expect_points:
        time.sleep(0.5)
    assert page.evaluate(VISIBLE_POINTS_JS, "#mcd-plot") == 2
    assert numeric_ticks(plot_seen(page, "#mcd-plot", ("distance from the real voice (mcd)",))["x"])[-1] > 100


def test_the_training_tab_drops_a_message_about_another_run_and_a_deleted_run(server, page, tmp_path):
    """Messages that stop being true are taken down: the message line about one run once another run is shown, the
    run picker and list once a run is deleted."""
    ws = server.ws
    fake_run(ws, "gone", state="finished")
    fake_run(ws, "fine", state="finished")
    trainer = subprocess.Popen(["sleep", "600"])  # a "trainer" that Stop's signal ends without a goodbye
    try:
        fake_run(ws, "broken", state="running", pid=trainer.pid, launcher_pid=trainer.pid)  # the newest: shown first
        page.goto(server.url)
        page.get_by_role("tab", name="Training").click()
        summary = page.locator("#run-summary")
        stop, resume = page.locator("#stop-button"), page.locator("#resume-button")
        expect(summary).to_contain_text("broken: running", timeout=30_000)
        expect(stop).to_be_enabled()
        expect(resume).to_be_disabled()  # it still trains

        stop.click()  # said under the buttons; the run's line shows it failed (no goodbye)
        expect(page.locator("#run-message")).to_contain_text("Stopping broken")
        expect(summary).to_contain_text("broken: failed", timeout=30_000)
    finally:
        trainer.kill()
        trainer.wait()
    # an ended run has nothing to stop: Stop is greyed out (it stayed red and pressable), Resume is not
    expect(stop).to_be_disabled()
    expect(resume).to_be_enabled()
    picker = page.locator("#run-select input")
    picker.click()
    page.get_by_role("option", name="fine", exact=True).click()
    expect(summary).to_contain_text("fine: finished")
    expect(page.locator("#run-message")).to_have_text("")  # it would read as said of run fine
    expect(stop).to_be_disabled()
    screenshot(page.locator("#run-summary"), tmp_path, "another-run-shown")

    tick = page.get_by_label("yes, delete the run shown")
    tick.check()  # a yes for run fine ...
    picker.click()
    page.get_by_role("option", name="gone", exact=True).click()
    expect(summary).to_contain_text("gone: finished")
    expect(tick).not_to_be_checked()  # ... is no yes for the run shown next
    tick.check()
    page.get_by_role("button", name="Delete run").click()
    expect(page.locator("#run-message")).to_contain_text("Deleted run gone.")
    expect(picker).not_to_have_value("gone")  # the picker names a run that exists, at once
    expect(tick).not_to_be_checked()  # a yes for gone, not for the run shown next
    expect(page.locator("#run-list")).not_to_contain_text("gone")
    assert not ws.run_dir("gone").exists()


def test_a_dataset_picked_while_the_tabs_refresh_is_on_its_way_stays_picked(tmp_path, page, monkeypatch):
    """The Training tab refreshes its picker each time it opens; on a busy server (a training run on two cores, a share
    link) the answer came after the curator's pick and put the dataset it was sent back, and Start trained that one
    (a CI run's OmniVoice run on the 4 short clips of `am`, refused for want of a 3-20 s clip); then its "Which
    engine" lines, computed for the dataset it was sent, were drawn over the picked one's. The page load's restore
    of the last form is dropped the same way by a pick made before it answers."""
    import threading

    from tests.helpers import launch_local
    from webui.app import build_ui
    from webui.context import AppContext

    ws = make_dataset(tmp_path / "workspace", name="am", n_train=1, n_val=0)
    make_dataset(ws.root, name="omni", n_train=1, n_val=0)
    restored = training_tab.restore_form(AppContext(ws))[0]["value"]  # what the page load's restore puts back
    other = next(n for n in ws.list_datasets() if n != restored)
    names = ("restore_page", "form_on_open")
    called, released, answered = ({n: threading.Event() for n in names} for _ in range(3))

    def held(name, fn):  # answers only once the test's pick is made: a server too busy to answer sooner
        def late(*args):
            called[name].set()
            released[name].wait(30)
            try:
                return fn(*args)
            finally:
                answered[name].set()
        return late

    for name in names:
        monkeypatch.setattr(training_tab, name, held(name, getattr(training_tab, name)))
    demo = build_ui(AppContext(ws))
    launch_local(demo.queue())
    picker, advice = page.get_by_label("dataset", exact=True), page.locator("#engine-advice")

    def picked_while(dataset: str, *late: str) -> None:
        assert all(called[n].wait(30) for n in late)  # the refresh is on its way
        choose(page, "dataset", dataset)
        expect(advice).to_contain_text(f" of usable speech in {dataset};")  # the pick's own answer is in
        for n in late:
            released[n].set()
        assert all(answered[n].wait(30) for n in late)
        page.wait_for_timeout(1500)  # what a late answer would do, it has done by now
        expect(picker).to_have_value(dataset)
        expect(advice).to_contain_text(f" of usable speech in {dataset};")  # the lines speak of the one picked
        for events in (called, released, answered):
            events["form_on_open"].clear()

    try:
        released["form_on_open"].set()  # the page load's restore alone is held
        open_training(page, demo.local_url)
        picked_while(other, "restore_page")
        page.get_by_role("tab", name="Dataset").click()
        page.get_by_role("tab", name="Training").click()
        picked_while(restored, "form_on_open")
        released["form_on_open"].set()  # a dropped refresh leaves the next opening's as it was
        page.get_by_role("tab", name="Dataset").click()
        page.get_by_role("tab", name="Training").click()
        assert answered["form_on_open"].wait(30)
        expect(picker).to_have_value(restored)
    finally:
        demo.close()
