"""The neural vocoder by default: the public Vocos fetched once into the workspace (a local folder of the
published format stands in for the hub), used by "auto" everywhere, a trained vocoder winning when chosen,
and Griffin-Lim with a one-line reason when there is none."""
from __future__ import annotations

import re
import threading

import numpy as np
import pytest
import torch

from tests.helpers import CKPT, VOC, voice_workspace
from tests.test_vocoder import PUBLIC_CONFIG_YAML, public_state_dict
from utils import inference
from utils.audio import FeatureConfig
from utils.events import StudioError, run_to_end
from utils.vocoder import default as vd

DEFAULT = f"vocoders/{vd.DEFAULT_NAME}"


@pytest.fixture(scope="module")
def public_folder(tmp_path_factory):
    """config.yaml + pytorch_model.bin as published (random weights), where the hub's snapshot would be."""
    folder = tmp_path_factory.mktemp("hub-snapshot")
    torch.save(public_state_dict(), folder / "pytorch_model.bin")
    (folder / "config.yaml").write_text(PUBLIC_CONFIG_YAML)
    return folder


@pytest.fixture
def ws(tmp_path):
    return voice_workspace(tmp_path / "ws")


@pytest.fixture
def fake_hub(monkeypatch, public_folder):
    """huggingface_hub.snapshot_download answering from the local folder: nothing cached, the network 'works'."""
    import huggingface_hub

    calls = []

    def snapshot_download(repo_id, allow_patterns=None, local_files_only=False, tqdm_class=None, **kwargs):
        calls.append((repo_id, local_files_only))
        if local_files_only:
            raise FileNotFoundError("not in the cache")
        assert sorted(allow_patterns) == ["config.yaml", "pytorch_model.bin"]
        size = (public_folder / "pytorch_model.bin").stat().st_size
        bar = tqdm_class(total=size, unit="B")  # what the hub's byte bar does while the file arrives
        for _ in range(4):
            bar.update(size // 4)
        bar.close()
        return str(public_folder)

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv(vd.SOURCE_ENV, raising=False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    return calls


def test_the_public_vocos_is_fetched_once_from_the_hub_with_progress_and_its_licence(ws, fake_hub):
    events = list(vd.fetch(ws))
    target = events[-1].result
    assert target == ws.root / DEFAULT and fake_hub == [(vd.PUBLIC_VOCOS, True), (vd.PUBLIC_VOCOS, False)]
    assert any(re.search(r"downloading: \d+ MB of about 54 MB", e.message) for e in events)
    assert sorted(p.name for p in target.iterdir()) == ["LICENSE.md", "config.yaml", "pytorch_model.bin"]
    about = vd.notice(target)
    assert about["Licence"] == vd.LICENCE and about["Source"].startswith(vd.PUBLIC_VOCOS)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", about["Fetched"])
    assert "Permission is hereby granted" in (target / "LICENSE.md").read_text(encoding="utf-8")
    assert run_to_end(vd.fetch(ws)) == target and len(fake_hub) == 2  # the second call fetches nothing
    assert "MIT licence" in vd.status_line(ws) and "\n" not in vd.status_line(ws)


def test_a_local_folder_named_by_the_environment_stands_in_for_the_hub(ws, monkeypatch, public_folder, fake_hub):
    monkeypatch.setenv(vd.SOURCE_ENV, str(public_folder))
    vd.start_fetch(ws).join(60)
    assert vd.fetch_state(ws).state == "ready" and vd.default_vocoder(ws) == ws.root / DEFAULT
    assert fake_hub == [] and vd.notice(vd.default_vocoder(ws))["Source"].startswith(str(public_folder))
    assert vd.start_fetch(ws) is None  # here already: no second fetch


def test_offline_a_copy_in_the_hugging_face_cache_still_becomes_the_default(ws, tmp_path, monkeypatch, public_folder):
    import shutil

    from huggingface_hub import constants

    snapshot = tmp_path / "hf" / "models--charactr--vocos-mel-24khz" / "snapshots" / ("0" * 40)
    shutil.copytree(public_folder, snapshot)  # the layout the real snapshot_download reads back
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("0" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv(vd.SOURCE_ENV, raising=False)
    assert run_to_end(vd.fetch(ws)) == ws.root / DEFAULT  # the real huggingface_hub call, cache only
    assert (ws.root / DEFAULT / "pytorch_model.bin").read_bytes() == (public_folder / "pytorch_model.bin").read_bytes()


def test_weights_that_do_not_load_never_become_the_default(ws, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.yaml").write_text(PUBLIC_CONFIG_YAML)
    (bad / "pytorch_model.bin").write_bytes(b"not a checkpoint")
    with pytest.raises(StudioError, match="pytorch_model.bin"):
        run_to_end(vd.fetch(ws, source=bad))
    assert vd.default_vocoder(ws) is None and not list((ws.root / "vocoders").iterdir())


def test_auto_speaks_through_the_default_and_a_trained_vocoder_wins_when_chosen(ws, public_folder):
    before, _, gl = inference.synthesize(ws, CKPT, "ሰላም ነው።", steps=2)
    assert gl["vocoder"] == "griffin-lim"
    run_to_end(vd.fetch(ws, source=public_folder))
    wave, _, info = inference.synthesize(ws, CKPT, "ሰላም ነው።", steps=2)
    assert info["vocoder"] == f"vocos ({DEFAULT}, default)" and len(wave) == len(before)
    assert not np.allclose(wave, before)  # another sound: the vocoder made it, not Griffin-Lim
    _, _, mine = inference.synthesize(ws, CKPT, "ሰላም ነው።", steps=2, vocoder=VOC)
    assert mine["vocoder"] == f"vocos ({VOC})"
    _, _, chosen_gl = inference.synthesize(ws, CKPT, "ሰላም ነው።", steps=2, vocoder="griffin-lim")
    assert chosen_gl["vocoder"] == "griffin-lim"
    # batch synthesis loads the voice the same way; the picker offers the trained vocoder first
    assert inference.workspace_voice(ws, CKPT, None, "cpu").vocoder_label == f"vocos ({DEFAULT}, default)"
    assert [v for _, v in inference.vocoder_menu(ws)] == [VOC, DEFAULT, "griffin-lim"]
    assert "public Vocos" in inference.auto_vocoder_label(ws)


def test_export_includes_the_default_vocoder_and_its_licence_unless_griffin_lim_is_chosen(ws, public_folder):
    run_to_end(vd.fetch(ws, source=public_folder))
    folder = inference.export_voice(ws, CKPT, "with-vocos")
    assert (folder / "vocoder" / "model.safetensors").exists() and (folder / "vocoder" / "LICENSE.md").exists()
    assert "MIT licence" in (folder / "README.md").read_text(encoding="utf-8")
    assert inference.Voice.load(folder).vocoder_label.startswith("vocos")
    bare = inference.export_voice(ws, CKPT, "bare", vocoder="griffin-lim")
    assert not (bare / "vocoder").exists()


def test_training_evaluates_through_the_default_fixed_when_the_run_is_prepared(ws, public_folder):
    from utils.training import TrainConfig, prepare_run
    from utils.training.config import read_run_config
    from utils.training.evaluate import load_eval_vocoder

    from utils.workspace import write_jsonl

    assert TrainConfig().eval_vocoder == "auto"
    # a dataset with a clip to train on (a run is refused without one); only the runs' configs are read here
    write_jsonl(ws.dataset_dir("am") / "manifest.jsonl", [{"id": "a", "audio": "audio/a.wav", "excluded": False}])
    cfg = lambda run: TrainConfig(workspace=str(ws.root), dataset="am", run=run, preset="tiny")  # noqa: E731
    assert read_run_config(prepare_run(cfg("before")))[0].eval_vocoder == "griffin-lim"
    assert load_eval_vocoder(ws, "auto", "cpu", FeatureConfig()) is None
    run_to_end(vd.fetch(ws, source=public_folder))
    assert read_run_config(prepare_run(cfg("after")))[0].eval_vocoder == DEFAULT
    assert read_run_config(ws.run_dir("before") / "config.json")[0].eval_vocoder == "griffin-lim"  # kept on resume
    assert load_eval_vocoder(ws, "auto", "cpu", FeatureConfig()).cfg.dim == 512  # the public size
    assert load_eval_vocoder(ws, "griffin-lim", "cpu", FeatureConfig()) is None


def test_a_vocoder_of_other_mel_features_is_refused_by_name_for_speech_and_for_a_runs_evaluation(ws, public_folder):
    """One check (utils/vocoder/choice.py) for the Inference tab and for a run's evaluations: the public Vocos
    expects 24 kHz, 100 mels, hop 256; a model of 22.05 kHz mels would be turned into noise through it."""
    from dataclasses import replace

    from utils.training.evaluate import load_eval_vocoder
    from utils.vocoder.choice import check_features_match

    run_to_end(vd.fetch(ws, source=public_folder))
    other = replace(FeatureConfig(), sample_rate=22050)
    with pytest.raises(StudioError, match=r"eval_vocoder: the model makes different mel features .*sample rate 22050"):
        load_eval_vocoder(ws, "auto", "cpu", other)
    vocoder = load_eval_vocoder(ws, "auto", "cpu", FeatureConfig())
    with pytest.raises(StudioError, match=r"step-8 makes different mel features than the vocoder vocos \(x\)"):
        check_features_match(other, vocoder.cfg, "step-8", "vocos (x)")
    check_features_match(FeatureConfig(), vocoder.cfg, "step-8", "vocos (x)")  # the same features pass


@pytest.mark.parametrize("hf_offline", [True, False], ids=["HF_HUB_OFFLINE", "no-network"])
def test_offline_the_fetch_is_tried_once_and_griffin_lim_speaks_with_a_one_line_reason(ws, monkeypatch, hf_offline):
    import huggingface_hub

    calls = []

    def unreachable(repo_id, local_files_only=False, **kwargs):
        calls.append(local_files_only)
        raise OSError("Network is unreachable") if not local_files_only else FileNotFoundError("not cached")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", unreachable)
    monkeypatch.delenv(vd.SOURCE_ENV, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1") if hf_offline else monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    vd.start_fetch(ws).join(60)
    assert vd.fetch_state(ws).state == "failed" and calls == ([True] if hf_offline else [True, False])
    assert vd.start_fetch(ws) is None and len(calls) == (1 if hf_offline else 2)  # remembered: not asked again
    line = vd.status_line(ws)
    assert "\n" not in line and line.startswith("The voice sounds buzzy because Griffin-Lim")
    if hf_offline:  # offline: one sentence, one way out
        assert "this machine cannot reach the Hugging Face hub" in line and "Add Vocos weights" in line
        assert "HF_HUB_OFFLINE" not in line and line.count(". ") == 0
    else:
        assert "the download failed" in line
        assert all(k in line for k in ("connect to the internet", "Add Vocos weights", "train a vocoder"))
    # the Inference tab shows the line where Add Vocos weights is: below, not "on the Inference tab"
    assert line.replace("*", "").count("Add Vocos weights below") == 1 and "Inference tab" not in line
    training_line = vd.status_line(ws, training=True).replace("*", "")
    assert "samples sound buzzy" in training_line and "Add Vocos weights on the Inference tab" in training_line
    assert inference.synthesize(ws, CKPT, "ሰላም", steps=1)[2]["vocoder"] == "griffin-lim"


def test_two_app_processes_fetching_at_once_leave_one_good_copy(ws, public_folder):
    errors = []

    def fetch():
        try:
            run_to_end(vd.fetch(ws, source=public_folder))
        except Exception as exc:  # noqa: BLE001 - any failure fails the test below
            errors.append(exc)

    threads = [threading.Thread(target=fetch) for _ in range(2)]
    [t.start() for t in threads]
    [t.join(60) for t in threads]
    assert errors == [] and vd.default_vocoder(ws) is not None
    assert [p.name for p in (ws.root / "vocoders").iterdir()] == [vd.DEFAULT_NAME]


def _markdown(demo, elem_id: str) -> str:
    return next(b.value for b in demo.blocks.values() if getattr(b, "elem_id", None) == elem_id)


def test_the_inference_and_training_tabs_show_the_licence_or_the_reason_next_to_the_vocoder(ws, public_folder):
    import gradio as gr

    from webui import inference as inference_tab
    from webui import training as training_tab
    from webui.context import AppContext

    def build(module):
        with gr.Blocks() as demo:
            module.build(AppContext(workspace=ws))
        return demo

    assert "buzzy" in _markdown(build(inference_tab), "vocoder-status")
    assert "buzzy" in _markdown(build(training_tab), "training-vocoder-status")
    run_to_end(vd.fetch(ws, source=public_folder))
    assert "MIT licence" in _markdown(build(inference_tab), "vocoder-status")
    assert "New runs render their samples" in _markdown(build(training_tab), "training-vocoder-status")
    ctx = AppContext(workspace=ws)
    _, info_a, _, _ = inference_tab.compare(ctx, CKPT, CKPT, "ሰላም", "almaz", 2, 0.667, 1.0,
                                            inference_tab.AUTO_VOCODER, 0)
    assert f"vocoder: vocos ({DEFAULT}, default)" in info_a  # A/B goes through the default too


def test_the_app_fetches_it_at_start_and_the_tabs_say_so_in_a_real_browser(tmp_path, public_folder, start_app, page):
    from playwright.sync_api import expect

    ws = voice_workspace(tmp_path / "workspace")
    server = start_app(workspace=ws.root, env={vd.SOURCE_ENV: str(public_folder)})  # the hub stays offline
    page.goto(server.url)
    page.get_by_role("tab", name="Inference").click()
    expect(page.locator("#vocoder-status")).to_contain_text("MIT licence", timeout=60_000)
    page.locator("#inference-speak").click()
    expect(page.locator("#inference-info")).to_contain_text(f"vocos ({DEFAULT}, default)", timeout=60_000)
    page.get_by_role("tab", name="Training").click()
    expect(page.locator("#training-vocoder-status")).to_contain_text("New runs render their samples", timeout=30_000)
    assert "vocoder: ready" in server.output()
