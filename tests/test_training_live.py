"""The Training tab watching a run: one poll brings the live panel, the message line and
the run list together, sends only what changed, and comes less often while the run is quiet; a message that stops
being true (a run deleted, another run shown, a double press of Start) is taken down or rewritten. Driven through
the tab's own events (gradio_client), on run folders written as the trainer writes them."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.helpers import make_dataset, serve_tab
from tests.test_jobs import TINY
from utils import jobs
from utils.runs import control, settings, views
from utils.training import speed
from utils.workspace import Workspace, append_jsonl, atomic_write_json
from webui import training

# the poll's outputs as the API returns them (gr.State left out): summary, log, six plots, four players, message,
# run list, run picker, vocoder line, recognizer line, three pickers' choices, the timer
SUMMARY, LOG, LOSS, MCD, MESSAGE, RUN_LIST, PICKER, TIMER = 0, 1, 2, 3, 12, 13, 14, 20
SKIP = {"__type__": "update"}


def metric(step: int) -> dict:
    return {"step": step, "loss": 3.0 - step / 1000, "dur": 1.0, "prior": 1.0, "cfm": 1.0, "lr": 2e-4,
            "samples_per_s": 40.0, "time": time.time()}


def fake_run(ws: Workspace, name: str, state: str = "running", steps: int = 50, **status) -> None:
    """A run folder as the trainer leaves it: config, status (a live pid while "running"), log and metrics."""
    run_dir = ws.run_dir(name)
    run_dir.mkdir(parents=True)
    atomic_write_json(run_dir / "config.json", {"train": {"dataset": "am", "preset": "tiny", "max_steps": 1000}})
    atomic_write_json(run_dir / "status.json", {"state": state, "pid": os.getpid(), "launcher_pid": os.getpid(),
                                                "created": time.time(), "step": steps, "max_steps": 1000, **status})
    for step in range(10, steps + 1, 10):
        append_jsonl(run_dir / "metrics.jsonl", metric(step))
        with open(run_dir / "train.log", "a", encoding="utf-8") as log:
            log.write(f"12:00:00 step {step}/1000 loss {metric(step)['loss']:.3f}\n")


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.setattr(training, "PLOTS_EVERY_S", 0.0)  # curves as soon as new rows come (the 5 s limit aside)
    return Workspace.open(tmp_path / "workspace")


def test_a_quiet_run_is_polled_less_and_less_and_one_that_talks_at_its_own_pace():
    interval, seen = 1.0, []
    for _ in range(6):  # nothing new: twice as long each time, up to 10 s
        interval = training.next_interval(interval, news=False, gap_s=None)
        seen.append(interval)
    assert seen == [2.0, 4.0, 8.0, 10.0, 10.0, 10.0]
    # news: half its rhythm (a GPU run logging every second, a CPU run every ~20 s), or 1 s after a long silence
    assert training.next_interval(10.0, news=True, gap_s=1.0) == 1.0
    assert training.next_interval(1.0, news=True, gap_s=20.0) == 10.0
    assert training.next_interval(10.0, news=True, gap_s=6.0) == 3.0
    assert training.next_interval(10.0, news=True, gap_s=300.0) == 1.0
    assert training.next_interval(10.0, news=True, gap_s=None) == 1.0


def test_a_poll_sends_only_what_changed_and_the_run_list_moves_with_the_details(ws):
    fake_run(ws, "watched")
    with serve_tab(training, ws, "Training") as client:
        interval = [1.0]  # the timer's interval, as the browser sends it back with each tick

        def poll():
            out = client.predict("watched", interval[0], api_name="/refresh_run")
            interval[0] = out[TIMER].get("value", interval[0]) if isinstance(out[TIMER], dict) else interval[0]
            return out

        first = poll()  # a page just opened: everything, the curves drawn into its empty boxes at once
        assert "**watched**: running" in first[SUMMARY] and "step 50/1000" in first[LOG]
        assert "40.0 clips a second" in first[SUMMARY]  # not "40.0 samples/s"
        assert "running" in json.dumps(first[RUN_LIST]) and first[LOSS]["data"] and first[MCD] is None
        second = poll()  # nothing changed: nothing is sent, and the next poll comes later
        assert all(out == SKIP for out in second[:TIMER]) and second[TIMER]["value"] == 2.0
        third = poll()
        assert all(out == SKIP for out in third[:TIMER]) and third[TIMER]["value"] == 4.0

        fake_more = ws.run_dir("watched")
        append_jsonl(fake_more / "metrics.jsonl", metric(60))
        with open(fake_more / "train.log", "a", encoding="utf-8") as log:
            log.write("12:00:01 step 60/1000 loss 2.940\n")
        fourth = poll()
        assert fourth[LOG].endswith("step 60/1000 loss 2.940") and fourth[LOSS]["data"][-1][0] == 60.0
        assert fourth[MCD] == SKIP  # only the curves that moved are drawn again
        assert fourth[TIMER]["value"] < 4.0  # the run said something: polled sooner again

        # the run fails: the summary and the run list say so in the same poll, not seconds apart
        atomic_write_json(fake_more / "status.json", {**json.loads((fake_more / "status.json").read_text()),
                                                       "state": "failed", "message": "out of memory"})
        fifth = poll()
        assert "**watched**: failed" in fifth[SUMMARY] and "failed" in json.dumps(fifth[RUN_LIST])


def test_an_evaluation_is_drawn_in_the_poll_that_lists_its_best(tmp_path):
    """The run list said "best step-100 (9.74 dB)" while the validation MCD plot still showed only the step-50
    points: the curves are redrawn at most every PLOTS_EVERY_S, and an evaluation waited its turn with the losses."""
    from webui.context import AppContext

    ws = Workspace.open(tmp_path / "workspace")
    fake_run(ws, "evaluated")
    ctx, held, quality = AppContext(ws), {}, list(training.PLOTS).index("quality")
    assert "plots" in training.panel(ctx, "evaluated", held, fresh=True)  # the page opens: the losses drawn
    for step, mcd in ((60, 13.6), (70, 9.7)):
        append_jsonl(ws.run_dir("evaluated") / "metrics.jsonl", {"step": step, "mcd": mcd, "time": time.time()})
        drawn = training.panel(ctx, "evaluated", held).get("plots", {}).get(quality)
        if drawn is None:  # its axes moved: emptied, and drawn whole by the poll that comes at once ("hurry")
            drawn = training.panel(ctx, "evaluated", held).get("plots", {}).get(quality)
        assert drawn["value"]["step"].max() == step, step


def test_a_deleted_run_leaves_the_picker_and_the_list_at_once(ws):
    fake_run(ws, "older", state="finished")
    fake_run(ws, "newer", state="finished")
    with serve_tab(training, ws, "Training") as client:
        message, _, picker, table, ticked = client.predict("older", True, api_name="/delete_run")
        assert message == "Deleted run older." and picker["value"] == "newer"
        assert ticked["value"] is False  # its yes was for run older: one more press must not delete newer
        assert "older" not in json.dumps(table) and "newer" in json.dumps(table)
        # deleted elsewhere (another browser, the command line) while shown here: the next poll picks a run that is
        control.delete(ws, "newer")
        fake_run(ws, "third", state="finished")
        polled = client.predict("newer", api_name="/refresh_run")
        assert polled[PICKER]["value"] == "third" and "newer" not in json.dumps(polled[RUN_LIST])


def test_a_page_showing_no_run_shows_the_first_run_started_elsewhere(ws):
    """A second browser tab opened on an empty workspace listed the run another tab started, and went on saying
    "No run yet" until the curator picked it."""
    with serve_tab(training, ws, "Training") as client:
        assert "value" not in client.predict(None, api_name="/refresh_run")[PICKER]  # nothing to show yet
        fake_run(ws, "elsewhere", state="finished")
        polled = client.predict(None, api_name="/refresh_run")
        assert polled[PICKER]["value"] == "elsewhere" and "**elsewhere**: finished" in polled[SUMMARY]


def test_a_message_about_one_run_is_cleared_when_another_run_is_shown(ws):
    """Under the run panel's buttons, what Stop said of run broken; under Start, the line following the run started.
    Another run shown clears both: they would read as said of it."""
    fake_run(ws, "broken", state="failed", message="the trainer ran out of memory")
    fake_run(ws, "fine", state="finished")
    with serve_tab(training, ws, "Training") as client:
        said = client.predict("broken", api_name="/stop_training")
        assert said == "broken is not running (failed)."
        polled = client.predict("broken", api_name="/refresh_run")
        assert polled[MESSAGE] == SKIP  # Stop said it under its button: the line under Start is Start's
        shown = client.predict("fine", api_name="/show_run")
        assert shown[SUMMARY].startswith("**fine**: finished") and shown[-1] == ""  # the run panel's line
        assert client.predict("fine", api_name="/refresh_run")[MESSAGE] == SKIP


def test_pressing_start_twice_starts_one_run_and_the_line_keeps_following_it(tmp_path):
    """The second press of a double press (the same name, moments later) used to leave "Not done: A run called ...
    exists already" on screen for the whole run the first press started."""
    ws = make_dataset(tmp_path / "workspace", n_train=3, n_val=1, max_chars=25)
    settings.save_settings(ws, TINY)
    with serve_tab(training, ws, "Training") as client:
        def start():
            return client.predict("am", "tiny", "twice", 2, "(from scratch)", "full", False, "matcha", False, "", "",
                                  api_name="/start_training")[0]

        try:
            assert "Run **twice**" in start()
            again = start()
            assert "Not done" not in again and again.startswith("Run **twice**")
            assert "Start was pressed twice: the first press started it, the second nothing" in again
            assert [r["run"] for r in views.run_table(ws)] == ["twice"]
            followed = client.predict("twice", api_name="/refresh_run")[MESSAGE]  # then the run as it is
            assert followed.startswith("Run **twice**") and "pressed twice" not in followed
        finally:
            end = time.time() + 240
            while jobs.reconcile(ws.run_dir("twice")).get("state") in jobs.ACTIVE and time.time() < end:
                time.sleep(1)
    assert jobs.read_status(ws.run_dir("twice"))["state"] == "finished"


