"""The Inference tab in a real browser: speak (streamed), see what was spoken, compare, export; the voice picker's
choices current when the tab opens and following the run that trains until a voice is picked."""
from __future__ import annotations

import os
import re
import shutil

import pytest
from playwright.sync_api import expect

from tests.conftest import serve
from tests.helpers import CKPT, LIVE, live_checkpoint, make_dataset, screenshot, voice_workspace
from utils import inference
from utils.training import TrainConfig, prepare_run, run

# the player of the whole speech (its <audio> sits in the waveform's shadow root) once it has loaded, else null
WHOLE_JS = """() => { const found = [];
  const walk = (root) => { root.querySelectorAll('audio').forEach(a => found.push(a));
                           root.querySelectorAll('*').forEach(e => e.shadowRoot && walk(e.shadowRoot)); };
  const box = document.querySelector('#inference-whole');
  if (box) walk(box);
  const a = found.find(a => a.duration > 0);
  return a ? {duration: a.duration, paused: a.paused, at: a.currentTime} : null; }"""
F5_RUN = "tigist-f5"  # unevaluated and dated before the Matcha run r1 (see `server`): r1 stays the picker's default


def add_f5_voice(ws) -> None:
    """A tiny F5 trained for one step on espeak-ng Amharic: a real F5 checkpoint for the voice picker."""
    make_dataset(ws.root, n_train=2, n_val=1, max_chars=30)
    run(prepare_run(TrainConfig(workspace=str(ws.root), dataset="am", run=F5_RUN, engine="f5", preset="tiny",
                                max_steps=1, warmup_steps=1, eval_every=0, checkpoint_every=1, grad_accumulation=1,
                                max_frames_per_batch=600, eval_vocoder="griffin-lim", evaluate=False)))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    ws = voice_workspace(tmp_path_factory.mktemp("inference") / "workspace")
    add_f5_voice(ws)
    ended = os.stat(ws.root / CKPT).st_mtime - 60  # the F5 run ended before r1's checkpoint was written, so the
    os.utime(ws.run_dir(F5_RUN) / "status.json", (ended, ended))  # picker starts on r1 (the newest run's best)
    s = serve(ws)
    yield s
    s.stop()


