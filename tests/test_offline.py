"""Offline, as CI and many curators are: every download from the Hugging Face hub (the recognizer, the vocoder,
the F5 base) says in one plain sentence that this machine cannot reach the hub and the one thing to do; a dead
network is said as HF_HUB_OFFLINE is; only the hub's own errors count as offline."""
from __future__ import annotations

import os

import pytest

from tests.helpers import cli, serve_tab
from utils.events import StudioError
from utils.workspace import Workspace

RAW_CLASS_NAMES = ("LocalEntryNotFoundError", "ConnectError", "OfflineModeIsEnabled", "HfHubHTTPError", "OSError",
                   "Exception", "Traceback")


def said_plainly(message: str) -> None:
    assert not any(name in message for name in RAW_CLASS_NAMES), message
    assert "HF_HUB_OFFLINE" not in message and "$AMHARIC" not in message, message


def test_every_download_says_offline_in_one_sentence_with_the_one_thing_to_do(tmp_path):
    from utils.events import run_to_end
    from utils.f5 import base as bases
    from utils.transcripts import asr
    from utils.vocoder import default as vd
    from utils.vocoder import load_vocoder
    from webui import dataset as dataset_tab

    ws = Workspace.open(tmp_path / "ws")
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
        shown, _ = client.predict("", api_name="/transcripts_fetch")  # (its log, how far it went)
    assert "Not done: This machine cannot reach the Hugging Face hub to download the recognizer" in shown
    said_plainly(shown)


def test_a_dead_network_not_only_hf_hub_offline_is_said_the_same_way(tiny_runs_copy):
    from utils.datasets import load_manifest, save_manifest

    rows = load_manifest(tiny_runs_copy, "am")
    rows[0].update(text="", normalized="", flags=["missing_text"])  # a clip to draft: transcribe fetches a recognizer
    save_manifest(tiny_runs_copy, "am", rows)
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}  # the dead proxy stays: connections fail
    proc = cli("transcribe", "--dataset", "am", "--workspace", str(tiny_runs_copy.root), env=env)  # stops at the download
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


