"""The whole curator journey through the browser: recordings zip (one clip with music under it) ->
check report -> music removed from that clip -> a pronunciation fixed in the dictionary -> tiny
training run, stopped and resumed -> exported voice -> speech on the Inference tab, downloaded.
UI only, except the tiny CPU training settings saved before the app starts (what the Optimizations
tab saves; the full-size recommendation cannot train in a test)."""
from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.conftest import AppServer
from tests.helpers import espeak_amharic, sentences
from tests.test_jobs import TINY
from utils import jobs
from utils.runs import settings, views
from utils.audio import load_audio, save_audio
from utils.separation.evaluation import mix_at_snr, synth_music
from utils.separation.gate import CLEAR
from utils.workspace import Workspace
from utils.datasets import load_manifest

pytestmark = pytest.mark.slow

N_CLIPS = 6
STEPS = 40
FIXED_WORD, FIXED_IPA = "ሰላም", "s ə l a m a"  # the curator's reading, unlike the rules' "s ə l a m"


def make_ljspeech_zip(folder: Path, n: int = N_CLIPS) -> Path:
    """metadata.csv (id|text) + wavs/<id>.wav spoken by espeak-ng, zipped as a curator would send it."""
    texts = [s for s in sentences() if len(s) <= 25][:n]
    lines = []
    for i, text in enumerate(texts):
        rid = f"clip{i:02d}"
        wav = espeak_amharic(text, folder / "corpus" / "wavs" / f"{rid}.wav", voice="am", rate=190)
        if i == 0:  # a clip recorded over background music
            speech, sr = load_audio(wav)
            save_audio(wav, mix_at_snr(speech, synth_music(len(speech) / sr, sr, seed=3), 0.0)[0], sr)
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
    settings.save_settings(ws, TINY)  # tiny CPU batches; a full-size model cannot train in a test
    server = AppServer(ws.root).wait_ready()
    server.ws, server.archive = ws, archive
    yield server
    for r in views.run_table(ws):
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
    # by the cell's name: once uploaded, Gradio shows the name's stem and extension apart ("my_recordings .zip")
    expect(tab.locator("#dataset-upload").get_by_role("cell", name="my_recordings.zip")).to_be_visible()
    tab.locator("#dataset-prepare").click()  # forgot the name: told what to do, nothing is made
    expect(page.get_by_text("Type a name for the new dataset").first).to_be_visible()
    assert ws.list_datasets() == []
    tab.get_by_label("Dataset name", exact=True).fill("abebe")
    tab.locator("#dataset-prepare").click()
    summary = tab.locator("#dataset-summary")
    expect(summary).to_contain_text("abebe", timeout=180_000)
    expect(summary).to_contain_text(re.compile(rf"of {N_CLIPS} clips"))
    expect(summary).to_contain_text(re.compile(r"usable of [\d.]+ (h|min|s)"))  # utils.training.speed.say_hours
    expect(tab.locator("#dataset-log textarea")).to_have_value(re.compile(r"done"))
    assert "abebe" in ws.list_datasets()
    assert len(list((ws.dataset_dir("abebe") / "audio").glob("*.wav"))) == N_CLIPS

    # the check report: totals and the table of flagged rows are there
    expect(tab.locator("#dataset-flagged")).to_be_visible()

    # 2. Music removal: the detector finds the one clip with music and separates it; the curator accepts
    tab = open_tab(page, "Music removal")
    choose(tab, page, "Dataset", "abebe")
    tab.locator("#sep-run").click()
    log = page.locator("#sep-log textarea")
    expect(log).to_have_value(re.compile(rf"of {N_CLIPS} clips had music"), timeout=300_000)
    # the music clip is found; a short clean clip may also score just over the gate (a faint candidate)
    expect(log).to_have_value(re.compile(r"clip00 music: separated"))
    expect(log).to_have_value(re.compile(r"clip01 clean: passed through"))
    tab.locator("#sep-accept").click()  # nothing picked: only where music was clearly found
    # the run's own line speaks of clear music too: wait for Accept's
    expect(tab.locator("#sep-status")).to_contain_text("switched to their music-removed audio", timeout=60_000)
    rows = {r["id"]: r for r in load_manifest(ws, "abebe")}
    assert rows["clip00"]["audio"].startswith("separated/") and rows["clip01"]["audio"].startswith("audio/")
    assert all(r["music"]["score"] >= CLEAR for r in rows.values() if r["audio"].startswith("separated/"))

    # 3. Amharic G2P: an Ethiopic year is read out as words, with its IPA
    tab = open_tab(page, "Amharic G2P")
    tab.locator("#g2p-input textarea").fill("በ፲፰፻፹፯ ዓ.ም")
    tab.locator("#g2p-run").click()
    # exact values: the tab shows its longer example's reading at load, this must be the typed text's
    expect(tab.locator("#g2p-normalized textarea")).to_have_value("በአስራ ስምንት መቶ ሰማንያ ሰባት አመተ ምህረት")
    expect(tab.locator("#g2p-ipa textarea")).to_have_value(
        re.compile(r"^b ə ʔ a s r a \| s ɨ mː ɨ n t \| m ə tː o \| s ə m a n j a \| s ə b a t \| .*m ɨ h ɨ r ə t$"))

    # the curator fixes how a word is read: the dictionary is used by training and inference alike
    tab.locator("#g2p-dict-word textarea, #g2p-dict-word input").first.fill(FIXED_WORD)
    tab.locator("#g2p-dict-ipa textarea, #g2p-dict-ipa input").first.fill(FIXED_IPA)
    tab.locator("#g2p-dict-add").click()
    expect(tab.locator("#g2p-dict-status")).to_contain_text("saved", timeout=30_000)
    expect(tab.locator("#g2p-dict-table")).to_contain_text(FIXED_WORD)

    # 4. Training: tiny preset; stopped part way, resumed, run to the end; then exported as a voice
    tab = open_tab(page, "Training")
    choose(tab, page, "dataset", "abebe")
    tab.get_by_label("tiny", exact=True).check()
    tab.get_by_label("run name", exact=True).fill("first")
    tab.get_by_label("steps", exact=True).fill(str(STEPS))
    tab.get_by_role("button", name="Start training").click()
    expect(tab.locator("#train-message")).to_contain_text("first")
    run_summary = tab.locator("#run-summary")
    page.wait_for_function("() => { const s = document.querySelector('#run-summary'); "
                           "const m = s && s.innerText.match(/step (\\d+)/); return m && +m[1] >= 2; }", timeout=240_000)
    tab.locator("#stop-button").click()
    expect(run_summary).to_contain_text("first: stopped", timeout=120_000)
    stopped_at = int(re.search(r"step (\d+)", run_summary.inner_text()).group(1))
    assert 0 < stopped_at < STEPS
    tab.locator("#resume-button").click()
    expect(run_summary).to_contain_text("first: finished", timeout=240_000)
    expect(tab.locator("#train-log textarea")).to_have_value(re.compile(rf"training from step {stopped_at} to {STEPS}"))
    expect(tab.locator("#train-log textarea")).to_have_value(re.compile(rf"finished {STEPS} steps"))
    expect(tab.locator("#run-list")).to_contain_text("finished")
    tab.locator("#voice-name textarea, #voice-name input").first.fill("abebe-voice")
    tab.get_by_role("button", name="Export as voice").click()
    expect(tab.locator("#train-message")).to_contain_text("abebe-voice", timeout=60_000)
    assert (ws.voice_dir("abebe-voice") / "model.safetensors").is_file()

    # 5. Inference: the new voice is offered, it speaks typed Amharic with the fixed pronunciation
    tab = open_tab(page, "Inference")
    choose(tab, page, "Voice or checkpoint", "abebe-voice (exported voice)")
    tab.locator("#inference-text textarea").fill(f"{FIXED_WORD} ነው።")
    tab.locator("#inference-speak").click()
    expect(tab.locator("#inference-info")).to_contain_text(re.compile(r"s of audio"), timeout=120_000)
    expect(tab.locator("#inference-info")).to_contain_text("vocoder")
    # what was spoken shows the curator's reading of the word
    expect(tab.locator("#inference-rows")).to_contain_text(FIXED_IPA)
    # the streamed player plays it; the WAV downloads (a real WAV with audio, not an empty header)
    page.wait_for_function("() => Array.from(document.querySelectorAll('#inference-audio audio'))"
                           ".some(a => a.duration > 0)", timeout=60_000)
    link = tab.locator("#inference-wav a").first
    expect(link).to_have_attribute("href", re.compile(r"speech-.*\.wav"), timeout=60_000)
    with page.expect_download() as download:
        link.click()
    saved = Path(download.value.path())
    assert saved.read_bytes()[:4] == b"RIFF" and saved.stat().st_size > 8000
    wave, sr = load_audio(saved)
    assert sr == 24000 and len(wave) / sr > 0.15