def test_speak_see_the_phonemes_compare_and_export(server, page, tmp_path):
    page.goto(server.url)
    page.get_by_role("tab", name="Inference").click()
    expect(page.get_by_label("Voice or checkpoint")).to_have_value(re.compile("r1 · step 10"))
    # nothing spoken yet: the download slots read as empty slots to download from, not as boxes to upload into
    wav = page.locator("#inference-wav")
    expect(wav).to_contain_text("Download WAV (after Speak)")
    for slot in ("#inference-wav", "#inference-batch-zip", "#inference-export-zip"):
        assert page.locator(f"{slot} input[type=file]").count() == 0, slot
    assert "Upload" not in wav.inner_text() and "Drop File" not in wav.inner_text()
    screenshot(wav, tmp_path, "download-wav-before-speak")
    page.locator("#inference-text textarea").fill("ሰላም ነው። ዋጋው 25 ብር ነው?")
    page.locator("#inference-speak").click()
    info = page.locator("#inference-info")
    expect(info).to_contain_text("real-time factor", timeout=60_000)
    expect(info).to_contain_text("2 sentence(s)")
    rows = page.locator("#inference-rows")
    expect(rows).to_contain_text("ሰላም ነው።")
    expect(rows).to_contain_text("ሃያ")  # 25 read out in Amharic in the normalized column
    # one line of header over the rows, and every column inside the table's width (the phonemes not cut off)
    layout = page.evaluate("""() => { const t = document.querySelector('#inference-rows');
        const heads = [...t.querySelectorAll('th')].map(h => h.getBoundingClientRect().height);
        const row = Math.min(...[...t.querySelectorAll('tbody tr')].map(r => r.getBoundingClientRect().height)
                                .filter(h => h > 0));  // a one-line row (Gradio keeps a hidden one too)
        const right = Math.max(...[...t.querySelectorAll('th')].map(h => h.getBoundingClientRect().right));
        return {head: Math.max(...heads), row, right, edge: t.getBoundingClientRect().right}; }""")
    assert layout["head"] <= 1.5 * layout["row"] and layout["right"] <= layout["edge"] + 1, layout
    screenshot(rows, tmp_path, "spoken-rows")
    expect(page.locator("#inference-spectrogram img")).to_be_visible()
    expect(page.locator("#inference-wav a").first).to_have_attribute("href", re.compile(r"speech-.*\.wav"))
    # the streamed player held what its playlist had fetched when speaking ended (0:05 of 10.77 s): once the stream
    # has played, the whole WAV takes its place, as long as the speech and not playing it a second time
    spoken = float(re.search(r"([\d.]+) s of audio", info.inner_text()).group(1))
    page.wait_for_function(f"() => ({WHOLE_JS})() !== null", timeout=60_000)
    whole = page.evaluate(WHOLE_JS)
    assert abs(whole["duration"] - spoken) <= 0.3 and whole["paused"], (whole, spoken)
    expect(page.locator("#inference-audio")).to_be_hidden()

    page.locator("#inference-text textarea").fill("hello world")
    page.locator("#inference-speak").click()
    expect(page.get_by_text(re.compile("no Amharic \\(Ethiopic\\) letters")).first).to_be_visible(timeout=30_000)
    expect(info).to_contain_text("Not done: The text has no Amharic")  # kept under the player, not only a toast
    # no player is left on 'pause 0:00 / 0:00' as if a stream were coming, nor the last text's speech
    expect(page.locator("#inference-audio")).to_be_hidden()
    expect(page.locator("#inference-whole")).to_be_hidden()

    page.locator("#inference-text textarea").fill("ሰላም ነው።")
    page.get_by_text("A/B: the same text from two voices or checkpoints").click()
    page.locator("#inference-compare").click()
    for side in ("a", "b"):
        # Gradio's waveform player loads the WAV into an <audio> inside wavesurfer's shadow root
        expect(page.locator(f"#inference-audio-{side} audio[src]").first).to_have_attribute(
            "src", re.compile(r"\S+"), timeout=60_000)

    page.get_by_text("Export a voice (folder + zip, optional ONNX)").click()
    page.locator("#inference-export-name textarea, #inference-export-name input").first.fill("browser-voice")
    page.locator("#inference-export").click()
    expect(page.locator("#inference-export-msg")).to_contain_text("voices/browser-voice", timeout=60_000)
    expect(page.locator("#inference-export-msg")).to_contain_text("Voice.load")
    assert (server.ws.voices / "browser-voice" / "model.safetensors").exists()

    # a voice zip from another studio (the one just exported, under another name) is imported and picked
    import zipfile

    made = tmp_path / "from-elsewhere.zip"
    with zipfile.ZipFile(made, "w") as zf:
        for f in sorted((server.ws.voices / "browser-voice").rglob("*")):
            if f.is_file():
                zf.write(f, f"elsewhere-voice/{f.relative_to(server.ws.voices / 'browser-voice')}")
    page.get_by_text("Import a voice (a zip from Export voice").click()
    page.locator("#inference-import-zip input[type=file]").set_input_files(str(made))
    expect(page.locator("#inference-import-msg")).to_contain_text("Imported voice elsewhere-voice", timeout=60_000)
    expect(page.get_by_label("Voice or checkpoint")).to_have_value("elsewhere-voice (exported voice)")