def test_an_idle_app_looks_for_work_every_20_ms_not_every_millisecond(tmp_path):
    """Gradio's queue polls for events every millisecond while it has none: ~8 % of a core of a 2-core laptop, all
    day, taken from the training run (bench/ui_polling.py --browser measures the app's CPU)."""
    from webui.app import QUEUE_IDLE_S, build_ui, quiet_queue
    from webui.context import AppContext

    demo = quiet_queue(build_ui(AppContext(Workspace.open(tmp_path / "workspace"))).queue())
    assert demo._queue.sleep_when_free == QUEUE_IDLE_S == 0.02


def test_a_stopped_run_says_whether_a_checkpoint_was_saved(ws):
    """A run taken out of the queue said "its last checkpoint is saved" with no checkpoint folder at all."""
    fake_run(ws, "dequeued", state="stopped", steps=0, message="removed from the queue before it started")
    line = views.state_line(ws, "dequeued")
    assert "removed from the queue before it started, so nothing was saved; Resume starts it from the beginning" in line
    assert "checkpoint is saved" not in line
    fake_run(ws, "kept", state="stopped", steps=20, message="stopped by request (signal 15) at step 20")
    (ws.run_dir("kept") / "checkpoints" / "step-20").mkdir(parents=True)
    (ws.run_dir("kept") / "checkpoints" / "step-20" / "model.safetensors").write_bytes(b"")
    assert ": its last checkpoint (step 20) is saved; Resume continues from it" in views.state_line(ws, "kept")


