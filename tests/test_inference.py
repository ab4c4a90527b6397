"""Speaking text: checkpoints and exported voices, sentence splitting, the user dictionary, CLI and tab."""
from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import gradio as gr
import numpy as np
import pytest
import soundfile as sf
import torch

from models.vocoder import PRESETS, Vocoder
from tests.conftest import tiny_matcha_config
from tests.helpers import CKPT, VOC, cli, serve_tab, voice_workspace
from utils import inference
from utils.audio import load_audio
from utils.events import StudioError, run_to_end
from utils.text import save_user_dict
from utils.text.tokenizers import make_tokenizer
from utils.training import prepare_run
from utils.vocoder import save_vocoder
from utils.workspace import Workspace, atomic_write_json, read_json

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def ws(tmp_path) -> Workspace:
    return voice_workspace(tmp_path / "ws")


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


def test_a_latin_word_in_the_dictionary_is_no_longer_said_to_be_read_approximately(ws):
    """The Inference tab's info said "read with approximate letter rules: Hello ... add them to the dictionary"
    for a word the dictionary already read, where the G2P tab said nothing."""
    text = "Hello, ሰላም ነው።"
    _, _, before = inference.synthesize(ws, CKPT, text, steps=1)
    assert any("Hello" in w for w in before["warnings"]), before["warnings"]
    save_user_dict(ws, {"Hello": ["h", "ə", "l", "o"]})
    _, _, after = inference.synthesize(ws, CKPT, text, steps=1)
    assert not any("Hello" in w for w in after["warnings"]), after["warnings"]


def test_a_line_whose_only_words_are_in_the_dictionary_is_spoken(ws, tmp_path):
    """"Hello" was refused ("no Amharic letters") before the dictionary holding it was consulted."""
    with pytest.raises(StudioError, match="no Amharic"):
        inference.synthesize(ws, "nobody", "Hello!", steps=1)  # refused before the voice is looked up
    save_user_dict(ws, {"Hello": ["h", "ə", "l", "o"]})
    _, _, info = inference.synthesize(ws, CKPT, "Hello!", steps=1)
    assert info["spoken"] == 1 and info["rows"][0]["phonemes"] == "h ə l o !"
    _, _, info = inference.synthesize(ws, CKPT, "hello!", steps=1)  # its entry in another case reads it too
    assert info["spoken"] == 1 and info["rows"][0]["phonemes"] == "h ə l o !"
    lines = tmp_path / "lines.txt"
    lines.write_text("hi|Hello\nbye|Goodbye\n", encoding="utf-8")
    result = run_to_end(inference.speak_file(ws, CKPT, lines, steps=1))
    assert result["written"] == 1 and [f[0] for f in result["failed"]] == ["line 2"]
    assert "no Amharic (Ethiopic) letters" in result["failed"][0][1]
    # no line spoken: refused, no empty zip (the command line exited 0 and offered one, as for a batch done)
    lines.write_text("bye|Goodbye\n።።\n", encoding="utf-8")
    zips = set((ws.root / "exports").glob("*.zip"))
    with pytest.raises(StudioError, match=r"No line of lines.txt could be spoken, so no zip was made \(line 1: "):
        run_to_end(inference.speak_file(ws, CKPT, lines, steps=1))
    assert set((ws.root / "exports").glob("*.zip*")) == zips


def test_a_number_alone_is_spoken_in_amharic_words(ws):
    """"12345" was refused for want of Amharic letters, while the G2P tab read it as አስራ ሁለት ሺህ ..."""
    _, _, info = inference.synthesize(ws, CKPT, "12345", steps=1)
    assert info["spoken"] == 1 and "አስራ ሁለት ሺህ" in info["rows"][0]["normalized"]


def test_an_abbreviation_alone_is_spoken_by_its_letters(ws):
    _, _, info = inference.synthesize(ws, CKPT, "BBC", steps=1)
    row = info["rows"][0]
    assert row["normalized"] == "ቢቢሲ" and row["phonemes"] == "b i b i s i"
    assert any("Spelled letter by letter: BBC" in w for w in info["warnings"])


def test_sentence_splitting_keeps_numbers_and_abbreviations_and_picks_pauses():
    parts = inference.split_sentences("ሰላም ነው። እንዴት ነህ? በ3.5 ዓ.ም ነበር.\n\nአዎ")
    assert [p.text for p in parts] == ["ሰላም ነው።", "እንዴት ነህ?", "በ3.5 ዓ.ም ነበር.", "አዎ"]
    pauses = [p.pause_s for p in parts[:3]]
    assert pauses[1] > pauses[0] and pauses[2] > pauses[1]  # question > full stop; paragraph longest


def test_an_abbreviations_full_stop_does_not_end_a_sentence():
    """በ2015 ዓ.ም. 25 ሰዎች ... was spoken as two sentences with a pause after ዓ.ም."""
    text = "በ2015 ዓ.ም. 25 ሰዎች ወደ ዶ/ር አበበ መጡ። ዶክ. አበበ ቁ. 3 ላይ ናቸው. ርቀቱ 5 ኪ.ሜ. ነው. አዎ"
    assert [p.text for p in inference.split_sentences(text)] == [
        "በ2015 ዓ.ም. 25 ሰዎች ወደ ዶ/ር አበበ መጡ።", "ዶክ. አበበ ቁ. 3 ላይ ናቸው.", "ርቀቱ 5 ኪ.ሜ. ነው.", "አዎ"]
    assert [p.text for p in inference.split_sentences("በ2015 ዓ.ም.\nአዎ")] == ["በ2015 ዓ.ም.", "አዎ"]  # a line break