def test_an_f5_voice_gets_f5s_own_steps_and_no_temperature_slider(server, page, tmp_path):
    page.goto(server.url)
    page.get_by_role("tab", name="Inference").click()
    steps = page.locator("#inference-steps input[type='number']")
    temperature = page.locator("#inference-temperature")
    expect(steps).to_have_value("10")  # the Matcha voice first: Matcha's steps, and its temperature
    expect(page.locator("#inference-steps")).to_contain_text("4-10 is usual")
    expect(temperature).to_be_visible()

    page.get_by_label("Voice or checkpoint").click()
    page.get_by_role("option", name=re.compile(f"^{F5_RUN} · step 1")).click()
    expect(steps).to_have_value("32", timeout=30_000)
    expect(page.locator("#inference-steps")).to_contain_text("32 is F5-TTS's own default")
    expect(page.locator("#inference-steps")).not_to_contain_text("4-10 is usual")
    expect(temperature).to_be_hidden()  # F5 ignores it
    page.locator("#inference-text textarea").fill("ሰላም ነው።")
    page.locator("#inference-speak").click()
    expect(page.locator("#inference-info")).to_contain_text("real-time factor", timeout=120_000)
    screenshot(page, tmp_path, "inference-f5")

    page.get_by_label("Voice or checkpoint").click()
    page.get_by_role("option", name=re.compile("^r1 · step 10")).click()
    expect(steps).to_have_value("10", timeout=30_000)
    expect(temperature).to_be_visible()


def test_the_line_under_the_pickers_follows_the_vocoder_picked(server, page):
    """A trained vocoder picked: the line went on saying Griffin-Lim makes the sound while Speak used the vocoder."""
    from tests.helpers import VOC

    page.goto(server.url)
    page.get_by_role("tab", name="Inference").click()
    status = page.locator("#vocoder-status")
    expect(status).to_contain_text("buzzy because Griffin-Lim")  # auto, and no default vocoder in this workspace
    page.get_by_label("Vocoder").click()
    page.get_by_role("option", name=f"{VOC} (trained here)").click()
    expect(status).to_contain_text(f"{VOC} (trained here)", timeout=30_000)
    expect(status).not_to_contain_text("buzzy")
    page.get_by_label("Voice or checkpoint").click()
    page.get_by_role("option", name=re.compile(f"^{F5_RUN} · step 1")).click()  # another voice: the pick stays said
    expect(page.get_by_label("Voice or checkpoint")).to_have_value(re.compile(F5_RUN))
    expect(status).to_contain_text(f"{VOC} (trained here)")


def test_a_voice_exported_elsewhere_is_offered_when_the_inference_tab_opens(server, page, tmp_path):
    ws = server.ws
    page.goto(server.url)
    page.get_by_role("tab", name="Inference").click()
    expect(page.get_by_label("Voice or checkpoint")).not_to_have_value("")  # the tab has its list
    page.get_by_role("tab", name="Training").click()
    try:
        inference.export_voice(ws, CKPT, "fresh-voice")  # what the Training tab's Export does
        page.get_by_role("tab", name="Inference").click()
        page.get_by_label("Voice or checkpoint").click()
        expect(page.get_by_role("option", name="fresh-voice (exported voice)")).to_be_visible(timeout=30_000)
        screenshot(page.locator("#inference-voice"), tmp_path, "inference-voice-list")
    finally:  # the module's other tests start on r1, not on a newer exported voice
        shutil.rmtree(ws.voice_dir("fresh-voice"))
        (ws.root / "exports" / "fresh-voice.zip").unlink()
    # it came from opening the tab: the tab's select event refreshes the voice list
    wired = page.evaluate("""() => {
        const c = window.gradio_config, voice = c.components.find(x => x.props.elem_id === 'inference-voice');
        const tab = c.components.find(x => x.type === 'tabitem' && x.props.label === 'Inference');
        return c.dependencies.some(d => d.targets.some(t => t[0] === tab.id && t[1] === 'select')
                                        && d.outputs.includes(voice.id));
    }""")
    assert wired


@pytest.fixture
def live_run(server):
    """Run `live` training now, its checkpoint at step 2 (this test process stands in for its trainer); gone after
    the test, so that the module's other tests start on r1."""
    live_checkpoint(server.ws, 2)
    yield server.ws.run_dir(LIVE)
    shutil.rmtree(server.ws.run_dir(LIVE))