def test_resuming_a_run_whose_dataset_was_deleted_says_so_and_changes_nothing(ws):
    """It said "Dataset 'am' has no rows yet" and had written the new step count into the run, so the next try
    said the run had done steps it never trained."""
    from utils.events import StudioError

    fake_run(ws, "orphaned", state="finished", steps=1000)
    with pytest.raises(StudioError, match=r"trained on dataset 'am', which is no longer in this workspace \(deleted\)"
                                          r": prepare the same recordings again under the name am"):
        control.plan_resume(ws, "orphaned", 2000)
    assert json.loads((ws.run_dir("orphaned") / "config.json").read_text())["train"]["max_steps"] == 1000


def test_a_fresh_page_brings_start_from_back_only_while_that_run_is_active(ws):
    """A page opened after the last run had ended put that run's "start from" back, so the next Start quietly
    fine-tuned from the checkpoint the old run began from instead of starting fresh. While the run is queued or
    training the form shows what it began from; once it has ended the pickers say "(from scratch)" (the acoustic
    one and the vocoder's), and the rest of the form (size, steps) still comes back."""
    from webui.context import AppContext

    def checkpoint(run: str, kind: str) -> str:  # a checkpoint an earlier run saved, offered by the pickers
        folder = ws.run_dir(run) / "checkpoints" / "step-100"
        folder.mkdir(parents=True)
        atomic_write_json(folder / "config.json", {"kind": "vocos"} if kind == "vocoder" else {"model": {}})
        (folder / "model.safetensors").write_bytes(b"")
        return str(folder)

    fake_run(ws, "earlier", state="finished", created=time.time() - 60)
    acoustic, vocoder = checkpoint("earlier", "acoustic"), checkpoint("earlier-vocoder", "vocoder")
    fake_run(ws, "last", state="running")
    atomic_write_json(ws.run_dir("last") / "config.json", {"train": {"dataset": "am", "preset": "tiny",
                                                                     "max_steps": 1000, "init": acoustic}})
    fake_run(ws, "last-vocoder", state="queued")
    atomic_write_json(ws.run_dir("last-vocoder") / "config.json", {"kind": "vocoder", "train": {
        "dataset": "am", "preset": "mel-24khz", "max_steps": 500, "init": vocoder}})
    START_FROM, VOCODER_START_FROM = 3, 9
    live = training.restore_form(AppContext(ws))
    assert live[START_FROM]["value"] == "runs/earlier/checkpoints/step-100"
    assert live[VOCODER_START_FROM]["value"] == "runs/earlier-vocoder/checkpoints/step-100"

    for run, state in (("last", "finished"), ("last-vocoder", "stopped")):
        jobs.update_status(ws.run_dir(run), state=state)
    ended = training.restore_form(AppContext(ws))
    assert ended[START_FROM]["value"] == training.SCRATCH
    assert ended[VOCODER_START_FROM]["value"] == training.VOCODER_SCRATCH[0]
    assert ended[1]["value"] == "tiny" and ended[2]["value"] == 1000 and ended[11]["value"] == 500  # size, steps
    # steps saved on the Optimizations tab since the last run began are the newer choice: a reload keeps them
    settings.save_settings(ws, {"max_steps": 88})
    assert training.restore_form(AppContext(ws))[2]["value"] == 88
    jobs.update_status(ws.run_dir("last"), created=time.time() + 5)  # a run begun after the save: its steps
    assert training.restore_form(AppContext(ws))[2]["value"] == 1000