def test_an_over_long_sentence_is_cut_at_commas():
    clause = "ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው፣ "
    parts = inference.split_sentences(clause * 20 + "እንሂድ።")
    assert len(parts) > 1 and all(len(p.text) <= 200 for p in parts)
    assert " ".join(p.text for p in parts).replace(" ", "") == (clause * 20 + "እንሂድ።").replace(" ", "")
    assert parts[0].text.endswith("፣") and parts[0].pause_s < parts[-1].pause_s


def test_batched_synthesis_equals_one_sentence_at_a_time(ws):
    """Padding in a batch must not change an utterance (masked attention and masked GroupNorm)."""
    from utils.training import load_checkpoint

    model, _ = load_checkpoint(ws.root / CKPT)
    short, long = [5, 6, 7], [8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]
    batch = model.synthesise_batch([long, short], [0, 1], n_steps=3, temperature=0.0)
    for out, ids, spk in zip(batch, [long, short], [0, 1]):
        alone = model.synthesise(ids, spk, n_steps=3, temperature=0.0)["mel"][0]
        assert out["mel"].shape == alone.shape
        torch.testing.assert_close(out["mel"], alone, atol=1e-4, rtol=1e-4)


def test_long_text_streams_the_first_sentence_before_the_rest(ws):
    text = ("ሰላም ነው። እንዴት ነህ? በ፲፱፻፹፯ ዓ.ም ተወለደ! ዋጋው 25 ብር ነው፤ ጥሩ ነው።\n\n"
            "ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው። መጽሐፉን አንብቤ ጨረስኩት።")
    chunks = list(inference.speak(ws, CKPT, text, steps=2, batch_size=3))
    assert [c.done for c in chunks] == [1, 4, 6] and chunks[0].total == 6
    assert chunks[0].info["first_audio_s"] <= chunks[-1].info["seconds"]
    rows = [r for c in chunks for r in c.rows]
    assert "፲፱፻፹፯" not in rows[2]["normalized"] and "25" not in rows[3]["normalized"]  # numerals read out
    assert all(r["phonemes"] for r in rows)
    wave, sr, info = inference.synthesize(ws, CKPT, text, steps=2, batch_size=3)
    assert len(wave) == sum(len(c.wave) for c in chunks) and info["spoken"] == 6
    # audio of plausible length: at least one hop per symbol, plus five pauses between sentences
    assert len(wave) / sr >= info["tokens"] * 256 / sr + 5 * 0.15


def test_the_first_sound_is_the_first_words_of_the_first_sentence(ws):
    """The first audio waited for the whole first sentence (its decoder steps and vocoder over every frame): it is
    now its first words, and the rest of the sentence follows in the next chunk, as long as one piece would be."""
    from utils.inference.first_words import FIRST_FRAMES
    from utils.training import load_checkpoint

    text = "ኢትዮጵያ በምሥራቅ አፍሪካ የምትገኝ ሀገር ናት፤ ዋና ከተማዋ አዲስ አበባ ነው።"
    chunks = list(inference.speak(ws, CKPT, text, steps=2, length_scale=2.0))
    assert [(c.done, len(c.rows), len(c.mels)) for c in chunks] == [(0, 0, 0), (1, 1, 1)]
    frames = chunks[1].mels[0].shape[-1]
    assert frames > 2 * FIRST_FRAMES and len(chunks[0].wave) < FIRST_FRAMES * 256
    model, _ = load_checkpoint(ws.root / CKPT)
    ids = make_tokenizer("phoneme").encode(text)
    whole = model.synthesise(ids, 0, n_steps=2, length_scale=2.0)["mel"]
    assert whole.shape[-1] == frames  # the same durations: the sentence is as long as in one piece
    assert sum(len(c.wave) for c in chunks) == 256 * (frames - 1)
    assert chunks[0].info["first_audio_s"] < chunks[1].info["seconds"]