def test_the_voice_picker_follows_the_run_in_training_until_a_voice_is_picked(server, live_run, page, tmp_path):
    picker = page.get_by_label("Voice or checkpoint")
    page.goto(server.url + "/#inference")
    expect(page.get_by_role("tab", name="Inference")).to_have_attribute("aria-selected", "true", timeout=30_000)
    expect(picker).to_have_value(f"{LIVE} · step 2", timeout=30_000)  # the run training now, not r1
    live_checkpoint(server.ws, 4, best=True)  # the run saves a better checkpoint
    expect(picker).to_have_value(re.compile(f"^{LIVE} · step 4 · best"), timeout=30_000)
    screenshot(page.locator("#inference-voice"), tmp_path, "picker-follows-the-run")
    picker.click()
    page.get_by_role("option", name=f"{LIVE} · step 2").click()  # the curator picks one
    live_checkpoint(server.ws, 6, best=True)
    picker.click()
    expect(page.get_by_role("option", name=re.compile(f"^{LIVE} · step 6"))).to_be_visible(timeout=30_000)
    page.keyboard.press("Escape")
    expect(picker).to_have_value(f"{LIVE} · step 2")  # the list grew; the pick stayed


def test_ab_speaks_its_own_text_which_starts_as_the_main_text(server, page, tmp_path):
    page.goto(server.url + "/#inference")
    main, ab = page.locator("#inference-text textarea"), page.locator("#inference-ab-text textarea")
    page.get_by_text("A/B: the same text from two voices or checkpoints").click()
    expect(ab).to_have_value(main.input_value())
    main.fill("ሰላም ነው። ዛሬ ጥሩ ቀን ነው።")
    expect(ab).to_have_value("ሰላም ነው። ዛሬ ጥሩ ቀን ነው።")  # follows the main text until edited
    ab.fill("ሰላም ነው።")
    main.fill("ሌላ ጽሑፍ ነው። ዛሬ ጥሩ ቀን ነው።")
    main.blur()
    page.wait_for_timeout(1000)
    expect(ab).to_have_value("ሰላም ነው።")  # edited here: the main text no longer writes over it
    page.locator("#inference-compare").click()
    for side in ("a", "b"):
        expect(page.locator(f"#inference-audio-{side} audio[src]").first).to_have_attribute(
            "src", re.compile(r"\S+"), timeout=60_000)
    expect(page.get_by_text(re.compile(r"1 sentence\(s\)")).first).to_be_visible()  # A/B spoke its own one sentence
    screenshot(page, tmp_path, "ab-own-text")


def test_the_voice_spoken_with_stays_picked_and_the_export_picker_starts_on_it(server, live_run, page, tmp_path):
    live_checkpoint(server.ws, 2, best=True)  # step 2 is the run's best so far
    picker = page.get_by_label("Voice or checkpoint", exact=True)
    page.goto(server.url)
    page.get_by_role("tab", name="Inference", exact=True).click()
    expect(picker).to_have_value(re.compile(f"^{LIVE} · step 2"))
    page.get_by_text("Export a voice (folder + zip, optional ONNX)").click()
    expect(page.get_by_label("Checkpoint or voice", exact=True)).to_have_value(picker.input_value())
    page.locator("#inference-text textarea").fill("ሰላም ነው።")
    page.locator("#inference-speak").click()
    expect(page.locator("#inference-info")).to_contain_text("real-time factor", timeout=60_000)
    live_checkpoint(server.ws, 4, best=True)  # the run saves a better checkpoint while step 2's speech is shown
    page.get_by_text("A/B: the same text from two voices or checkpoints").click()
    page.locator("#inference-ab-a input").click()  # another picker's list says when the page has heard of it
    expect(page.get_by_role("option", name=re.compile(f"^{LIVE} · step 4"))).to_be_visible(timeout=30_000)
    page.keyboard.press("Escape")
    expect(picker).to_have_value(re.compile(f"^{LIVE} · step 2"))  # the list grew; the voice heard stayed
    screenshot(page.locator("#inference-voice"), tmp_path, "spoken-voice-stays")