def test_a_page_opened_on_a_dataset_shows_the_engine_advice_for_it(tmp_path):
    """The advice (which engine for this much speech on this machine) came from the dataset picker's `change`, which
    does not fire when the page opens on the dataset it was built with: it stayed hidden until another was picked."""
    from webui.context import AppContext

    empty = training.restore_page(AppContext(Workspace.open(tmp_path / "empty")))
    assert empty[-2:] == ({"__type__": "update", "visible": False},) * 2  # no dataset, no advice
    ws = make_dataset(tmp_path / "ws", name="am", n_train=3, n_val=1, max_chars=30)
    opened = training.restore_page(AppContext(ws))
    assert opened[0]["value"] == "am" and opened[:-2] == training.restore_form(AppContext(ws))
    advice = opened[-2]["value"]
    assert opened[-2]["visible"] and advice.startswith("Which engine: ") and " in am;" in advice
    assert opened[-1]["visible"] and "- Time: about" in opened[-1]["value"]  # Matcha's, what to expect of a run


def test_the_lines_about_the_dataset_are_current_each_time_the_tab_opens(tmp_path):
    """Clips added on the Dataset tab left "Which engine" saying the seconds of speech and held-out clips the dataset
    had when the page opened: the tab's refresh on opening brought the picker and the steps up to date, not them."""
    import gradio as gr

    from utils.datasets import load_manifest, save_manifest
    from webui.context import AppContext

    ws = make_dataset(tmp_path / "ws", name="am", n_train=3, n_val=1, max_chars=30)
    with gr.Blocks():
        hooks = training.build(AppContext(ws))
    opened = [(fn, inputs, outputs) for fn, inputs, outputs, *when in hooks if when == ["open"]]
    advice = next(h for h in opened if any(getattr(o, "elem_id", "") == "engine-advice" for o in h[2]))
    fn, inputs, outputs = advice

    def lines_on_opening() -> dict:
        said = dict(zip((getattr(o, "elem_id", None) for o in outputs), fn(*(i.value for i in inputs))))
        return {k: said[k]["value"] for k in ("engine-advice", "run-guidance")}

    before = lines_on_opening()
    rows = load_manifest(ws, "am")  # the curator adds recordings on the Dataset tab, then opens this tab again
    save_manifest(ws, "am", rows + [{**r, "id": f"{r['id']}-again", "split": "val"} for r in rows])
    after = lines_on_opening()
    assert after == {k: training.engine_advice(AppContext(ws), "am")["value"] if k == "engine-advice" else
                     training.expectations(AppContext(ws), "matcha", "am", settings.default_steps(ws), "",
                                           settings.recommended_preset())["value"] for k in after}
    assert after["engine-advice"] != before["engine-advice"]


