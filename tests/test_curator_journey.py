"""The whole curator journey through the browser: recordings zip -> prepared dataset -> G2P check ->
tiny training run -> exported voice -> speech on the Inference tab. UI only, except the tiny CPU
training settings saved before the app starts (what the Optimizations tab would save)."""
from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.conftest import AppServer
from tests.helpers import espeak_amharic, sentences
from tests.test_jobs import TINY
from utils import jobs, runs
from utils.workspace import Workspace

pytestmark = pytest.mark.slow

N_CLIPS = 6
STEPS = 30


def make_ljspeech_zip(folder: Path, n: int = N_CLIPS) -> Path:
    """metadata.csv (id|text) + wavs/<id>.wav spoken by espeak-ng, zipped as a curator would send it."""
    texts = [s for s in sentences() if len(s) <= 25][:n]
    lines = []
    for i, text in enumerate(texts):
        rid = f"clip{i:02d}"
        espeak_amharic(text, folder / "corpus" / "wavs" / f"{rid}.wav", voice="am", rate=190)
        lines.append(f"{rid}|{text}")
    (folder / "corpus" / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    archive = folder / "my_recordings.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.write(folder / "corpus" / "metadata.csv", "metadata.csv")
        for wav in sorted((folder / "corpus" / "wavs").glob("*.wav")):
            z.write(wav, f"wavs/{wav.name}")
    return archive


@pytest.fixture
def journey(tmp_path):
    archive = make_ljspeech_zip(tmp_path)
    ws = Workspace.open(tmp_path / "workspace")
    runs.save_settings(ws, TINY)  # tiny CPU batches; a full-size model cannot train in a test
    server = AppServer(ws.root).wait_ready()
    server.ws, server.archive = ws, archive
    yield server
    for r in runs.run_table(ws):
        if r["status"] in jobs.ACTIVE:
            jobs.stop(ws, r["run"]), jobs.stop(ws, r["run"])
    server.stop()


def open_tab(page, name: str):
    page.get_by_role("tab", name=name, exact=True).click()
    return page.get_by_role("tabpanel").filter(visible=True).last


def choose(scope, page, label: str, option: str) -> None:
    scope.get_by_label(label, exact=True).click()
    page.get_by_role("option", name=option, exact=True).click()


def test_a_curator_goes_from_a_recordings_zip_to_hearing_the_trained_voice(journey, page):
    ws = journey.ws
    page.goto(journey.url)

    # 1. Dataset: upload the zip, name it, Prepare; the totals appear
    tab = open_tab(page, "Dataset")
    tab.locator("#dataset-upload input[type=file]").set_input_files(str(journey.archive))
    expect(tab.locator("#dataset-upload")).to_contain_text("my_recordings.zip")
    tab.locator("#dataset-prepare").click()  # forgot the name: told what to do, nothing is made
    expect(page.get_by_text("Type a name for the new dataset").first).to_be_visible()
    assert ws.list_datasets() == []
    tab.get_by_label("Dataset name", exact=True).fill("abebe")
    tab.locator("#dataset-prepare").click()
    summary = tab.locator("#dataset-summary")
    expect(summary).to_contain_text("abebe", timeout=180_000)
    expect(summary).to_contain_text(re.compile(rf"of {N_CLIPS} clips"))
    expect(summary).to_contain_text(re.compile(r"usable of [\d.]+ (h|min)"))
    expect(tab.locator("#dataset-log textarea")).to_have_value(re.compile(r"done"))
    assert (ws.dataset_dir("abebe") / "manifest.jsonl").is_file()
    assert len(list((ws.dataset_dir("abebe") / "audio").glob("*.wav"))) == N_CLIPS

    # 2. Amharic G2P: an Ethiopic year is read out as words, with its IPA
    tab = open_tab(page, "Amharic G2P")
    tab.locator("#g2p-input textarea").fill("በ፲፰፻፹፯ ዓ.ም")
    tab.locator("#g2p-run").click()
    # exact values: the tab shows its longer example's reading at load, this must be the typed text's
    expect(tab.locator("#g2p-normalized textarea")).to_have_value("በአስራ ስምንት መቶ ሰማንያ ሰባት አመተ ምህረት")
    expect(tab.locator("#g2p-ipa textarea")).to_have_value(
        re.compile(r"^b ə ʔ a s r a \| s ɨ mː ɨ n t \| m ə tː o \| s ə m a n j a \| s ə b a t \| .*m ɨ h ɨ r ə t$"))

    # 3. Training: tiny preset, a few steps, to the end; then export the run as a voice
    tab = open_tab(page, "Training")
    choose(tab, page, "dataset", "abebe")
    tab.get_by_label("tiny", exact=True).check()
    tab.get_by_label("run name", exact=True).fill("first")
    tab.get_by_label("steps", exact=True).fill(str(STEPS))
    tab.get_by_role("button", name="Start training").click()
    expect(tab.locator("#train-message")).to_contain_text("first")
    run_summary = tab.locator("#run-summary")
    expect(run_summary).to_contain_text("finished", timeout=240_000)
    expect(tab.locator("#train-log textarea")).to_have_value(re.compile(rf"finished {STEPS} steps"))
    expect(tab.locator("#run-list")).to_contain_text("finished")
    tab.locator("#voice-name textarea, #voice-name input").first.fill("abebe-voice")
    tab.get_by_role("button", name="Export as voice").click()
    expect(tab.locator("#train-message")).to_contain_text("abebe-voice", timeout=60_000)
    assert (ws.voice_dir("abebe-voice") / "model.safetensors").is_file()

    # 4. Inference: the new voice is offered, it speaks typed Amharic
    tab = open_tab(page, "Inference")
    choose(tab, page, "Voice or checkpoint", "abebe-voice (exported voice)")
    tab.locator("#inference-text textarea").fill("ሰላም ነው።")
    tab.locator("#inference-speak").click()
    expect(tab.locator("#inference-info")).to_contain_text(re.compile(r"s of audio"), timeout=120_000)
    expect(tab.locator("#inference-info")).to_contain_text("vocoder")
    # the player holds real audio (Gradio's waveform player loads it into an <audio> with a src)
    expect(tab.locator("#inference-audio audio[src]").first).to_have_attribute("src", re.compile(r"\S+"))
    player = tab.locator("#inference-audio audio[src]").first  # inside wavesurfer's shadow root
    size = player.evaluate("async a => (await (await fetch(a.src)).blob()).size")
    assert size > 8000  # a WAV with audio in it (> ~0.15 s of 24 kHz 16-bit), not an empty header
    expect(tab.locator("#inference-audio")).to_contain_text(re.compile(r"\d:\d\d"))
