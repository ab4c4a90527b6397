"""The F5-TTS engine on the shared trainer, on the CPU with tiny F5 configurations: a few real training steps on
espeak-ng Amharic, exact resume, fine-tuning from a base folder in the public layout (the same loading code a
download takes), the new text rows' starting point, and the licence's yes before any download."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from tests.helpers import make_dataset
from utils.events import StudioError
from utils.f5.text import F5Text, latin_spelling
from utils.training import TrainConfig, prepare_run, run
from utils.training.checkpoint import load_trainer_state, read_config
from utils.workspace import Workspace, read_jsonl

BASE_SYMBOLS = [" ", ",", ".", "?", "!", *"abcdefghijklmnopqrstuvwxyz", "ni", "hao"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Workspace:
    return make_dataset(tmp_path_factory.mktemp("ws"), n_train=4, n_val=1, voices=("am",), max_chars=30)


def f5_config(ws: Workspace, run_name: str, **kw) -> TrainConfig:
    base = dict(workspace=str(ws.root), dataset="am", run=run_name, engine="f5", preset="tiny", max_steps=4,
                warmup_steps=1, log_every=1, eval_every=0, checkpoint_every=2, keep_checkpoints=3,
                grad_accumulation=1, max_frames_per_batch=600, eval_clips=1, sample_clips=1, ode_steps=2,
                ema_decay=0.9, eval_vocoder="griffin-lim")
    return TrainConfig(**{**base, **kw})


def public_base(folder: Path) -> Path:
    """A tiny random F5 saved as the public files are: EMA weights under "ema_model." in a .safetensors, and
    vocab.txt (one symbol a line)."""
    from models.f5 import PRESETS, F5Config, F5TTS

    folder.mkdir(parents=True, exist_ok=True)
    model = F5TTS(F5Config.from_dict({**PRESETS["tiny"].to_dict(), "text_num_embeds": len(BASE_SYMBOLS)}))
    save_file({f"ema_model.{k}": v.contiguous() for k, v in model.state_dict().items()},
              str(folder / "model_1250000.safetensors"))
    (folder / "vocab.txt").write_text("\n".join(BASE_SYMBOLS) + "\n", encoding="utf-8")
    return folder


def losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r}


def test_a_tiny_f5_trains_evaluates_and_resumes_onto_the_same_curve(corpus):
    straight = run(prepare_run(f5_config(corpus, "f5-straight", eval_every=4)))
    assert straight["state"] == "finished" and straight["step"] == 4
    curve = losses(corpus.run_dir("f5-straight"))
    assert sorted(curve) == [1, 2, 3, 4] and all(torch.isfinite(torch.tensor(list(curve.values()))))
    evaluation = [r for r in read_jsonl(corpus.run_dir("f5-straight") / "metrics.jsonl") if "mcd" in r]
    assert evaluation and evaluation[-1]["mcd"] > 0 and evaluation[-1]["val_loss"] > 0
    assert any((corpus.run_dir("f5-straight") / "samples" / "step-4").glob("*.wav"))
    saved = read_config(corpus.run_dir("f5-straight") / "checkpoints" / "step-4")
    assert saved["engine"] == "f5" and saved["text"]["kind"] == "phoneme" and "ə" in saved["text"]["symbols"]
    assert saved["features"]["log_floor"] == 1e-5

    first = run(prepare_run(f5_config(corpus, "f5-resumed", max_steps=2, eval_every=4)))
    assert first["step"] == 2
    second = run(prepare_run(f5_config(corpus, "f5-resumed", eval_every=4)))
    assert second["state"] == "finished" and second["step"] == 4
    resumed = losses(corpus.run_dir("f5-resumed"))
    for step in (1, 2, 3, 4):  # the schedule is the same (max_steps 4 both times for steps 3-4): same losses
        assert resumed[step] == pytest.approx(curve[step], rel=1e-5, abs=1e-6), step


def test_fine_tuning_from_a_base_in_the_public_layout_grows_the_text_table(corpus, tmp_path):
    base = public_base(corpus.root / "pretrained" / "mini-base")
    result = run(prepare_run(f5_config(corpus, "f5-finetune", init=str(base), max_steps=2)))
    assert result["state"] == "finished"
    saved = read_config(corpus.run_dir("f5-finetune") / "checkpoints" / "step-2")
    symbols = saved["text"]["symbols"]
    assert symbols[: len(BASE_SYMBOLS)] == BASE_SYMBOLS and saved["text"]["base_size"] == len(BASE_SYMBOLS)
    assert "ə" in symbols[len(BASE_SYMBOLS):]  # Amharic symbols added after the base's, none moved
    state = load_trainer_state(corpus.run_dir("f5-finetune") / "checkpoints" / "step-2")
    table = state["modules"]["model"]["transformer.text_embed.text_embed.weight"]
    assert table.shape[0] == len(symbols) + 1
    log = (corpus.run_dir("f5-finetune") / "train.log").read_text()
    assert "fine-tune: starting from the pretrained F5-TTS base" in log and "symbols added" in log


def test_new_rows_start_from_their_latin_spelling():
    from models.f5 import PRESETS, F5Config, F5TTS
    from utils.f5.base import _grow

    text = F5Text(symbols=list(BASE_SYMBOLS), base_size=len(BASE_SYMBOLS))
    model = F5TTS(F5Config.from_dict({**PRESETS["tiny"].to_dict(), "text_num_embeds": len(BASE_SYMBOLS)}))
    before = model.transformer.text_embed.text_embed.weight.detach().clone()
    added = text.grow(["ሸ ጥሩ"])  # ʃ ə, tʼ ɨ r u
    _grow(model, text, added, log=lambda m: None)
    table = model.transformer.text_embed.text_embed.weight.detach()
    assert torch.equal(table[: before.shape[0]], before)  # no old row moved
    row = lambda s: table[text.symbols.index(s) + 1]  # noqa: E731  (+1: row 0 is the filler)
    old = lambda s: before[BASE_SYMBOLS.index(s) + 1]  # noqa: E731
    assert latin_spelling("ʃ") == "sh"
    assert torch.allclose(row("ʃ"), (old("s") + old("h")) / 2)
    assert torch.allclose(row("ɨ"), old("i")) and torch.allclose(row("ə"), old("e"))
    assert torch.allclose(row("tʼ"), old("t"))  # the ejective mark has no Latin letter


def test_the_public_base_is_downloaded_only_after_a_yes_to_its_licence(corpus, monkeypatch):
    cfg = f5_config(corpus, "f5-hub", init="SWivid/F5-TTS", preset="small")
    with pytest.raises(StudioError, match="CC-BY-NC-4.0.*--accept-licence"):
        prepare_run(cfg)
    assert not (corpus.root / "pretrained" / "f5tts-v1-base").exists()
    path = prepare_run(f5_config(corpus, "f5-hub", init="SWivid/F5-TTS", preset="small"), accept_licence=True)
    assert path.exists()  # accepted: the trainer downloads it in its own process (offline here: a clear failure)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(StudioError, match="Could not download the F5-TTS base from SWivid/F5-TTS"):
        run(path)


def test_a_folder_that_is_not_a_base_and_a_mismatched_file_are_refused(corpus, tmp_path):
    empty = corpus.root / "pretrained" / "empty"
    empty.mkdir(parents=True, exist_ok=True)
    with pytest.raises(StudioError, match="is not an F5-TTS base: it needs a model file"):
        prepare_run(f5_config(corpus, "f5-empty", init=str(empty)))
    broken = public_base(corpus.root / "pretrained" / "broken")
    weights = broken / "model_1250000.safetensors"
    from safetensors.torch import load_file

    state = load_file(str(weights))
    key = next(k for k in state if k.endswith("proj_out.weight"))
    state[key] = torch.zeros(3, 3)
    save_file(state, str(weights))
    with pytest.raises(StudioError, match="proj_out"):
        run(prepare_run(f5_config(corpus, "f5-broken", init=str(broken), max_steps=1)))
    assert os.path.exists(weights)  # nothing the user gave is removed


def test_an_f5_run_speaks_through_its_prompt_exports_and_speaks_from_the_cli(corpus):
    import subprocess
    import sys

    from utils.inference import Voice
    from utils.inference.export import export_voice

    run(prepare_run(f5_config(corpus, "f5-voice", max_steps=2)))
    folder = corpus.run_dir("f5-voice") / "checkpoints" / "step-2"
    voice = Voice.load(folder)
    wave, sr, info = voice.synthesize("ሰላም ነው። ዛሬ ጥሩ ቀን ነው።", steps=2)
    assert sr == 24000 and info["spoken"] == 2 and len(wave) > sr * 0.1 and float(abs(wave).max()) > 0
    assert "ə" in info["rows"][0]["phonemes"]
    exported = export_voice(corpus, "f5-voice", "f5-abebe", vocoder="griffin-lim")
    again, _, _ = Voice.load(exported).synthesize("ሰላም ነው።", steps=2)
    assert len(again) > 0
    with pytest.raises(StudioError, match="ONNX export is for Matcha voices"):
        export_voice(corpus, "f5-voice", "f5-onnx", vocoder="griffin-lim", onnx=True)
    out = corpus.root / "f5.wav"
    proc = subprocess.run([sys.executable, "app.py", "synth", "ሰላም ነው።", "--voice", "f5-abebe", "--out", str(out),
                           "--workspace", str(corpus.root), "--steps", "2", "--vocoder", "griffin-lim"],
                          cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert out.stat().st_size > 1000


def test_the_training_tab_asks_for_the_licence_and_a_usable_clip_then_queues_the_fine_tune(corpus):
    """The tab's F5 start fine-tunes the pretrained base (whatever size is ticked for Matcha): no download without the
    licence's yes, a reference clip the dataset lacks refused before anything is queued, then a queued job, which
    here, offline, ends saying it could not download the base."""
    import time

    from tests.helpers import serve_tab
    from utils import jobs
    from webui import training as tab

    with serve_tab(tab, corpus, "Training") as client:
        refused = client.predict("am", "tiny", "", 2, "(from scratch)", "full", False, "f5", False, "",
                                 api_name="/start_training")
        assert "CC-BY-NC-4.0" in str(refused[0]) and "licence" in str(refused[0])
        assert not (corpus.root / "pretrained" / "f5tts-v1-base").exists()
        wrong = client.predict("am", "tiny", "f5-typo", 2, "(from scratch)", "full", False, "f5", True, "nope",
                               api_name="/start_training")
        assert "F5 reference clip 'nope': dataset am has no usable row with that id" in str(wrong[0])
        assert not (corpus.run_dir("f5-typo") / "config.json").exists()  # refused before anything was queued
        prompt = next(r["id"] for r in read_jsonl(corpus.dataset_dir("am") / "manifest.jsonl") if r["split"] == "train")
        started = client.predict("am", "tiny", "f5-tab", 2, "(from scratch)", "full", False, "f5", True, prompt,
                                 api_name="/start_training")
        assert "f5-tab" in str(started[0])
    config = read_config(corpus.run_dir("f5-tab"))
    assert config["train"]["init"] == "SWivid/F5-TTS" and config["train"]["prompt"] == prompt
    assert "CC-BY-NC-4.0" in config["train"]["licence_accepted"]
    end = time.time() + 240
    while jobs.reconcile(corpus.run_dir("f5-tab")).get("state") not in jobs.FINAL and time.time() < end:
        time.sleep(0.5)
    status = jobs.read_status(corpus.run_dir("f5-tab"))
    assert status["state"] == "failed" and "Could not download the F5-TTS base from SWivid/F5-TTS" in status["message"]


def test_a_tiny_f5_job_runs_to_the_end_through_the_job_service_with_the_chosen_clip(corpus):
    import time

    from utils import jobs, runs

    prompt = next(r["id"] for r in read_jsonl(corpus.dataset_dir("am") / "manifest.jsonl") if r["split"] == "train")
    runs.start_training(corpus, "am", "tiny", "f5-job", engine="f5", max_steps=2,
                        overrides={"prompt": prompt, "max_frames_per_batch": 600, "grad_accumulation": 1,
                                   "eval_vocoder": "griffin-lim", "ode_steps": 2, "eval_clips": 1})
    end = time.time() + 240
    while jobs.reconcile(corpus.run_dir("f5-job")).get("state") not in jobs.FINAL and time.time() < end:
        time.sleep(0.5)
    status = jobs.read_status(corpus.run_dir("f5-job"))
    assert status["state"] == "finished", (corpus.run_dir("f5-job") / "train.log").read_text()[-2000:]
    saved = read_config(corpus.run_dir("f5-job") / "checkpoints" / "step-2")
    assert status["kind"] == "f5" and saved["engine"] == "f5" and saved["prompt"]["id"] == prompt
