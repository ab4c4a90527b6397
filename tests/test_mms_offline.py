"""MMS-TTS on a machine that cannot reach the Hugging Face hub: Start is refused in one sentence
before any run folder or queue entry, the engine text says "no" instead of recommending it, and the base's files
uploaded on the Training tab make it ready."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.conftest import AppServer
from tests.helpers import make_dataset
from tests.mms_fixtures import tiny_base
from utils import hardware, jobs
from utils.runs import control
from utils.events import StudioError
from utils.hub import HubUnreachable
from utils.mms.about import DESCRIPTION, HUB_ID
from utils.workspace import Workspace, read_json

FILES = ("config.json", "vocab.json", "tokenizer_config.json", "model.safetensors", "D_100000.pth")


@pytest.fixture
def offline(tmp_path, monkeypatch) -> None:
    """No hub (HF_HUB_OFFLINE, as conftest sets for every test) and an empty hub cache."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))


@pytest.fixture(scope="module")
def downloaded(tmp_path_factory) -> Path:
    """The base's files as a curator copies them from a machine that has them (outside the workspace)."""
    return tiny_base(tmp_path_factory.mktemp("usb-stick") / "mms-tts-amh")


def test_offline_start_is_refused_in_one_sentence_before_any_run_and_the_engine_text_says_no(tmp_path, offline):
    from webui.training import base_panel, engine_info

    ws = make_dataset(tmp_path / "ws", n_train=2, n_val=1, max_chars=20)
    with pytest.raises(HubUnreachable) as refused:
        control.start_training(ws, "am", run="mms-offline", engine="mms", accept_licence=True)
    said = str(refused.value)
    assert said.count(". ") == 0 and said.endswith(".") and "cannot reach the Hugging Face hub" in said
    assert "*MMS-TTS base files* on the Training tab" in said and "model.safetensors" in said
    assert "Errno" not in said and "HEAD" not in said
    assert not ws.run_dir("mms-offline").exists() and jobs.list_runs(ws) == []
    assert not (ws.root / "pretrained").exists()
    info = engine_info(ws, hardware.detect(ws.root))
    assert info.startswith("Can train on this machine: Matcha yes · ") and "MMS-TTS no" in info  # one short line
    state = base_panel(ws, "mms")[0]["value"]  # why, once MMS is picked
    assert state.startswith("**MMS-TTS on this machine: no.** This machine cannot reach the Hugging Face hub")


def test_uploaded_base_files_make_the_base_ready_and_a_run_starts_from_them(tmp_path, offline, downloaded):
    from utils.mms.base import import_base, obtainable
    from utils.training import prepare_run
    from tests.test_mms_engine import mms_config

    ws = make_dataset(tmp_path / "ws", n_train=2, n_val=1, max_chars=20)
    with pytest.raises(StudioError, match=r"vocab.json, model.safetensors \(or pytorch_model.bin\) missing"):
        import_base(ws, [downloaded / "config.json", downloaded / "tokenizer_config.json"])
    assert not obtainable(ws)[0] and not (ws.root / "pretrained" / "mms-tts-amh").exists()

    folder = import_base(ws, [downloaded / name for name in FILES])
    assert sorted(p.name for p in folder.iterdir()) == ["LICENSE.txt", "config.json", "discriminator.safetensors",
                                                       "model.safetensors", "tokenizer_config.json", "vocab.json"]
    assert "CC-BY-NC-4.0" in (folder / "LICENSE.txt").read_text() and (downloaded / "D_100000.pth").is_file()
    ready, line = obtainable(ws)
    assert ready and line.startswith("Meta's MMS-TTS base is ready in this workspace") and "with its" in line
    path = prepare_run(mms_config(ws, "mms-uploaded", init=HUB_ID, max_steps=1))  # no licence box: the files are here
    assert read_json(path)["train"]["init"] == str(folder)


def test_the_hub_counts_unreachable_when_its_name_does_not_resolve(monkeypatch):
    from huggingface_hub import constants

    from utils import hub

    for name in ("HF_HUB_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "_REACHED", {})
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: (_ for _ in ()).throw(
        socket.gaierror(-2, "Name or service not known")))
    assert hub.hub_reachable() is False