def test_spectrogram_image_is_rgb_with_frequency_rows(ws):
    _, _, info = inference.synthesize(ws, CKPT, "ሰላም ነው። እንዴት ነህ?", steps=2)
    image = inference.spectrogram_image(info["mels"])
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[0] == 200 and image.shape[2] == 3
    frames = sum(m.shape[1] for m in info["mels"]) + 20
    widen = max(1, min(4, 800 // frames))  # a short phrase is drawn wider
    assert image.shape[1] == frames * widen and image.std() > 0


def test_run_name_speaks_with_its_best_checkpoint(ws):
    run = ws.root / "runs" / "r1"
    shutil.copytree(ws.root / CKPT, run / "checkpoints" / "step-20")
    assert inference.resolve_voice(ws, "r1") == run / "checkpoints" / "step-20"  # no best yet: the newest
    (run / "status.json").write_text(json.dumps({"best_checkpoint": str(ws.root / CKPT), "best_mcd": 7.5}))
    assert inference.resolve_voice(ws, "r1") == ws.root / CKPT
    labels = dict((v, label) for label, v in inference.voice_choices(ws))
    assert "best, MCD 7.50 dB" in labels[CKPT] and "best" not in labels["runs/r1/checkpoints/step-20"]
    _, _, info = inference.synthesize(ws, "r1", "ሰላም", steps=1)
    assert info["checkpoint"] == CKPT


def test_a_vocoder_for_other_mel_features_is_refused(ws):
    save_vocoder(Vocoder(dataclasses.replace(PRESETS["tiny"], n_mels=80)), ws.root / "runs/voc80/checkpoints/step-1")
    with pytest.raises(StudioError, match="mels 100 vs 80"):
        inference.synthesize(ws, CKPT, "ሰላም", steps=1, vocoder="runs/voc80/checkpoints/step-1")


def test_auto_device_keeps_off_a_gpu_that_training_holds(ws, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # no GPU here: the decision is what is tested
    assert inference.pick_device(ws, "auto")[0] == "cuda"
    run = ws.root / "runs" / "busy"
    run.mkdir(parents=True)
    (run / "status.json").write_text(json.dumps({"state": "running", "devices": "cuda:0", "pid": os.getpid(),
                                                 "created": 1.0}))
    device, why = inference.pick_device(ws, "auto")
    assert device == "cpu" and "busy" in why
    assert inference.pick_device(ws, "cuda") == ("cuda", "GPU, shared with training run busy")
    assert inference.pick_device(ws, "cpu")[0] == "cpu"


def test_auto_device_speaks_on_a_second_gpu_that_no_run_holds(ws, monkeypatch):
    """'Auto' went to the CPU whenever any run held any GPU, also with a second card idle (F5 speech on a CPU takes
    minutes): now it takes the idle card, and the CPU only when every card is held."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # no GPU here: the decision is what is tested
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    run = ws.root / "runs" / "on-first"
    run.mkdir(parents=True)
    status = {"state": "running", "devices": "cuda:0", "pid": os.getpid(), "created": 1.0}
    (run / "status.json").write_text(json.dumps(status))
    device, why = inference.pick_device(ws, "auto")
    assert device == "cuda:1" and "GPU 1" in why and "on-first" in why
    (run / "status.json").write_text(json.dumps({**status, "devices": "cuda:0,1"}))
    assert inference.pick_device(ws, "auto")[0] == "cpu"


def test_batch_file_gives_a_zip_and_reports_the_line_it_could_not_speak(ws, tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_text("greet|ሰላም ነው።\n\n# a comment\n???\nእንዴት ነህ?\ngreet|ደህና ነኝ።\n", encoding="utf-8")
    before = lines.read_bytes()
    said = []
    result = run_to_end(inference.speak_file(ws, CKPT, lines, steps=1), printer=said.append)
    # the line that failed by its number in the file (it was "line 00004", a made-up file name); a name used twice
    # is said where the second one is renamed
    assert result["written"] == 3 and [f[0] for f in result["failed"]] == ["line 4"]
    assert any("line 4 (00004): " in s for s in said) and any("greet-6.wav" in s and "taken by an earlier" in s
                                                               for s in said)
    with zipfile.ZipFile(result["zip"]) as zf:
        assert sorted(zf.namelist()) == ["00005.wav", "greet-6.wav", "greet.wav", "manifest.csv"]
        manifest = zf.read("manifest.csv").decode().splitlines()
        assert manifest[1].startswith("greet.wav,ሰላም ነው።,") and manifest[1].endswith(f",{CKPT}")  # who spoke it
        wave, sr = sf.read(io.BytesIO(zf.read("greet.wav")))
    assert sr == 24000 and len(wave) > 0
    assert lines.read_bytes() == before
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(StudioError, match="latin1.txt is not UTF-8"):
        inference.read_lines(tmp_path / "latin1.txt")


def test_exported_voice_is_self_contained_zipped_and_loads_outside_the_workspace(ws, tmp_path):
    folder = inference.export_voice(ws, CKPT, "almaz-voice", vocoder=VOC)
    assert (folder / "vocoder" / "model.safetensors").exists()
    assert read_json(folder / "config.json")["voice"]["vocoder"] == "vocoder"
    assert "Voice.load(\"almaz-voice\")" in (folder / "README.md").read_text(encoding="utf-8")
    with zipfile.ZipFile(ws.root / "exports" / "almaz-voice.zip") as zf:
        assert {"almaz-voice/model.safetensors", "almaz-voice/config.json", "almaz-voice/README.md",
                "almaz-voice/vocoder/model.safetensors"} <= set(zf.namelist())
        zf.extractall(tmp_path / "elsewhere")
    # written as any file of this user is (0644 under the usual umask), not 0600 as a temporary file starts:
    # a voice shared from a server's folder is readable by whoever it is shared with
    umask = os.umask(0o022)
    os.umask(umask)
    wanted = 0o666 & ~umask
    for f in [ws.root / "exports" / "almaz-voice.zip", *(p for p in folder.rglob("*") if p.is_file())]:
        assert f.stat().st_mode & 0o777 == wanted, (f, oct(f.stat().st_mode))
    shutil.rmtree(ws.runs)  # nothing outside the voice folder is needed any more
    ws.runs.mkdir()
    assert inference.list_voices(ws) == ["almaz-voice"]
    # an export being written (its temporary folder holds a whole voice) is no voice to list: the Inference tab's
    # timer said its name could not be used, in red, during every successful export
    shutil.copytree(folder, ws.voices / ".walk-voice.tmp-export")
    assert inference.list_voices(ws) == ["almaz-voice"]
    assert [v for _, v in inference.voice_choices(ws)] == ["almaz-voice"]
    wave, sr, info = inference.synthesize(ws, "almaz-voice", "ሰላም ነው።", steps=2)
    assert info["vocoder"] == "vocos (voice)" and len(wave) > 0
    _, _, gl = inference.synthesize(ws, "almaz-voice", "ሰላም ነው።", steps=2, vocoder="griffin-lim")
    assert gl["vocoder"] == "griffin-lim"
    with pytest.raises(StudioError, match="exists already; pick another name, or replace it .*--overwrite on the "
                                          "command line"):  # the words of both places it is said in
        inference.export_voice(ws, "almaz-voice", "almaz-voice")
    voice = inference.Voice.load(tmp_path / "elsewhere" / "almaz-voice")  # the snippet of the README
    far, far_sr, far_info = voice.synthesize("ሰላም ነው።", steps=2)
    assert far_sr == sr and far_info["vocoder"].startswith("vocos") and len(far) == len(wave)


def test_a_voice_zip_is_imported_into_another_workspace_by_the_tab_and_by_synth(ws, tmp_path):
    """A voice zip crashed synth (NotADirectoryError, a traceback) after the advice to copy it into the workspace, and
    nothing imported one: the only way was to unzip it into voices/ by hand, which no document named. Its dictionary
    entries the new workspace reads otherwise went unsaid."""
    from utils.inference.export import import_voice
    from webui.context import AppContext
    from webui.inference import import_voice_zip

    save_user_dict(ws, {"ቡና": ["b", "u", "n", "a"]})
    inference.export_voice(ws, CKPT, "almaz", vocoder=VOC)
    exported = ws.root / "exports" / "almaz.zip"
    other = Workspace.open(tmp_path / "other")
    said, picker = import_voice_zip(AppContext(workspace=other), str(exported))
    assert said.startswith(f"Imported voice almaz into {other.voices / 'almaz'}.") and "1 of them" in said
    assert "(ቡና)" in said and said.endswith("It is picked above (Voice or checkpoint): type Amharic and press **Speak**.")
    assert picker["value"] == "almaz" and ("almaz (exported voice)", "almaz") in picker["choices"]
    assert inference.list_voices(other) == ["almaz"] and not [p for p in other.voices.iterdir() if p.name[0] == "."]
    assert "in this workspace already (the same export)" in import_voice(other, exported)[1]
    out = tmp_path / "far.wav"
    third = tmp_path / "third"
    import app

    assert app.main(["synth", "--workspace", str(third), "--voice", str(exported), "--steps", "2", "ሰላም ነው።",
                     str(out)]) == 0  # in this process: a second one would load torch again for seconds
    assert sf.info(out).frames > 0 and inference.list_voices(Workspace.open(third)) == ["almaz"]
    with pytest.raises(StudioError, match="is a voice zip: import it first"):
        inference.synthesize(other, "exports/almaz.zip", "ሰላም")
    junk = tmp_path / "junk.zip"
    with zipfile.ZipFile(junk, "w") as zf:
        zf.writestr("notes/readme.txt", "no voice")
    with pytest.raises(StudioError, match="junk.zip holds no voice"):
        import_voice(other, junk)
    with pytest.raises(StudioError, match="Upload a voice zip"):
        import_voice_zip(AppContext(workspace=other), None)


def test_onnx_export_speaks_like_pytorch(ws):
    from utils.inference.onnx_voice import OnnxVoice, istft

    folder = inference.export_voice(ws, CKPT, "onnx-voice", vocoder=VOC, onnx=True, onnx_steps=3)
    assert (folder / "acoustic.onnx").exists() and (folder / "vocoder.onnx").exists()
    assert "OnnxVoice" in (folder / "README.md").read_text(encoding="utf-8")
    voice = OnnxVoice(folder)
    torch_voice = inference.Voice.load(folder)
    ids = torch_voice.tokenizer.encode("ሰላም ነው።")
    mel, length = voice.acoustic.run(None, {"tokens": np.array([ids]), "speaker": np.array([1]),
                                            "temperature": np.zeros(1, np.float32),
                                            "length_scale": np.ones(1, np.float32)})
    want = torch_voice.model.synthesise(ids, 1, n_steps=3, temperature=0.0)["mel"][0].numpy()
    np.testing.assert_allclose(mel[0, :, : int(length[0])], want, atol=1e-3)
    spec = torch.randn(513, 30, dtype=torch.complex64)
    np.testing.assert_allclose(istft(spec.abs().numpy(), spec.angle().numpy(), 1024, 256),
                               torch.istft(spec, 1024, 256, 1024, torch.hann_window(1024), center=True).numpy(),
                               atol=1e-4)
    wave, sr = voice.synthesize("ሰላም ነው። እንዴት ነህ?", speaker="almaz", temperature=0.0)
    assert sr == 24000 and len(wave) > 24000 * 0.3 and np.isfinite(wave).all()


def test_a_voice_trained_with_blanks_exports_to_onnx_that_intersperses_them_too(tmp_path):
    from utils.inference.onnx_voice import OnnxVoice

    ws = voice_workspace(tmp_path / "ws", add_blank=True)
    folder = inference.export_voice(ws, CKPT, "blank-voice", vocoder=VOC, onnx=True, onnx_steps=2)
    torch_voice = inference.Voice.load(folder)
    assert torch_voice.model.cfg.add_blank is True
    ids = torch_voice.tokenizer.encode("ሰላም ነው።")
    mel, length = OnnxVoice(folder).acoustic.run(None, {"tokens": np.array([ids]), "speaker": np.array([0]),
                                                        "temperature": np.zeros(1, np.float32),
                                                        "length_scale": np.ones(1, np.float32)})
    want = torch_voice.model.synthesise(ids, 0, n_steps=2, temperature=0.0)
    assert int(length[0]) == int(want["durations"].sum()) and len(want["durations"]) == len(ids)
    np.testing.assert_allclose(mel[0, :, : int(length[0])], want["mel"][0].numpy(), atol=1e-3)


def test_supplied_vocos_weights_are_checked_and_copied(ws, tmp_path):
    source = save_vocoder(Vocoder(PRESETS["tiny"]), tmp_path / "upload")
    files = [source / "model.safetensors", source / "config.json"]
    folder = inference.import_vocoder(ws, files, "my-vocos")
    assert "vocoders/my-vocos" in inference.list_vocoders(ws)
    assert (folder / "model.safetensors").read_bytes() == files[0].read_bytes()
    _, _, info = inference.synthesize(ws, CKPT, "ሰላም", steps=1, vocoder="vocoders/my-vocos")
    assert info["vocoder"] == "vocos (vocoders/my-vocos)"
    with pytest.raises(StudioError, match="config.yaml \\+ pytorch_model.bin"):
        inference.import_vocoder(ws, [files[1]], "half")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "pytorch_model.bin").write_bytes(b"not a checkpoint")
    # damaged, not dangerous: said so, of the file uploaded, not of its copy in a hidden folder
    with pytest.raises(StudioError, match=r"^the uploaded pytorch_model.bin could not be read as PyTorch weights: it "
                                          r"is damaged, cut short") as said:
        inference.import_vocoder(ws, [tmp_path / "bad" / "pytorch_model.bin"], "broken")
    assert ".tmp" not in str(said.value) and "run code" not in str(said.value)
    assert not (ws.root / "vocoders" / "broken").exists() and not (ws.root / "vocoders" / ".broken.tmp").exists()
    (tmp_path / "bad" / "config.yaml").write_text("x: 1\n")  # a YAML file, not a Vocos config
    with pytest.raises(StudioError, match=r"^the uploaded config.yaml is not a Vocos config.yaml: it has none of"):
        inference.import_vocoder(ws, [tmp_path / "bad" / "config.yaml", tmp_path / "bad" / "pytorch_model.bin"],
                                 "broken")


def test_pickers_separate_acoustic_checkpoints_from_vocoders(ws):
    assert inference.list_acoustic_checkpoints(ws) == [CKPT]
    assert inference.list_vocoders(ws) == [VOC]
    assert inference.speakers(ws, CKPT) == ["abebe", "almaz"]


@pytest.mark.parametrize("voice, speaker, text, message", [
    ("nobody", None, "ሰላም", "no voice, run or checkpoint"),
    (VOC, None, "ሰላም", "not an acoustic-model checkpoint"),
    ("../outside", None, "ሰላም", "outside the workspace"),
    (CKPT, "kebede", "ሰላም", "abebe, almaz"),
    (CKPT, None, "   ", "Type some Amharic"),
    (CKPT, None, "...", "no Amharic"),
    (CKPT, None, "። ፧ ።", "Nothing in the text"),
    (CKPT, None, "hello world 123!", "no Amharic \\(Ethiopic\\) letters"),
])
def test_bad_requests_get_clear_messages(ws, voice, speaker, text, message):
    with pytest.raises(StudioError, match=message):
        inference.synthesize(ws, voice, text, speaker=speaker, steps=1)


def test_a_voice_folder_outside_the_workspace_and_the_transcript_checks_aligner_are_named_helpfully(tmp_path):
    """An unzipped export given by path was told only "copy it into the workspace"; the voice list offered the
    transcript check's throwaway aligner as a run to speak with."""
    from utils.workspace import Workspace, atomic_write_json

    fresh = Workspace.open(tmp_path / "ws")
    (tmp_path / "unzipped" / "abebe-v1").mkdir(parents=True)
    with pytest.raises(StudioError, match=f"copy the folder into {fresh.voices} and give its name "
                                          r"\(--voice abebe-v1\)"):
        inference.synthesize(fresh, str(tmp_path / "unzipped" / "abebe-v1"), "ሰላም")
    for run in ("r1", "am-transcript-check"):
        atomic_write_json(fresh.run_dir(run) / "config.json", {"train": {"dataset": "am"}})
    with pytest.raises(StudioError, match=r"runs: r1\.$"):
        inference.synthesize(fresh, "nobody", "ሰላም")


@pytest.mark.parametrize("steps", [0, 101])
def test_steps_outside_one_to_a_hundred_are_refused_not_replaced_by_the_default(ws, steps):
    with pytest.raises(StudioError, match="Steps must be between 1 and 100"):
        inference.synthesize(ws, CKPT, "ሰላም", steps=steps)


def test_synth_cli_writes_a_wav_from_a_run_name_and_speaks_a_file(ws, tmp_path):
    run = ws.root / "runs" / "r1"
    out = tmp_path / "out.wav"
    common = [sys.executable, "app.py", "synth", "--workspace", str(ws.root), "--voice"]
    proc = subprocess.run(common + ["r1", "ሰላም ነው።", "--out", str(out), "--speed", "0.5"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    wave, sr = load_audio(out)
    assert sr == 24000 and len(wave) > 0 and "real-time factor" in proc.stdout and str(run.name) in proc.stdout
    assert "`" not in proc.stdout and "**" not in proc.stdout  # the tab's Markdown, as a terminal shows text
    lines = tmp_path / "lines.txt"
    lines.write_text("a|ሰላም\nb|ነው\n", encoding="utf-8")
    proc = subprocess.run(common + [CKPT, "--file", str(lines), "--steps", "1"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    with zipfile.ZipFile(proc.stdout.strip().splitlines()[-1].split("wrote ", 1)[1]) as zf:
        assert sorted(zf.namelist()) == ["a.wav", "b.wav", "manifest.csv"]
    # the zip goes where it is asked: the name after the options (argparse reads it as the text) or --out; both
    # were ignored and the zip went to exports/ in silence
    for where in ([str(tmp_path / "lines.zip")], ["--out", str(tmp_path / "named.zip")]):
        proc = subprocess.run(common + [CKPT, "--file", str(lines), "--steps", "1", *where], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and proc.stdout.strip().endswith(f"wrote {where[-1]}"), proc.stderr
        with zipfile.ZipFile(where[-1]) as zf:
            assert sorted(zf.namelist()) == ["a.wav", "b.wav", "manifest.csv"]
    proc = subprocess.run(common + [CKPT, "--file", str(lines), str(tmp_path / "out.wav")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "name a .zip or a folder" in proc.stderr
    bad = subprocess.run(common + ["nobody", "ሰላም"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "no voice, run or checkpoint called 'nobody'" in bad.stderr + bad.stdout


def test_export_voice_cli(ws):
    proc = subprocess.run([sys.executable, "app.py", "export-voice", "--workspace", str(ws.root), CKPT, "v2",
                           "--vocoder", VOC], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (ws.voices / "v2" / "vocoder" / "config.json").exists() and (ws.root / "exports" / "v2.zip").exists()
    assert "Voice.load" in proc.stdout


def test_inference_tab_builds_and_its_handlers_speak_compare_and_export(ws):
    import gradio as gr

    from webui import inference as tab
    from webui.context import AppContext

    ctx = AppContext(workspace=ws)
    with gr.Blocks() as demo:
        tab.build(ctx)
    api_names = {getattr(fn, "api_name", None) for fn in demo.fns.values()}
    assert {"speak", "compare", "speak_file", "export_voice", "add_vocoder", "inference_refresh", "import_voice"} <= api_names
    steps = list(tab.speak(ctx, CKPT, "almaz", "ሰላም ነው። እንዴት ነህ?", 2, 0.667, 1.0, tab.AUTO_VOCODER, "auto", 0))
    (sr, first), *_ = steps[0]
    _, wav, image, info, rows = steps[-1]
    assert sr == 24000 and len(first) > 0 and "real-time factor" in info and image.shape[2] == 3
    assert load_audio(wav)[0].shape[0] > len(first) and rows[1][1] == "እንዴት ነህ?"
    a, info_a, b, info_b = tab.compare(ctx, CKPT, CKPT, "ሰላም", "almaz", 2, 0.667, 1.0, tab.AUTO_VOCODER, 3)
    np.testing.assert_array_equal(a[1], b[1])  # same checkpoint, same seed: the same audio
    msg, zip_path = tab.export(ctx, CKPT, "v1", VOC, False, False, 10)
    assert "Exported" in msg and zip_path.endswith("v1.zip")
    with pytest.raises(gr.Error, match="nobody"):
        list(tab.speak(ctx, "nobody", None, "ሰላም", 2, 0.667, 1.0, tab.AUTO_VOCODER, "auto", 0))


def test_a_refused_speak_clears_the_speech_of_the_text_before(ws):
    """"hello 😀" was refused ("no Amharic letters") while the last sentence's sound, WAV, spectrogram and table
    stayed up, as if they were this text's."""
    import gradio as gr

    from webui import inference as tab
    from webui.context import AppContext

    with gr.Blocks() as demo:
        tab.build(AppContext(workspace=ws))
    speak = next(fn.fn for fn in demo.fns.values() if getattr(fn, "api_name", None) == "speak")
    audio, wav, image, info, rows = list(speak(CKPT, "abebe", "hello 😀", 2, 0.667, 1.0, tab.AUTO_VOCODER, "auto",
                                               0))[-1]
    assert info.startswith("**Not done:**") and "Amharic" in info
    assert (wav, image, rows) == (None, None, None)
    # emptied; a streamed player (ffmpeg here) goes, as it showed 'pause 0:00 / 0:00' as if a stream were coming
    assert audio == {"__type__": "update", "value": None, "visible": not tab.can_stream_audio()}
    # Stop cancels the speech and says so: the line read "Speaking… 17/133 sentences" for good after it
    deps = demo.config["dependencies"]
    speak_id = next(d["id"] for d in deps if d.get("api_name") == "speak")
    stop = next(d for d in deps if speak_id in (d.get("cancels") or []))
    said = [demo.fns[d["id"]] for d in deps if d["targets"] == stop["targets"] and d.get("outputs")]
    assert [(fn.fn(), [o.elem_id for o in fn.outputs]) for fn in said] == [(tab.STOPPED, ["inference-info"])]


def test_the_voice_picker_starts_on_the_best_voice_not_the_newest(ws):
    """Three finished walks: the picker started on walk-c (written last, MCD 13.53 dB) over walk-a (7.53 dB)."""
    import json
    import os
    import shutil

    for i, (name, mcd) in enumerate((("walk-a", 7.53), ("walk-b", 9.1), ("walk-c", 13.53))):
        step = ws.run_dir(name) / "checkpoints" / "step-10"
        shutil.copytree(ws.root / CKPT, step)
        status = ws.run_dir(name) / "status.json"
        status.write_text(json.dumps({"state": "finished", "best_checkpoint": str(step), "best_mcd": mcd}))
        os.utime(status, (2_000_000_000 + i, 2_000_000_000 + i))  # walk-c last, after r1 and voc
    assert inference.default_voice(ws) == "runs/walk-a/checkpoints/step-10"
    inference.export_voice(ws, "runs/walk-c/checkpoints/step-10", "chosen")
    os.utime(ws.voice_dir("chosen"), (2_000_000_100, 2_000_000_100))
    assert inference.default_voice(ws) == "chosen"  # a voice exported after every run is the curator's own pick


def test_the_line_under_the_pickers_names_the_vocoder_that_will_speak(ws):
    """A trained vocoder picked: the line said the voice buzzes from Griffin-Lim while Speak used the vocoder."""
    assert "buzzy because Griffin-Lim" in inference.vocoder_note(ws, CKPT, "auto")  # no default vocoder here
    picked = inference.vocoder_note(ws, CKPT, VOC)
    assert f"{VOC} (trained here)" in picked and "buzzy" not in picked
    assert "Griffin-Lim" in inference.vocoder_note(ws, CKPT, inference.GRIFFIN_LIM)
    inference.export_voice(ws, CKPT, "own", vocoder=VOC)
    assert "the voice's own" in inference.vocoder_note(ws, "own", "auto")
    assert "buzzy because" in inference.vocoder_note(ws, None, "auto")


@pytest.mark.parametrize("ffmpeg", [True, False], ids=["streamed", "without-ffmpeg"])
def test_speak_compare_and_batch_through_gradio_client(ws, tmp_path, monkeypatch, ffmpeg):
    from gradio_client import handle_file

    from tests.helpers import serve_tab
    from webui import inference as tab

    assert tab.can_stream_audio(), "tests/run.sh installs ffmpeg, which Gradio needs to stream audio"
    if not ffmpeg:  # a machine without ffmpeg: the player gets the whole speech at the end
        monkeypatch.setattr(tab, "can_stream_audio", lambda: False)

    lines = tmp_path / "lines.txt"
    lines.write_text("ሰላም ነው።\nእንዴት ነህ?\n", encoding="utf-8")
    with serve_tab(tab, ws, "Inference") as client:
        job = client.submit(CKPT, "abebe", "ሰላም ነው። እንዴት ነህ?", 2, 0.667, 1.0, tab.AUTO_VOCODER, "auto", 0,
                            api_name="/speak")
        _, wav, _, info, rows = job.result()
        played = [out[0] for out in job.outputs()]  # what the player got at each update
        zip_path, report = client.predict(CKPT, "abebe", handle_file(str(lines)), 1, 0.667, 1.0, tab.AUTO_VOCODER,
                                          "cpu", 0, api_name="/speak_file")
    wave, sr = load_audio(wav)
    if ffmpeg:  # each sentence reaches the player as soon as it is made, before the whole text is done
        assert [isinstance(p, str) for p in played] == [True, True, False], played
    else:  # nothing until the end, then the whole speech
        assert [isinstance(p, str) for p in played] == [False, False, True], played
        assert len(load_audio(played[-1])[0]) == len(load_audio(wav)[0])
    assert sr == 24000 and len(wave) > 0 and "real-time factor" in info and [r[1] for r in rows["data"]] == ["ሰላም ነው።", "እንዴት ነህ?"], rows
    assert "**2** WAV(s)" in report and zipfile.is_zipfile(zip_path)


@pytest.mark.parametrize("frames", [2, 3, 4])
def test_griffin_lim_speaks_a_one_syllable_utterance(frames):
    from utils.vocoder import griffin_lim

    wave = griffin_lim(torch.randn(100, frames) - 5)
    assert wave.shape == (256 * (frames - 1),) and np.isfinite(wave).all()


def test_an_export_left_unnamed_takes_its_runs_name_as_the_training_tab_does(tmp_path):
    """The Training tab exported an unnamed voice under its run's name; the Inference tab refused the same."""
    from webui import inference as tab
    from webui.context import AppContext

    ws = voice_workspace(tmp_path / "ws")
    said, zip_path = tab.export(AppContext(ws), CKPT, "  ", inference.GRIFFIN_LIM, False, False, 2)
    assert (ws.voices / "r1").is_dir() and zip_path.endswith("r1.zip") and "pick **r1** above" in said
    # the run's name now speaks the voice (a voice comes first): said, as the run may train on
    assert "The name r1 is also its run's: picking r1 (or --voice r1) now speaks this voice" in said
    assert inference.resolve_voice(ws, "r1") == ws.voices / "r1"
    said, _ = tab.export(AppContext(ws), CKPT, "abebe", inference.GRIFFIN_LIM, False, False, 2)
    assert "also its run's" not in said
    assert tab.run_of(ws, "r1") == "r1" and tab.run_of(ws, "some-voice") == ""
    # the Training tab's Export as voice, pressed again for the run's later best, replaces what it exported (that tab
    # has no Overwrite box, and the refusal sent the curator to one); a voice from another run of that name stays
    from utils.inference.export import exported_from_run

    assert exported_from_run(ws, "r1", "r1") and exported_from_run(ws, "abebe", "r1")
    assert not exported_from_run(ws, "r1", "other") and not exported_from_run(ws, "nobody", "r1")
    with pytest.raises(StudioError, match="'Overwrite a voice of that name' under the Inference tab's Export a voice"):
        inference.export_voice(ws, CKPT, "r1")
    import gradio as gr

    from webui import training

    with gr.Blocks() as demo:
        training.build(AppContext(ws))
    press = next(fn.fn for fn in demo.fns.values() if getattr(fn, "api_name", None) == "training_export_voice")
    assert "Saved voice **r1** (from `step-10`, in place of the one exported from this run before)" in press("r1", "")


def test_a_refused_export_takes_the_zip_of_the_one_before_away(tmp_path):
    """Export, then Export again under the same name: "Not done: A voice called r1 exists already" stood under the
    first export's zip, which read as this attempt's."""
    from webui import inference as tab

    ws = voice_workspace(tmp_path / "ws")
    with serve_tab(tab, ws, "Inference") as client:
        said, zipped = client.predict(CKPT, "r1", inference.GRIFFIN_LIM, False, False, 2, api_name="/export_voice")
        assert zipped and zipped.endswith("r1.zip") and "pick **r1** above" in said
        said, zipped = client.predict(CKPT, "r1", inference.GRIFFIN_LIM, False, False, 2, api_name="/export_voice")
    assert said.startswith("**Not done:** A voice called r1 exists already") and zipped is None


def test_ab_starts_on_two_models_never_a_voice_and_the_checkpoint_it_was_exported_from(tmp_path):
    """A/B started on an exported voice and its own checkpoint: the same sound twice, as if the curator's two runs
    had been compared. B takes the first voice that is another model."""
    from webui import inference as tab
    from webui.context import AppContext

    ws = voice_workspace(tmp_path / "ws")
    inference.export_voice(ws, CKPT, "abebe", vocoder=inference.GRIFFIN_LIM)
    values = [v for _, v in inference.voice_choices(ws)]
    assert values == ["abebe", CKPT]  # a voice and the one checkpoint it came from: nothing else to compare
    assert inference.other_voice(ws, "abebe", values) == "abebe" and inference.other_voice(ws, CKPT, values) == CKPT
    other = CKPT.replace("step-10", "step-5")
    shutil.copytree(ws.root / CKPT, ws.root / other)
    values = [v for _, v in inference.voice_choices(ws)]
    assert values == ["abebe", CKPT, other]
    assert inference.other_voice(ws, "abebe", values) == other and inference.other_voice(ws, CKPT, values) == other
    assert inference.other_voice(ws, other, values) == "abebe"
    with gr.Blocks() as demo:
        tab.build(AppContext(ws))
    a, b = (next(c for c in demo.blocks.values() if getattr(c, "elem_id", None) == f"inference-ab-{k}") for k in "ab")
    assert (a.value, b.value) == ("abebe", other)


def test_a_one_speaker_voice_exports_to_onnx_from_the_cli_and_speaks_through_onnx_runtime(tiny_runs_copy):
    import onnxruntime as ort

    from utils.inference.onnx_voice import OnnxVoice

    ws = tiny_runs_copy
    assert read_json(ws.run_dir("one") / "checkpoints" / "step-2" / "config.json")["speakers"] == ["am"]
    proc = cli("export-voice", "one", "solo", "--onnx", "--onnx-steps", "2", "--vocoder", "griffin-lim",
            "--workspace", str(ws.root))
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = ws.voice_dir("solo")
    session = ort.InferenceSession(str(folder / "acoustic.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["tokens", "temperature", "length_scale"]  # no speaker table
    wave, sr = OnnxVoice(folder).synthesize("ሰላም ነው። ዛሬ ጥሩ ቀን ነው።")
    assert sr == 24000 and len(wave) > 0.1 * sr and np.isfinite(wave).all()
    assert "speaker=" not in (folder / "README.md").read_text(encoding="utf-8")  # the snippet passes none


def test_amharic_names_work_for_runs_voices_their_zip_and_the_tabs_urls(tiny_runs_copy):
    from utils import inference
    from utils.workspace import check_name
    from webui import inference as tab

    ws = tiny_runs_copy
    assert check_name("ሰላም-ድምፅ_2") == "ሰላም-ድምፅ_2"
    with pytest.raises(StudioError, match="Latin or Amharic letters"):
        check_name("ሰላም።")  # Ethiopic punctuation is not a letter
    with pytest.raises(StudioError, match="^Type or pick a voice name first.$"):  # not "The voice name '' cannot be used"
        check_name("  ", "voice name")
    path = prepare_run(tiny_matcha_config(ws, "ሙከራ-1", max_steps=1))
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


def test_the_voice_picker_starts_on_the_active_runs_best_checkpoint_else_its_newest(tiny_runs, tmp_path):
    from utils import inference
    from utils.jobs import machine_id
    from utils.runs import control

    ws = tiny_runs
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


def test_the_speed_of_speech_is_said_in_seconds_of_computing_a_second_of_speech():
    """"(real-time factor 2.019; ...)": a number with no unit and no meaning for a curator."""
    from utils.inference.speech import describe

    info = {"duration_s": 2.0, "sample_rate": 24000, "seconds": 4.04, "rtf": 2.019, "device": "cpu", "spoken": 1,
            "tokens": 9, "vocoder": "griffin-lim"}
    assert "made in 4.04 s: 2.0 s of computing for each second of speech (real-time factor 2.02;" in describe(info)
    assert "4.0x faster than it plays (real-time factor 0.25;" in describe({**info, "rtf": 0.25})


def test_a_workspace_moved_elsewhere_keeps_its_runs_best_checkpoint(tiny_runs, tiny_runs_copy):
    """status.json names the best checkpoint by the path where the run trained: in a workspace copied or moved
    (Drive to the local disk, another mount) the best was not found, so the newest was spoken and exported in its
    place (the Training tab's export took the old place's checkpoint itself), and no choice was marked best."""
    from utils.voice_folders import best_checkpoint

    ws = tiny_runs_copy
    status_file = ws.run_dir("one") / "status.json"
    status = read_json(status_file)
    old_place = tiny_runs.run_dir("one") / "checkpoints" / "step-1"  # the best, where the run trained: not the newest
    atomic_write_json(status_file, {**status, "best_checkpoint": str(old_place), "best_mcd": 12.5})
    mine = ws.run_dir("one") / "checkpoints" / "step-1"
    assert best_checkpoint(ws, "one") == mine and inference.resolve_voice(ws, "one") == mine
    labels = dict((v, label) for label, v in inference.voice_choices(ws))
    assert labels[str(mine.relative_to(ws.root))] == "one · step 1 · best, MCD 12.50 dB"