def test_a_stopped_run_says_its_cause_once_and_the_right_one():
    """A run stopped with Ctrl+C read "Stopped because Stop was pressed, after saving a checkpoint... (stopped by
    request (Ctrl+C in the terminal) at step 50)": two causes, the first wrong."""
    from utils.runs.views import plain_message
    from utils.training.loop import SIGNAL_WORDS

    ctrl_c = plain_message(f"stopped by request ({SIGNAL_WORDS[signal.SIGINT]}) at step 50")
    assert ctrl_c == ("Stopped by Ctrl+C in the terminal, at step 50, after saving a checkpoint: Resume continues "
                      "from it.")
    button = plain_message("stopped by request (the Stop button) at step 7")
    assert button.startswith("Stopped because Stop was pressed, at step 7") and button.count("Stop") == 2
    assert plain_message("non-finite loss at step 3") == "non-finite loss at step 3"


def test_the_stop_buttons_signal_is_said_as_the_stop_button(tmp_path):
    """Stop writes runs/RUN/STOP, then sends SIGTERM: the signal came in the middle of a step, before the trainer read
    the file, and a run stopped with the button read "Stopped by a stop signal: Stop pressed, or the process asked to
    end". A SIGTERM with no STOP file (the machine shutting down) keeps its own words."""
    from utils.training.loop import SIGNAL_WORDS, StopRequest

    for pressed, said in (("the Stop button", "the Stop button"), ("", SIGNAL_WORDS[signal.SIGTERM]),
                          ("python app.py stop", "python app.py stop")):  # the command line's stop was "the button"
        request = StopRequest(tmp_path)
        try:
            if pressed:
                (tmp_path / "STOP").write_text(f"{pressed}\n")
            os.kill(os.getpid(), signal.SIGTERM)
            assert request() and request.reason == said
        finally:
            request.restore()
            (tmp_path / "STOP").unlink(missing_ok=True)


