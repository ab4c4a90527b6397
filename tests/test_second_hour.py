"""A curator's second hour (issue 35), the services and the command line: a one-speaker voice to ONNX, the F5 base
refused where it cannot run, no dataset without clips and deleting one, offline downloads said plainly, Amharic
names, the transcript check's own run kept out of the lists, the Inference picker's default, toasts without
Markdown marks. One tiny one-speaker Matcha run and a tiny F5 run, trained here, serve all of them."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers import make_dataset, serve_tab
from utils.datasets import load_manifest, save_manifest
from utils.events import StudioError
from utils.training import TrainConfig, prepare_run, run
from utils.workspace import Workspace, read_json

ROOT = Path(__file__).resolve().parent.parent
RAW_CLASS_NAMES = ("LocalEntryNotFoundError", "ConnectError", "OfflineModeIsEnabled", "HfHubHTTPError", "OSError",
                   "Exception", "Traceback")


def app(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "app.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=env)


def tiny_config(ws: Workspace, name: str, **kw) -> TrainConfig:
    base = dict(workspace=str(ws.root), dataset="am", run=name, preset="tiny", max_steps=2, lr=2e-3, warmup_steps=1,
                log_every=1, eval_every=0, checkpoint_every=1, mcd="logmel", eval_clips=1, sample_clips=0, ode_steps=2,
                ema_decay=0.0, max_frames_per_batch=600, grad_accumulation=1, eval_vocoder="griffin-lim")
    return TrainConfig.from_dict({**base, **kw})  # a family's own settings by name too


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Workspace:
    """One speaker (espeak-ng "am"), a tiny Matcha run `one` (checkpoints at steps 1 and 2) and a tiny F5 run `f5`."""
    torch.set_num_threads(1)
    ws = make_dataset(tmp_path_factory.mktemp("second") / "ws", n_train=4, n_val=1, voices=("am",), max_chars=30)
    assert run(prepare_run(tiny_config(ws, "one")))["state"] == "finished"
    assert run(prepare_run(tiny_config(ws, "f5", engine="f5", max_steps=1)))["state"] == "finished"
    return ws


def fake_report(memory_gb: float):
    """What utils.hardware.detect says of a machine with one GPU of that size (CPU tests of the GPU case)."""
    from utils.hardware import GPUInfo, HardwareReport

    return HardwareReport(gpus=[GPUInfo(0, "NVIDIA L4", memory_gb, "8.9")], cpu_count=8, ram_gb=32, disk_free_gb=100)


def said_plainly(message: str) -> None:
    assert not any(name in message for name in RAW_CLASS_NAMES), message
    assert "HF_HUB_OFFLINE" not in message and "$AMHARIC" not in message, message


# ------------------------------------------------------------------------------------------- 1. ONNX
def test_a_one_speaker_voice_exports_to_onnx_from_the_cli_and_speaks_through_onnx_runtime(ws):
    import onnxruntime as ort

    from utils.inference.onnx_voice import OnnxVoice

    assert read_json(ws.run_dir("one") / "checkpoints" / "step-2" / "config.json")["speakers"] == ["am"]
    proc = app("export-voice", "one", "solo", "--onnx", "--onnx-steps", "2", "--vocoder", "griffin-lim",
               "--workspace", str(ws.root))
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = ws.voice_dir("solo")
    session = ort.InferenceSession(str(folder / "acoustic.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["tokens", "temperature", "length_scale"]  # no speaker table
    wave, sr = OnnxVoice(folder).synthesize("ሰላም ነው። ዛሬ ጥሩ ቀን ነው።")
    assert sr == 24000 and len(wave) > 0.1 * sr and np.isfinite(wave).all()
    assert "speaker=" not in (folder / "README.md").read_text(encoding="utf-8")  # the snippet passes none


# --------------------------------------------------------------------------------------- 2. F5 base
def test_the_f5_request_check_takes_the_machine_a_gpu_passes_this_cpu_is_refused(ws):
    from utils import hardware
    from utils.f5 import check_request

    cfg = tiny_config(ws, "f5-base", engine="f5", preset="base", init="SWivid/F5-TTS")
    check_request(cfg, fake_report(22.0))  # an L4: allowed
    with pytest.raises(StudioError, match="16 GiB GPU or larger"):
        check_request(cfg, fake_report(8.0))
    with pytest.raises(StudioError, match="This machine cannot fine-tune the F5-TTS base: no GPU.*Matcha.*choose the "
                                          "model size tiny and no base.*--preset tiny, without --init"):
        check_request(cfg, hardware.detect(ws.root))
    check_request(tiny_config(ws, "f5-tiny", engine="f5"), hardware.detect(ws.root))  # the smoke test stays
    big = ws.root / "pretrained" / "big-base"  # the full-size base in a folder: its header says 400 M parameters
    big.mkdir(parents=True)
    header = json.dumps({"w": {"dtype": "F32", "shape": [20000, 20000], "data_offsets": [0, 0]}}).encode()
    (big / "model_1250000.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    (big / "vocab.txt").write_text("a\n", encoding="utf-8")
    with pytest.raises(StudioError, match="cannot fine-tune the F5-TTS base"):
        check_request(tiny_config(ws, "f5-folder", engine="f5", init=str(big)), hardware.detect(ws.root))


def test_the_f5_base_is_refused_here_before_any_run_folder_queue_entry_or_download(ws):
    from utils import jobs
    from utils.runs import control

    before = sorted(p.name for p in ws.runs.iterdir())
    with pytest.raises(StudioError, match="This machine cannot fine-tune the F5-TTS base"):
        control.start_training(ws, "am", "base", "f5-queued", engine="f5", accept_licence=True)
    proc = app("train", "--engine", "f5", "--dataset", "am", "--init", "SWivid/F5-TTS", "--accept-licence",
               "--run", "f5-cli", "--background", "--workspace", str(ws.root))
    assert proc.returncode == 2 and "This machine cannot fine-tune the F5-TTS base: no GPU" in proc.stderr
    assert "--preset tiny, without --init" in proc.stderr
    assert sorted(p.name for p in ws.runs.iterdir()) == before
    assert not [r for r in jobs.list_runs(ws) if r["name"].startswith("f5-") and r["name"] != "f5"]
    assert not (ws.root / "pretrained" / "f5tts-v1-base").exists()


# ------------------------------------------------------------------------------------ 6. datasets
def test_an_upload_that_makes_no_clip_leaves_no_dataset_and_says_what_was_given_and_what_is_needed(ws, tmp_path):
    from utils.datasets import prepare

    notes = tmp_path / "notes.txt"
    notes.write_text("ሰላም ነው።\n", encoding="utf-8")
    stamp = notes.stat().st_mtime_ns
    with pytest.raises(StudioError, match=r"No clip could be made from notes\.txt, so no dataset was made: a dataset "
                                          r"needs speech recordings with their transcripts.*transcript with no audio"):
        list(prepare(ws, "notes", [notes]))
    proc = app("prepare", str(notes), "--name", "notes-cli", "--workspace", str(ws.root))
    assert proc.returncode == 2 and "No clip could be made from notes.txt" in proc.stderr
    assert not ws.dataset_dir("notes").exists() and not ws.dataset_dir("notes-cli").exists()
    assert "notes" not in ws.list_datasets() and "notes-cli" not in ws.list_datasets()
    assert notes.read_text(encoding="utf-8") == "ሰላም ነው።\n" and notes.stat().st_mtime_ns == stamp


def test_start_refuses_a_dataset_with_no_usable_clip_before_any_run_is_made(ws):
    from utils.runs import control

    source = ws.dataset_dir("am")
    target = ws.dataset_dir("all-excluded")
    shutil.copytree(source, target)
    save_manifest(ws, "all-excluded", [{**r, "excluded": True} for r in load_manifest(ws, "am")])
    before = sorted(p.name for p in ws.runs.iterdir())
    for start in (lambda: control.start_training(ws, "all-excluded", "tiny", "no-clips"),
                  lambda: control.start_vocoder_training(ws, "all-excluded", preset="tiny", run="no-clips-voc")):
        with pytest.raises(StudioError, match="Dataset 'all-excluded' has no usable clip to train on"):
            start()
    proc = app("train", "--dataset", "all-excluded", "--preset", "tiny", "--run", "no-clips-cli",
               "--workspace", str(ws.root))
    assert proc.returncode == 2 and "has no usable clip to train on" in proc.stderr
    assert sorted(p.name for p in ws.runs.iterdir()) == before


def test_deleting_a_dataset_names_its_runs_first_then_leaves_its_runs_and_voices_speaking(ws, tmp_path):
    from utils import inference
    from webui import dataset as tab

    copy = Workspace.open(tmp_path / "copy")  # a copy of the module's workspace: the other tests keep theirs
    shutil.rmtree(copy.root)
    shutil.copytree(ws.root, copy.root, ignore=shutil.ignore_patterns("all-excluded"))
    inference.export_voice(copy, "one", "kept", vocoder="griffin-lim")
    shutil.copytree(copy.run_dir("one"), copy.run_dir("am-transcript-check"))  # as a transcript check leaves it

    proc = app("delete-dataset", "am", "--workspace", str(copy.root))
    assert proc.returncode == 2 and "Runs trained on it: " in proc.stderr and "--yes" in proc.stderr
    assert {"one", "f5"} <= set(proc.stderr.split("Runs trained on it: ")[1].split(".")[0].split(", "))
    assert copy.dataset_dir("am").is_dir()  # nothing gone without the yes
    with serve_tab(tab, copy, "Dataset") as client:
        said, picker, tick = client.predict("am", False, api_name="/dataset_delete")
        assert "Not done" in said and "one" in said and copy.dataset_dir("am").is_dir()
        said, picker, tick = client.predict("am", True, api_name="/dataset_delete")
    assert said.startswith("Deleted dataset am") and tick is False
    assert not copy.dataset_dir("am").exists() and "am" not in copy.list_datasets()
    assert not copy.run_dir("am-transcript-check").exists()  # the check's own run went with its dataset
    assert copy.run_dir("one").is_dir() and copy.run_dir("f5").is_dir() and copy.voice_dir("kept").is_dir()
    for voice in ("kept", "runs/f5/checkpoints/step-1"):  # the exported Matcha voice; the F5 one carries its prompt
        wave, sr, info = inference.synthesize(copy, voice, "ሰላም ነው።", steps=2, vocoder="griffin-lim")
        assert len(wave) > 0.1 * sr and np.isfinite(wave).all(), voice


# ------------------------------------------------------------------------------------------ 9. offline
def test_every_download_says_offline_in_one_sentence_with_the_one_thing_to_do(ws):
    from utils.events import run_to_end
    from utils.f5 import base as bases
    from utils.transcripts import asr
    from utils.vocoder import load_vocoder
    from utils.vocoder import default as vd
    from webui import dataset as dataset_tab

    assert os.environ.get("HF_HUB_OFFLINE") == "1"  # tests/conftest.py: the hub is unreachable here
    expected = {
        "the recognizer hf-audio/omniasr-ctc-300m-v2": (lambda: run_to_end(asr.fetch(ws)), "in the Recognizer box"),
        "the vocoder charactr/vocos-mel-24khz": (lambda: load_vocoder("charactr/vocos-mel-24khz"),
                                                 "under Add Vocos weights on the Inference tab"),
        "the F5-TTS base SWivid/F5-TTS": (lambda: bases.fetch(ws, accept_licence=True, log=lambda line: None),
                                          "into the workspace's pretrained/f5tts-v1-base/ folder"),
    }
    for what, (download, remedy) in expected.items():
        with pytest.raises(StudioError) as caught:
            download()
        message = str(caught.value)
        assert message.startswith(f"This machine cannot reach the Hugging Face hub to download {what}: "), message
        assert remedy in message and message.count(". ") == 0 and message.endswith("."), message
        said_plainly(message)
    vd.start_fetch(ws).join(60)
    line = vd.status_line(ws)
    assert "cannot reach the Hugging Face hub" in line and "Add Vocos weights" in line
    said_plainly(line)
    with serve_tab(dataset_tab, ws, "Dataset") as client:
        shown = client.predict("", api_name="/transcripts_fetch")
    assert "Not done: This machine cannot reach the Hugging Face hub to download the recognizer" in shown
    said_plainly(shown)


def test_a_dead_network_not_only_hf_hub_offline_is_said_the_same_way(ws):
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}  # the dead proxy stays: connections fail
    proc = app("transcribe", "--dataset", "am", "--workspace", str(ws.root), env=env)
    assert proc.returncode == 2
    message = proc.stderr.strip().splitlines()[-1]
    assert message.startswith("error: This machine cannot reach the Hugging Face hub to download the recognizer")
    said_plainly(message)


def test_the_offline_test_knows_the_hubs_errors_and_nothing_else(monkeypatch):
    import httpx
    from huggingface_hub.errors import LocalEntryNotFoundError

    from utils.hub import is_offline_error

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    wrapped = RuntimeError("download failed")
    wrapped.__cause__ = httpx.ConnectError("[Errno -2] Name or service not known")
    assert is_offline_error(wrapped) and is_offline_error(LocalEntryNotFoundError("not cached"))
    assert is_offline_error(OSError(101, "Network is unreachable"))
    assert not is_offline_error(ValueError("401 Unauthorized: a gated repository"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert is_offline_error(ValueError("anything, while told to stay offline"))


# -------------------------------------------------------------------------------------- 10. small ones
def test_amharic_names_work_for_runs_voices_their_zip_and_the_tabs_urls(ws):
    from utils import inference
    from utils.workspace import check_name
    from webui import inference as tab

    assert check_name("ሰላም-ድምፅ_2") == "ሰላም-ድምፅ_2"
    with pytest.raises(StudioError, match="Latin or Amharic letters"):
        check_name("ሰላም።")  # Ethiopic punctuation is not a letter
    with pytest.raises(StudioError, match="^Type or pick a voice name first.$"):  # not "The voice name '' cannot be used"
        check_name("  ", "voice name")
    path = prepare_run(tiny_config(ws, "ሙከራ-1", max_steps=1))
    assert path == ws.root / "runs" / "ሙከራ-1" / "config.json" and path.is_file()
    inference.export_voice(ws, "one", "ሰላም-ድምፅ", vocoder="griffin-lim")
    with zipfile.ZipFile(ws.root / "exports" / "ሰላም-ድምፅ.zip") as zf:
        assert "ሰላም-ድምፅ/model.safetensors" in zf.namelist()
    with serve_tab(tab, ws, "Inference") as client:  # the files come back through Gradio's URLs
        message, zip_file = client.predict("ሰላም-ድምፅ", "ሰላም-ድምፅ-2", "griffin-lim", False, False, 2,
                                           api_name="/export_voice")
        assert "voices/ሰላም-ድምፅ-2" in message and zipfile.ZipFile(zip_file).namelist()
        audio, wav, *_ = client.predict("ሰላም-ድምፅ", None, "ሰላም ነው።", 2, 0.667, 1.0, "griffin-lim", "cpu", 0,
                                        api_name="/speak")
        assert Path(wav).stat().st_size > 1000


def test_the_transcript_checks_own_run_is_neither_listed_nor_offered_as_a_voice(ws):
    from utils import inference
    from utils.runs import control, views

    shutil.copytree(ws.run_dir("one"), ws.run_dir("am-transcript-check"))  # as the check leaves it (dataset am)
    try:
        assert "am-transcript-check" not in [r["run"] for r in views.run_table(ws)]
        assert not [v for _, v in inference.voice_choices(ws) if "transcript-check" in v]
        assert not [c for c in control.init_choices(ws) if "transcript-check" in c]
        assert "one" in [r["run"] for r in views.run_table(ws)]  # a curator's run of the same dataset stays
    finally:
        shutil.rmtree(ws.run_dir("am-transcript-check"))


def test_the_voice_picker_starts_on_the_active_runs_best_checkpoint_else_its_newest(ws, tmp_path):
    from utils import inference
    from utils.runs import control
    from utils.jobs import machine_id

    copy = Workspace.open(tmp_path / "copy")
    shutil.copytree(ws.run_dir("one"), copy.run_dir("older"))
    shutil.copytree(ws.run_dir("one"), copy.run_dir("live"))
    status = copy.run_dir("live") / "status.json"
    live = {**read_json(status), "state": "running", "pid": os.getpid(), "machine": machine_id(), "best_checkpoint": None}
    status.write_text(json.dumps(live))
    os.utime(copy.run_dir("older") / "status.json")  # written after the live run's status: still the live run wins
    assert inference.default_voice(copy) == "runs/live/checkpoints/step-2"  # no best yet: the newest, not step-1
    live["best_checkpoint"] = str(copy.run_dir("live") / "checkpoints" / "step-1")
    status.write_text(json.dumps(live))
    assert inference.default_voice(copy) == "runs/live/checkpoints/step-1"  # the best one

    # once no run trains, a voice the curator exported comes before a checkpoint Stop saved, unevaluated, after it
    shutil.copytree(copy.run_dir("live") / "checkpoints" / "step-2", copy.voice_dir("abebe"))
    os.utime(copy.voice_dir("abebe"))  # exported now (copytree kept the checkpoint folder's time)
    status.write_text(json.dumps({**live, "state": "stopped", "best_checkpoint": None, "best_mcd": None}))
    assert inference.default_voice(copy) == "abebe"
    # the Training tab's "start from" names them in the Inference tab's words, not as folder paths
    labels = {value: label for label, value in control.init_labels(copy)}
    assert set(labels) == set(control.init_choices(copy)) and labels["voices/abebe"] == "abebe (exported voice)"
    assert labels["runs/live/checkpoints/step-2"] == "live · step 2"


def test_a_toast_shows_the_words_of_a_markdown_message_without_its_marks(monkeypatch):
    import gradio as gr

    from webui.components import plain_text, says_errors

    toasts = []
    monkeypatch.setattr(gr, "Warning", lambda text, *a, **k: toasts.append(text))

    def on_start():
        raise StudioError("Run **abebe** is queued: see `train.log` on the *Training* tab, or [the guide](docs/x.md).")

    box = says_errors(on_start, ["box"], "box")()
    assert box == ("**Not done:** Run **abebe** is queued: see `train.log` on the *Training* tab, or "
                   "[the guide](docs/x.md).")  # the box renders Markdown: it keeps the marks
    assert toasts == ["Run abebe is queued: see train.log on the Training tab, or the guide."]
    assert plain_text("2 * 3 frames, ### kept") == "2 * 3 frames, ### kept"
