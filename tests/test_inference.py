"""Speaking text: checkpoints and exported voices, sentence splitting, the user dictionary, CLI and tab."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from models.matcha import MatchaConfig, MatchaTTS
from models.vocoder import PRESETS, Vocoder
from utils import inference
from utils.audio import FeatureConfig, load_audio
from utils.events import StudioError
from utils.text import save_user_dict
from utils.text.tokenizers import make_tokenizer
from utils.training.checkpoint import save_checkpoint
from utils.vocoder import save_vocoder
from utils.workspace import Workspace, read_json

ROOT = Path(__file__).resolve().parent.parent
CKPT = "runs/r1/checkpoints/step-10"
VOC = "runs/voc/checkpoints/step-1"


@pytest.fixture
def ws(tmp_path) -> Workspace:
    """A workspace with a tiny random two-speaker acoustic checkpoint and a tiny vocoder checkpoint."""
    ws = Workspace.open(tmp_path / "ws")
    tok = make_tokenizer("phoneme")
    torch.manual_seed(0)
    cfg = MatchaConfig.preset_config("tiny", n_symbols=len(tok.symbols), n_speakers=2, mel_mean=-6.0, mel_std=2.0)
    save_checkpoint(ws.root / CKPT, MatchaTTS(cfg).state_dict(),
                    {"model": cfg.to_dict(), "frontend": {"kind": tok.kind, "symbols": tok.symbols,
                                                          "tokenizer": tok.to_dict()},
                     "speakers": ["abebe", "almaz"], "features": FeatureConfig().to_dict(), "step": 10})
    save_vocoder(Vocoder(PRESETS["tiny"]), ws.root / VOC)
    return ws


def test_checkpoint_speaks_with_griffin_lim_and_a_seed_repeats_it(ws):
    wave, sr, info = inference.synthesize(ws, CKPT, "ሰላም ነው።", speaker="almaz", steps=2)
    again, _, _ = inference.synthesize(ws, CKPT, "ሰላም ነው።", speaker="almaz", steps=2)
    assert sr == 24000 and wave.dtype == np.float32 and len(wave) > 0 and np.isfinite(wave).all()
    assert np.abs(wave).max() <= 0.99 + 1e-6
    assert info["vocoder"] == "griffin-lim" and info["speaker"] == "almaz" and info["rtf"] > 0
    np.testing.assert_array_equal(wave, again)


def test_long_text_is_spoken_sentence_by_sentence(ws):
    _, _, one = inference.synthesize(ws, CKPT, "ሰላም ነው።", steps=2)
    _, _, three = inference.synthesize(ws, CKPT, "ሰላም ነው። ሰላም ነው? ሰላም ነው!", steps=2)
    assert one["sentences"] == 1 and three["sentences"] == 3
    assert three["duration_s"] > 2 * one["duration_s"]


def test_slower_speed_gives_longer_audio(ws):
    _, _, normal = inference.synthesize(ws, CKPT, "ሰላም ነው።", steps=2)
    _, _, slow = inference.synthesize(ws, CKPT, "ሰላም ነው።", steps=2, length_scale=2.0)
    assert slow["frames"] > 1.5 * normal["frames"]


def test_user_pronunciation_dictionary_is_applied(ws):
    _, _, before = inference.synthesize(ws, CKPT, "ሰላም", steps=1)
    save_user_dict(ws, {"ሰላም": ["s", "a", "l", "a", "m", "a", "l", "a", "m", "a"]})
    _, _, after = inference.synthesize(ws, CKPT, "ሰላም", steps=1)
    assert after["tokens"] == 10 != before["tokens"]


def test_sentence_splitting_keeps_numbers_and_abbreviations():
    assert inference.split_sentences("ሰላም ነው። እንዴት ነህ? በ3.5 ዓ.ም ነበር.\nአዎ") == \
        ["ሰላም ነው።", "እንዴት ነህ?", "በ3.5 ዓ.ም ነበር.", "አዎ"]


def test_exported_voice_is_self_contained_and_uses_its_own_vocoder(ws):
    folder = inference.export_voice(ws, CKPT, "almaz-voice", vocoder=VOC)
    assert (folder / "vocoder" / "model.safetensors").exists()
    assert read_json(folder / "config.json")["voice"]["vocoder"] == "vocoder"
    shutil.rmtree(ws.runs)  # nothing outside the voice folder is needed any more
    ws.runs.mkdir()
    assert inference.list_voices(ws) == ["almaz-voice"] and inference.voice_choices(ws) == ["almaz-voice"]
    wave, sr, info = inference.synthesize(ws, "almaz-voice", "ሰላም ነው።", steps=2)
    assert info["vocoder"] == "vocos (voice)" and len(wave) > 0
    _, _, gl = inference.synthesize(ws, "almaz-voice", "ሰላም ነው።", steps=2, vocoder="griffin-lim")
    assert gl["vocoder"] == "griffin-lim"
    with pytest.raises(StudioError, match="exists already"):
        inference.export_voice(ws, "voices/almaz-voice", "almaz-voice")


def test_pickers_separate_acoustic_checkpoints_from_vocoders(ws):
    assert inference.list_acoustic_checkpoints(ws) == [CKPT]
    assert inference.list_vocoders(ws) == [VOC]
    assert inference.speakers(ws, CKPT) == ["abebe", "almaz"]


@pytest.mark.parametrize("voice, speaker, text, message", [
    ("nobody", None, "ሰላም", "no voice or checkpoint"),
    (VOC, None, "ሰላም", "not an acoustic-model checkpoint"),
    ("../outside", None, "ሰላም", "outside the workspace"),
    (CKPT, "kebede", "ሰላም", "abebe, almaz"),
    (CKPT, None, "   ", "Type some Amharic"),
    (CKPT, None, "...", "Nothing in the text"),
])
def test_bad_requests_get_clear_messages(ws, voice, speaker, text, message):
    with pytest.raises(StudioError, match=message):
        inference.synthesize(ws, voice, text, speaker=speaker, steps=1)


def test_synth_cli_writes_a_wav(ws, tmp_path):
    out = tmp_path / "out.wav"
    proc = subprocess.run([sys.executable, "app.py", "synth", "--workspace", str(ws.root), "--voice", CKPT,
                           "ሰላም ነው።", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    wave, sr = load_audio(out)
    assert sr == 24000 and len(wave) > 0 and "RTF" in proc.stdout


def test_inference_tab_builds_and_its_handlers_speak_and_export(ws):
    import gradio as gr

    from webui import inference as tab
    from webui.context import AppContext

    ctx = AppContext(workspace=ws)
    with gr.Blocks() as demo:
        tab.build(ctx)
    api_names = {getattr(fn, "api_name", None) for fn in demo.fns.values()}
    assert {"speak", "export_voice", "inference_refresh", "inference_speakers"} <= api_names
    (sr, wave), info = tab.speak(ctx, CKPT, "almaz", "ሰላም ነው።", 2, 0.667, 1.0, tab.AUTO_VOCODER)
    assert sr == 24000 and len(wave) > 0 and "RTF" in info
    assert "Exported" in tab.export(ctx, CKPT, "v1", VOC, False)
    voices, _, speakers = tab.refresh(ctx)
    assert voices["choices"][0] in ("v1", ("v1", "v1")) and speakers["visible"] is True
    with pytest.raises(gr.Error):
        tab.speak(ctx, "nobody", None, "ሰላም", 2, 0.667, 1.0, tab.AUTO_VOCODER)


def test_speak_through_gradio_client(ws):
    from tests.helpers import serve_tab
    from webui import inference as tab

    with serve_tab(tab, ws, "Inference") as client:
        audio, info = client.predict(CKPT, "abebe", "ሰላም ነው።", 2, 0.667, 1.0, tab.AUTO_VOCODER, api_name="/speak")
    wave, sr = load_audio(audio)
    assert sr == 24000 and len(wave) > 0 and "RTF" in info