def test_matcha_says_how_long_its_run_takes_here_as_the_other_engines_do(tmp_path, monkeypatch):
    """With Matcha picked (the one engine that runs on this CPU) F5, MMS and OmniVoice each said how long their run
    would take, and Matcha nothing; a Matcha run of this workspace at that size gives its measured speed."""
    from utils import hardware
    from utils.matcha.expectations import CPU_FRAMES_PER_S
    from webui.context import AppContext

    ws = make_dataset(tmp_path / "ws", name="am", n_train=1, n_val=1, max_chars=30)
    cpu = hardware.HardwareReport(gpus=[], cpu_count=2, ram_gb=8.0, disk_free_gb=50.0)
    monkeypatch.setattr(hardware, "detect", lambda *a, **k: cpu)
    said = training.expectations(AppContext(ws), "matcha", "am", 2000, "", "tiny")
    budget = hardware.recommend(cpu)["max_frames_per_batch"].value
    frames = budget * speed.batch_fill(ws, "am", budget)  # a step learns from its clips' frames, not the budget
    seconds = 2000 * frames / CPU_FRAMES_PER_S["tiny"]
    assert said["visible"]
    assert f"Time: about {speed.say_time(seconds)} for 2,000 steps of the tiny model" in said["value"]
    assert "measured on a quiet 2-core CPU" in said["value"]
    assert "of the base model" in training.expectations(AppContext(ws), "matcha", "am", 2000, "", "base")["value"]

    run = ws.run_dir("earlier")
    atomic_write_json(run / "config.json", {"train": {"engine": "matcha", "preset": "tiny", "init": ""},
                                            "resolved": {"device": "cpu"}})
    # its first window holds its start, its last a busy minute: the median of the rest counts
    for step, fps in ((10, 300.0), (20, 1000.0), (30, 1200.0), (40, 1000.0), (50, 90.0)):
        append_jsonl(run / "metrics.jsonl", {"step": step, "frames_per_s": fps})
    said = training.expectations(AppContext(ws), "matcha", "am", 2000, "", "tiny")["value"]
    assert f"Time: about {speed.say_time(2000 * frames / 1000.0)}" in said and "measured by run earlier" in said
    # a newer run stopped after one window (its start) no longer speaks for the machine alone: windows are pooled
    short = ws.run_dir("stopped-early")
    atomic_write_json(short / "config.json", {"train": {"engine": "matcha", "preset": "tiny", "init": ""},
                                              "resolved": {"device": "cpu"}})
    append_jsonl(short / "metrics.jsonl", {"step": 10, "frames_per_s": 150.0})
    os.utime(short / "metrics.jsonl", (time.time() + 3, time.time() + 3))
    said = training.expectations(AppContext(ws), "matcha", "am", 2000, "", "tiny")["value"]
    assert f"Time: about {speed.say_time(2000 * frames / 1000.0)}" in said
    assert "measured by run stopped-early and run earlier on this kind of machine" in said
    # the Dataset tab's transcript check trains the aligner alone (no decoder: ~9x the frames a second of a voice's
    # step): its speed said a tiny voice's run would take a ninth of its time
    check = ws.run_dir("am-transcript-check")
    atomic_write_json(check / "config.json", {"train": {"engine": "matcha", "preset": "tiny", "init": "",
                                                        "dataset": "am", "options": {"parts": "aligner"}},
                                              "resolved": {"device": "cpu"}})
    append_jsonl(check / "metrics.jsonl", {"step": 10, "frames_per_s": 9000.0})
    append_jsonl(check / "metrics.jsonl", {"step": 20, "frames_per_s": 9000.0})
    os.utime(check / "metrics.jsonl", (time.time() + 5, time.time() + 5))  # the newest
    said = training.expectations(AppContext(ws), "matcha", "am", 2000, "", "tiny")["value"]
    assert f"Time: about {speed.say_time(2000 * frames / 1000.0)}" in said and "transcript check" not in said
    assert "measured by run stopped-early and run earlier on this kind of machine" in said


