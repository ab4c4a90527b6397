"""An exported voice carries the pronunciation dictionary the curator heard it with: loaded from
its folder outside the workspace, as PyTorch or ONNX, it reads a dictionary word as the studio did."""
from __future__ import annotations

import zipfile

import numpy as np

from tests.helpers import CKPT, voice_workspace
from utils import inference
from utils.inference.onnx_voice import OnnxVoice
from utils.text import save_user_dict
from utils.workspace import read_json

WORD, SAID = "ዋና", ["w", "a", "n", "a"]  # the rules geminate it: w a nː a


def test_an_exported_voice_reads_with_its_dictionary_outside_the_workspace_and_as_onnx(tmp_path):
    ws = voice_workspace(tmp_path / "ws")
    save_user_dict(ws, {WORD: SAID})
    _, _, studio = inference.synthesize(ws, CKPT, WORD, steps=1)
    assert studio["rows"][0]["phonemes"] == "w a n a"
    folder = inference.export_voice(ws, CKPT, "wana", vocoder="griffin-lim", onnx=True, onnx_steps=2)
    assert read_json(folder / "config.json")["voice"]["pronunciations"] == 1
    readme = (folder / "README.md").read_text(encoding="utf-8")
    assert "pronunciation dictionary: pronunciations.tsv, 1 word" in readme and "OnnxVoice` read with it" in readme
    with zipfile.ZipFile(ws.root / "exports" / "wana.zip") as zf:
        assert "wana/pronunciations.tsv" in zf.namelist()
        zf.extractall(tmp_path / "elsewhere")
    far = tmp_path / "elsewhere" / "wana"

    _, _, heard = inference.Voice.load(far).synthesize(WORD, steps=1)
    assert heard["rows"][0]["phonemes"] == "w a n a"
    _, _, rules = inference.Voice.load(far).synthesize(WORD, steps=1, user_dict={})
    assert rules["rows"][0]["phonemes"] == "w a nː a"  # what it read before: the dictionary made the difference

    onnx = OnnxVoice(far)
    wave, _ = onnx.synthesize(WORD, temperature=0.0)
    with_it, _ = onnx.synthesize(WORD, temperature=0.0, user_dict={WORD: SAID})
    without, _ = onnx.synthesize(WORD, temperature=0.0, user_dict={})
    np.testing.assert_array_equal(wave, with_it)
    assert len(wave) != len(without) or not np.array_equal(wave, without)


def test_a_voice_exported_without_a_dictionary_says_so(tmp_path):
    ws = voice_workspace(tmp_path / "ws")
    folder = inference.export_voice(ws, CKPT, "plain", vocoder="griffin-lim")
    assert not (folder / "pronunciations.tsv").exists()
    assert "pronunciation dictionary: none (the workspace had none at export)" in \
        (folder / "README.md").read_text(encoding="utf-8")