def test_the_training_tab_shows_the_base_missing_refuses_start_and_takes_its_files(tmp_path, page, downloaded):
    ws = make_dataset(tmp_path / "workspace", n_train=2, n_val=1, max_chars=20)
    server = AppServer(ws.root, env={"HF_HUB_CACHE": str(tmp_path / "empty-cache")}).wait_ready()
    try:
        page.goto(server.url)
        page.get_by_role("tab", name="Training").click()
        page.get_by_label(DESCRIPTION).check()
        state = page.locator("#base-state")
        expect(state).to_contain_text("cannot reach the Hugging Face hub")
        expect(page.locator("#engine")).to_contain_text("MMS-TTS no")
        expect(state).to_contain_text("MMS-TTS on this machine: no.")
        page.get_by_label("dataset", exact=True).click()
        page.get_by_role("option", name="am", exact=True).click()
        page.locator("#base-licence input").check()
        page.get_by_role("button", name="Start training").click()
        expect(page.locator("#train-message")).to_contain_text("Not done: This machine cannot reach the Hugging Face "
                                                               "hub", timeout=30_000)
        assert jobs.list_runs(ws) == [] and not any(ws.runs.glob("*"))

        page.get_by_role("button", name="MMS-TTS base files (for a machine").click()
        page.locator("#base-files input[type=file]").set_input_files([str(downloaded / n) for n in FILES])
        page.locator("#base-add").click()
        expect(page.locator("#base-msg")).to_contain_text("Added the MMS-TTS base", timeout=60_000)
        expect(state).to_contain_text("Meta's MMS-TTS base is ready in this workspace")
        expect(page.locator("#engine")).to_contain_text("MMS-TTS yes")
        expect(state).not_to_contain_text("on this machine: no")
        assert (Workspace.open(ws.root).root / "pretrained" / "mms-tts-amh" / "model.safetensors").is_file()
    finally:
        server.stop()


def test_the_offline_paragraph_is_said_once_on_the_training_tab_and_start_points_at_it(tmp_path, page):
    """Picked offline, MMS-TTS's paragraph (why no run can start, which files to upload) stood under the engine
    choice, again in the engine advice, and after Start in the message line and its toast: the same paragraph three
    or four times on one screen. It is said once, under the engine choice beside the upload box; Start points there."""
    ws = make_dataset(tmp_path / "workspace", n_train=2, n_val=1, max_chars=20)
    make_dataset(ws.root, name="bb", n_train=2, n_val=1, max_chars=20)  # a second one: picking it shows the advice
    server = AppServer(ws.root, env={"HF_HUB_CACHE": str(tmp_path / "empty-cache")}).wait_ready()
    try:
        page.goto(server.url)
        page.get_by_role("tab", name="Training").click()
        page.get_by_label(DESCRIPTION).check()
        # the engine's panel first: a list opened while it grows the page above stays where it opened, off screen
        expect(page.locator("#base-state")).to_contain_text("MMS-TTS on this machine: no.")
        expect(page.locator("#base-licence")).to_be_visible()
        page.get_by_label("dataset", exact=True).click()
        page.get_by_role("option", name="bb", exact=True).click()
        expect(page.locator("#engine-advice")).to_contain_text("MMS-TTS: for an hour or two")
        page.locator("#base-licence input").check()
        page.get_by_role("button", name="Start training").click()
        said = page.locator("#train-message")
        expect(said).to_contain_text("Not done: This machine cannot reach the Hugging Face hub for the MMS-TTS base: "
                                     "what to do instead is said under the engine choice, where MMS-TTS base files "
                                     "takes its files.", timeout=30_000)
        page.wait_for_timeout(1500)  # a toast the refusal sent, and the panel said anew after Start
        expect(page.locator("#base-state")).to_contain_text("so no MMS run can start: under MMS-TTS base files on the "
                                                            "Training tab, upload config.json")
        expect(page.locator("#engine-advice")).to_contain_text("MMS-TTS: for an hour or two of one speaker, any GPU "
                                                               "or a CPU (fine-tunes Meta's Amharic voice; CC-BY-NC-4.0)."
                                                               " Not on this machine: what it lacks here, and what to "
                                                               "do, is said under the engine choice once it is picked.")
        assert page.locator("body").inner_text().count("no MMS run can start") == 1
        assert jobs.list_runs(ws) == [] and not any(ws.runs.glob("*"))
    finally:
        server.stop()