def test_a_curators_edit_drops_the_refreshes_it_makes_stale_but_never_a_plain_page_load(tmp_path):
    """An edit cancels a tab's refresh on opening, the Training tab's restore of the last form and the G2P tab's
    reading of its example, answered late over the edit (the browser tests see it); a plain page load must land: the
    Optimizations tab's settings filled from the saved file, dropped, would leave the values the page was built with,
    and Save writes every box."""
    from webui.app import build_ui
    from webui.context import AppContext

    demo = build_ui(AppContext(Workspace.open(tmp_path / "ws")))

    def labels(blocks) -> set:
        return {getattr(b, "label", None) for b in blocks}

    cancelled = {i for d in demo.fns.values() if d.fn is None for i in d.cancels}
    on = {kind: {i: d for i, d in demo.fns.items() if d.targets and d.targets[0][1] == kind}
          for kind in ("load", "select")}
    restores = [i for i, d in on["load"].items() if "engine" in labels(d.outputs)]
    settings_fill = [i for i, d in on["load"].items() if any("(patience)" in str(x) for x in labels(d.outputs))]
    # the G2P tab's reading of its example text: answered late, it was drawn over that of the text typed and read
    example = [i for i, d in on["load"].items()
               if any(getattr(b, "elem_id", None) == "g2p-warnings" for b in d.outputs)]
    assert len(restores) == 1 and len(settings_fill) == 1 and len(example) == 1
    assert set(on["load"]) & cancelled == {restores[0], example[0]}  # the restore and the example; the settings land
    refreshes = [d for i, d in on["select"].items() if i in cancelled]
    assert any("dataset" in labels(d.outputs) and "engine" in labels(d.inputs) for d in refreshes)  # Training's
    edits = [d for d in demo.fns.values() if d.fn is None and restores[0] in d.cancels]
    assert {"dataset", "engine", "steps"} <= labels(demo.blocks[d.targets[0][0]] for d in edits)


def test_before_start_a_dataset_with_no_usable_clip_is_said_to_be_refused(tmp_path):
    """With a dataset of no usable clip picked, the lines before Start gave a time for its steps and "quality is
    measured on 0 held-out clip(s)": that Start refuses it showed only once pressed."""
    from tests.helpers import espeak_amharic, sentences
    from utils.datasets import prepare
    from utils.events import run_to_end
    from webui.context import AppContext

    for i, text in enumerate(sentences(2)):  # recordings, no transcripts
        espeak_amharic(text, tmp_path / "up" / f"a{i}.wav")
    ws = Workspace.open(tmp_path / "ws")
    run_to_end(prepare(ws, "bare", tmp_path / "up", workers=1))
    said = training.expectations(AppContext(ws), "matcha", "bare", 2000, "", "tiny")
    assert said["visible"] and "**Start refuses bare: it has no usable clip** (no clip has text yet)" in said["value"]
    assert "Time:" not in said["value"]
    assert "held-out" not in training.engine_advice(AppContext(ws), "bare")["value"]  # no quality to measure yet


def test_an_unmeasured_gpu_is_estimated_at_the_speed_each_family_reached_on_one(tmp_path):
    """A card's speed was guessed at 35 % of its peak for every family: Matcha base then trained at 2.7 M frames a
    second on an H100 (a 20,000-step run said 5 min; measured there: 235,491 frames a second, about an hour), F5 at
    2.8x and OmniVoice at 3x what their steps reached on an H200 and an H100 (bench/RESULTS.md)."""
    from utils import hardware
    from utils.f5.expectations import training_speed as f5_speed
    from utils.matcha.expectations import training_speed as matcha_speed
    from utils.omnivoice.expectations import run_time as omnivoice_time
    from utils.workspace import Workspace

    ws = Workspace.open(tmp_path / "ws")  # no run here: nothing measured
    h100 = hardware.HardwareReport(gpus=[hardware.GPUInfo(0, "NVIDIA H100 80GB HBM3", 79.0, "9.0")], cpu_count=16,
                                   ram_gb=125.0, disk_free_gb=500.0)
    h200 = hardware.HardwareReport(gpus=[hardware.GPUInfo(0, "NVIDIA H200", 139.0, "9.0")], cpu_count=16,
                                   ram_gb=125.0, disk_free_gb=500.0)
    frames_a_second, said = matcha_speed(ws, "base", h100)
    assert frames_a_second == pytest.approx(235_491, rel=0.02) and "estimated for 1 x NVIDIA H100" in said
    assert f5_speed(ws, h200)[0] == pytest.approx(38_352 / 0.621, rel=0.02)
    line = omnivoice_time(ws, 1000, h100)  # 1,000 updates of the recipe's 8,192 positions at 0.269 s each
    assert f"about {speed.say_time(1000 * 0.269)} for 1,000 updates" in line, line
