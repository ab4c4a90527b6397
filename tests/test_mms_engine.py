"""The MMS-TTS engine on the shared trainer, on the CPU with a tiny random VITS saved as facebook/mms-tts-amh
publishes its files (tests/mms_fixtures.py) and espeak-ng Amharic: a fine-tune that trains, evaluates (held-out
MCD of sentences spoken from text) and resumes onto the same curve; the discriminator from the original VITS
checkpoint, or random with a warning; out-of-memory recovery and the mixed-precision fallback; the base's download
only after the licence's yes, from the hub's cache (the network stand-in), and offline the files and folder to put
them in; speaking at 16 kHz through the studio's Voice, A/B against a Matcha voice, a text file to a zip, export
with the licence; the CLI end to end (train -> export -> synth); the Training, Inference and G2P tabs' words for
it; the job service and two DDP processes; and the requests it refuses."""
from __future__ import annotations

import re

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import soundfile as sf
import torch

from tests.helpers import make_dataset
from tests.mms_fixtures import tiny_base
from utils.events import StudioError
from utils.training import TrainConfig, prepare_run, run
from utils.training.checkpoint import read_config, step_folders
from utils.workspace import Workspace, read_jsonl

ROOT = Path(__file__).resolve().parents[1]
BASE = "pretrained/tiny-mms"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Workspace:
    ws = make_dataset(tmp_path_factory.mktemp("ws"), n_train=4, n_val=1, voices=("am",), max_chars=30)
    tiny_base(ws.root / BASE)
    return ws


def mms_config(ws: Workspace, run_name: str, **kw) -> TrainConfig:
    base = dict(workspace=str(ws.root), dataset="am", run=run_name, engine="mms", init=BASE, max_steps=4,
                log_every=1, eval_every=0, checkpoint_every=2, keep_checkpoints=3, eval_clips=1, sample_clips=1,
                ema_decay=0.9)
    return TrainConfig.from_dict({**base, **kw})  # a family's own settings by name too


def curve(run_dir: Path) -> dict[int, tuple]:
    return {r["step"]: (r["loss_d"], r["loss_g"]) for r in read_jsonl(run_dir / "metrics.jsonl") if "loss_g" in r}


def app(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "app.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def mms_voice(corpus) -> Path:
    """A two-step fine-tune with a checkpoint at each step (two checkpoints to compare); its run folder."""
    assert run(prepare_run(mms_config(corpus, "mms-voice", max_steps=2, checkpoint_every=1)))["state"] == "finished"
    return corpus.run_dir("mms-voice")


def test_a_fine_tune_trains_evaluates_and_resumes_onto_the_same_curve(corpus):
    from safetensors.torch import load_file
    from transformers import VitsConfig, VitsModel

    straight = run(prepare_run(mms_config(corpus, "mms-straight", eval_every=4)))
    assert straight["state"] == "finished" and straight["step"] == 4
    run_dir = corpus.run_dir("mms-straight")
    losses = curve(run_dir)
    assert sorted(losses) == [1, 2, 3, 4] and all(torch.isfinite(torch.tensor(v)).all() for v in losses.values())
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert set(metrics[0]) == {"step", "start_s", "time"} and metrics[0]["step"] == 0  # the loading, timed
    assert "mcd" in metrics[1] and "loss_mel" not in metrics[1] and metrics[1]["step"] == 0  # the base's own score
    assert {"loss_mel", "loss_kl", "loss_dur", "loss_adv", "loss_fm"} <= set(metrics[2])
    evaluation = [r for r in metrics if "mcd" in r]
    assert evaluation and evaluation[-1]["mcd"] > 0 and {"mcd_ema", "mcd_raw"} <= set(evaluation[-1])
    sample = next((run_dir / "samples" / "step-4").glob("*.wav"))
    assert sf.info(str(sample)).samplerate == 16_000
    log = (run_dir / "train.log").read_text()
    assert "fine-tune: starting from the MMS-TTS base" in log and "discriminator: D_100000.pth" in log

    folder = run_dir / "checkpoints" / "step-4"
    saved = read_config(folder)
    assert saved["engine"] == "mms" and saved["features"]["sample_rate"] == 16_000 and "CC-BY-NC-4.0" in saved["licence"]
    vits = VitsModel(VitsConfig(**{k: v for k, v in saved["model"].items() if k != "transformers_version"}))
    vits.load_state_dict(load_file(str(folder / "model.safetensors")))  # transformers' own model, every weight
    onward = run(prepare_run(mms_config(corpus, "mms-onward", init="mms-straight", max_steps=1, evaluate=False)))
    assert onward["state"] == "finished"  # a fine-tune of this studio continued by name, its discriminator too
    log = (corpus.run_dir("mms-onward") / "train.log").read_text()
    assert "starting from the MMS fine-tune" in log and "discriminator: trainer_state.pt" in log

    first = run(prepare_run(mms_config(corpus, "mms-resumed", max_steps=2, eval_every=4)))
    assert first["step"] == 2
    second = run(prepare_run(mms_config(corpus, "mms-resumed", eval_every=4)))
    assert second["state"] == "finished" and second["step"] == 4
    resumed = curve(corpus.run_dir("mms-resumed"))
    for step in (1, 2, 3, 4):
        assert resumed[step] == pytest.approx(losses[step], rel=1e-5, abs=1e-6), step


def test_without_a_discriminator_file_it_starts_from_random_ones_and_says_what_that_costs(corpus):
    tiny_base(corpus.root / "pretrained" / "no-d", discriminator=False)
    result = run(prepare_run(mms_config(corpus, "mms-no-d", init="pretrained/no-d", max_steps=1, evaluate=False)))
    assert result["state"] == "finished"
    log = (corpus.run_dir("mms-no-d") / "train.log").read_text()
    assert "discriminators start from random weights" in log and "slower, less stable start" in log


def test_out_of_memory_splits_the_batch_and_failing_mixed_precision_goes_on_in_fp32(corpus):
    result = run(prepare_run(mms_config(corpus, "mms-faults", precision="bf16", fault_oom_above_frames=200,
                                        fault_nan_steps=[0, 1], max_bad_steps=2, evaluate=False)))
    assert result["state"] == "finished" and result["step"] == 4
    log = (corpus.run_dir("mms-faults") / "train.log").read_text()
    assert "out of memory at step 1: micro-batch halved (each batch now in 2 parts)" in log
    assert "continuing in fp32 from the last good weights" in log
    steps = [r for r in read_jsonl(corpus.run_dir("mms-faults") / "metrics.jsonl") if "loss_g" in r]
    assert [r["step"] for r in steps][-2:] == [3, 4] and all(torch.isfinite(torch.tensor(r["loss_g"])) for r in steps[-2:])


def test_after_an_out_of_memory_split_each_pieces_generator_forward_runs_once(corpus, monkeypatch):
    """Phase by phase, the discriminator's pass kept only the last piece's generator output and the generator's
    first piece let it go: every piece's forward ran twice (up to 2x slower for the rest of the run). Several
    micro-batches now go through both phases one at a time, as finetune-hf-vits accumulates."""
    from utils.mms.adapter import MmsAdapter

    seen, forward, losses = [], MmsAdapter._forward, MmsAdapter.losses
    monkeypatch.setattr(MmsAdapter, "losses", lambda self, batch, phase, step: (
        seen.append(("step", step)), losses(self, batch, phase, step))[1])
    monkeypatch.setattr(MmsAdapter, "_forward", lambda self, batch: (seen.append(("forward",)), forward(self, batch))[1])
    result = run(prepare_run(mms_config(corpus, "mms-split", fault_oom_above_frames=200, max_steps=3, evaluate=False)))
    assert result["state"] == "finished"
    assert "micro-batch halved (each batch now in 2 parts)" in (corpus.run_dir("mms-split") / "train.log").read_text()
    forwards, calls, step = {}, {}, None
    for event in seen:
        if event[0] == "step":
            step = event[1]
            calls[step] = calls.get(step, 0) + 1
        else:
            forwards[step] = forwards.get(step, 0) + 1
    assert calls[2] >= 4 and forwards[2] == calls[2] // 2, (forwards, calls)  # two phases, one forward per piece


def test_an_mms_voice_speaks_at_16_khz_beside_a_matcha_voice_in_batch_and_exports_with_its_licence(corpus, mms_voice):
    from utils import inference
    from webui.context import AppContext
    from webui.inference import compare, engine_settings

    from utils.runs import views

    assert {r["run"]: r for r in views.run_table(corpus)}["mms-voice"]["preset"] == "MMS-TTS"  # the run list's size
    folder = mms_voice / "checkpoints" / "step-2"
    voice = inference.Voice.load(folder)
    wave, sr, info = voice.synthesize("ሰላም ነው። ዛሬ ጥሩ ቀን ነው።")
    assert sr == 16_000 and info["spoken"] == 2 and len(wave) > sr * 0.1 and float(abs(wave).max()) > 0
    assert info["rows"][0]["phonemes"] == "salaame nawe" and info["rows"][0]["skipped"] == ""
    assert info["vocoder"] == "none (MMS-TTS makes the waveform itself, at 16 kHz)"
    assert "at 16 kHz" in inference.describe(info)
    steps, temperature = engine_settings("mms")
    assert steps["visible"] is False and temperature["visible"] is True  # no sampler steps; the prior's noise

    matcha = run(prepare_run(TrainConfig(workspace=str(corpus.root), dataset="am", run="matcha-ab", preset="tiny",
                                         max_steps=1, evaluate=False, max_frames_per_batch=600, grad_accumulation=1)))
    a, info_a, b, info_b = compare(AppContext(corpus), "mms-voice", Path(matcha["last_checkpoint"]).relative_to(
        corpus.root).as_posix(), "ሰላም ነው።", None, 4, 0.667, 1.0, "griffin-lim", 0)
    assert a[0] == 16_000 and b[0] == 24_000 and "16 kHz" in info_a and "24 kHz" in info_b

    lines = corpus.root / "lines.txt"
    lines.write_text("one|ሰላም ነው።\ntwo|እንዴት ነህ?\n", encoding="utf-8")
    result = next(e.result for e in inference.speak_file(corpus, "mms-voice", lines) if e.result)
    with zipfile.ZipFile(result["zip"]) as zf:
        assert sorted(zf.namelist()) == ["manifest.csv", "one.wav", "two.wav"]
        with zf.open("one.wav") as f:
            assert sf.info(f).samplerate == 16_000

    exported = inference.export_voice(corpus, "mms-voice", "mms-abebe")  # "auto": no vocoder for this family
    names = sorted(p.name for p in exported.iterdir())
    assert names == ["LICENSE.txt", "README.md", "config.json", "model.safetensors"]
    assert "CC-BY-NC-4.0" in (exported / "LICENSE.txt").read_text()
    readme = (exported / "README.md").read_text()
    assert "sample rate: 16000 Hz" in readme and "MMS-TTS makes the waveform itself" in readme
    with zipfile.ZipFile(corpus.root / "exports" / "mms-abebe.zip") as zf:
        assert "mms-abebe/LICENSE.txt" in zf.namelist()
    again, sr, _ = inference.Voice.load(exported).synthesize("ሰላም ነው።")
    assert sr == 16_000 and len(again) > 0


@pytest.mark.slow
def test_the_command_line_trains_exports_and_speaks_an_mms_voice(corpus, tmp_path):
    proc = app("train", "--engine", "mms", "--dataset", "am", "--run", "mms-cli", "--init", BASE, "--max-steps", "2",
               "--eval-every", "2", "--eval-clips", "1", "--workspace", str(corpus.root))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "finished: finished 2 steps" in proc.stdout and "what to expect: It starts from" in proc.stdout
    proc = app("export-voice", "mms-cli", "mms-cli-voice", "--workspace", str(corpus.root))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (corpus.voice_dir("mms-cli-voice") / "LICENSE.txt").is_file()
    out = tmp_path / "mms.wav"
    proc = app("synth", "ሰላም ነው።", "--voice", "mms-cli-voice", "--out", str(out), "--workspace", str(corpus.root))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sf.info(str(out)).samplerate == 16_000 and "at 16 kHz" in proc.stdout
    proc = app("export-voice", "mms-cli", "mms-onnx", "--onnx", "--workspace", str(corpus.root))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (corpus.voice_dir("mms-onnx") / "voice.onnx").is_file()


def test_the_refusals_say_what_to_pass_before_any_run_folder(corpus):
    with pytest.raises(StudioError, match="MMS-TTS takes no setting 'finetune_mode' .it is a setting of Matcha.: leave"):
        prepare_run(mms_config(corpus, "mms-mode", options={"finetune_mode": "freeze_encoder"}))
    with pytest.raises(StudioError, match="MMS-TTS takes no setting 'frontend' .it is a setting of Matcha and F5-TTS."):
        prepare_run(mms_config(corpus, "mms-frontend", options={"frontend": "phoneme"}))
    with pytest.raises(StudioError, match="--init facebook/mms-tts-amh --accept-licence"):
        prepare_run(mms_config(corpus, "mms-nobase", init=""))
    empty = corpus.root / "pretrained" / "empty"
    empty.mkdir(parents=True, exist_ok=True)
    with pytest.raises(StudioError, match="is not an MMS-TTS base"):
        prepare_run(mms_config(corpus, "mms-empty", init="pretrained/empty"))
    assert not any(corpus.run_dir(n).exists() for n in ("mms-mode", "mms-frontend", "mms-nobase", "mms-empty"))

    two = make_dataset(corpus.root, name="two", n_train=2, n_val=0, voices=("am", "am+f2"), max_chars=30)
    result = None
    with pytest.raises(StudioError, match="adapts Meta's one voice to one speaker; dataset two has 2"):
        result = run(prepare_run(mms_config(two, "mms-two", dataset="two")))
    assert result is None


# ------------------------------------------------------------------------------------ the download
@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> Path:
    """The hub's cache as huggingface_hub lays it out (refs/main -> snapshots/COMMIT/...), holding a tiny base in the
    public layout and the original discriminator file; offline, hf_hub_download answers from it."""
    from huggingface_hub import constants

    commit = "0123456789abcdef0123456789abcdef01234567"
    generator = tmp_path / "hub" / "models--facebook--mms-tts-amh"
    tiny_base(generator / "snapshots" / commit, discriminator=False)
    full = tmp_path / "hub" / "models--facebook--mms-tts"
    from tests.mms_fixtures import original_discriminator

    (full / "snapshots" / commit / "full_models" / "amh").mkdir(parents=True)
    original_discriminator(full / "snapshots" / commit / "full_models" / "amh" / "D_100000.pth")
    for repo in (generator, full):
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return tmp_path / "hub"


def test_the_base_comes_once_after_the_licence_yes_with_its_discriminator_and_licence(corpus, hub_cache, tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    shutil.copytree(corpus.dataset_dir("am"), ws.dataset_dir("am"))
    cfg = mms_config(ws, "mms-hub", init="facebook/mms-tts-amh", max_steps=1, evaluate=False)
    with pytest.raises(StudioError, match="CC-BY-NC-4.0.*--accept-licence"):
        prepare_run(cfg)
    assert not (ws.root / "pretrained").exists()
    path = prepare_run(mms_config(ws, "mms-hub", init="facebook/mms-tts-amh", max_steps=1, evaluate=False),
                       accept_licence=True)
    assert run(path)["state"] == "finished"
    base = ws.root / "pretrained" / "mms-tts-amh"
    assert sorted(p.name for p in base.iterdir()) == ["LICENSE.txt", "config.json", "discriminator.safetensors",
                                                     "model.safetensors", "tokenizer_config.json", "vocab.json"]
    assert "CC-BY-NC-4.0" in (base / "LICENSE.txt").read_text()
    assert "discriminator: discriminator.safetensors" in (ws.run_dir("mms-hub") / "train.log").read_text()
    # the next run finds the copy: no licence question, no download
    assert prepare_run(mms_config(ws, "mms-hub-2", init="facebook/mms-tts-amh", max_steps=1))
    assert read_config(ws.run_dir("mms-hub-2"))["train"]["init"] == str(base)


def test_offline_without_the_base_it_says_which_files_to_fetch_and_where_to_put_them(corpus, hub_cache, tmp_path,
                                                                                     monkeypatch):
    """The trainer's own message, for a run queued while the base could be had (here: the hub's cache) and started
    when it no longer can; Start refuses at once otherwise (tests/test_mms_offline.py)."""
    from huggingface_hub import constants

    ws = Workspace.open(tmp_path / "ws")
    shutil.copytree(corpus.dataset_dir("am"), ws.dataset_dir("am"))
    path = prepare_run(mms_config(ws, "mms-offline", init="facebook/mms-tts-amh", max_steps=1, evaluate=False),
                       accept_licence=True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(StudioError) as refused:
        run(path)
    message = str(refused.value)
    assert message.startswith("This machine cannot reach the Hugging Face hub to download the MMS-TTS Amharic base")
    for part in ("config.json", "vocab.json", "tokenizer_config.json", "model.safetensors", "D_100000.pth",
                 "pretrained/mms-tts-amh/"):
        assert part in message, part
    assert not (ws.root / "pretrained" / "mms-tts-amh").exists()


# ------------------------------------------------------------------------------------ the tabs
def test_the_tabs_say_what_mms_needs_and_what_the_dictionary_can_do_for_it(corpus):
    from webui.context import AppContext
    from webui.g2p import dictionary_limits
    from webui.training import engine_advice, engine_controls, expectations

    licence, prompt, size, mode, base, start_from = engine_controls("mms")
    assert licence["visible"] and "MMS-TTS base's licence: CC-BY-NC-4.0" in licence["label"]
    assert start_from == {"__type__": "update", "visible": False, "value": "(from scratch)"}  # its base box says
    assert engine_controls("matcha")[-1]["visible"] and "value" not in engine_controls("matcha")[-1]
    assert base["placeholder"] == "facebook/mms-tts-amh" and not prompt["visible"] and not size["visible"]
    said = expectations(AppContext(corpus), "mms", "am", 200, "")["value"]
    assert "Meta's Amharic MMS-TTS voice" in said and "keeps that licence" in said and "usable speech" in said
    advice = engine_advice(AppContext(corpus), "am")["value"]
    assert re.match(r"Which engine: \d+ s of usable speech in am; this machine: no GPU \(the CPU trains\)\. "
                    r"Quality is measured on 1 held-out clip\(s\) \(a run uses up to 8\)", advice), advice
    assert all(f"**{title}**: for" in advice for title in ("Matcha", "F5-TTS", "MMS-TTS"))
    assert "an hour or two of one speaker, any GPU or a CPU" in advice and "free of a non-commercial licence" in advice
    assert "Not on this machine: no GPU" in advice  # F5's base on this CPU
    limits = dictionary_limits()
    assert "MMS-TTS voices:" in limits and "gemination" in limits and "Matcha voices" not in limits


@pytest.mark.slow
def test_an_mms_job_runs_through_the_job_service_and_two_ddp_processes_train_in_lock_step(corpus):
    import time

    from tests.test_training_process import start_trainer
    from utils import jobs
    from utils.runs import control

    control.start_training(corpus, "am", "base", "mms-job", init=BASE, engine="mms", max_steps=2,
                           overrides={"eval_clips": 1, "eval_every": 2})
    end = time.time() + 300
    while jobs.reconcile(corpus.run_dir("mms-job")).get("state") not in jobs.FINAL and time.time() < end:
        time.sleep(0.5)
    status = jobs.read_status(corpus.run_dir("mms-job"))
    assert status["state"] == "finished", (corpus.run_dir("mms-job") / "train.log").read_text()[-2000:]
    assert status["kind"] == "mms" and status["best_mcd"] > 0

    path = prepare_run(mms_config(corpus, "mms-ddp", max_steps=2, checkpoint_every=2, evaluate=False))
    proc = start_trainer(path, nproc=2)
    assert proc.wait(timeout=400) == 0, Path(proc.output_path).read_text(errors="replace")[-3000:]
    log = (corpus.run_dir("mms-ddp") / "train.log").read_text()
    assert "machine: cpu, 2 process(es)" in log and "weights identical on all 2 processes at step 2" in log


def test_continuing_a_fine_tune_starts_from_the_closest_trained_discriminator(corpus, mms_voice):
    """Only a run's newest checkpoint keeps trainer state and a voice none: continuing from an older checkpoint or
    a voice paired the trained generator with random discriminators, and said to fetch D_100000.pth, which was in
    pretrained/ all along."""
    from utils.inference.export import export_voice
    from utils.mms.base import describe_base

    older, newest = (folder for _, folder in step_folders(mms_voice / "checkpoints"))
    assert not (older / "trainer_state.pt").exists() and (newest / "trainer_state.pt").exists()
    assert describe_base(newest)["discriminator"] == newest / "trainer_state.pt"
    assert describe_base(older)["discriminator"] == newest / "trainer_state.pt"  # the same run's, trained on
    voice = export_voice(corpus, "mms-voice", "continued-voice")
    assert describe_base(voice)["discriminator"].resolve() == (corpus.root / BASE / "D_100000.pth").resolve()
    result = run(prepare_run(mms_config(corpus, "from-voice", init=str(voice), max_steps=1)))
    log = (corpus.run_dir("from-voice") / "train.log").read_text(encoding="utf-8")
    assert result["state"] == "finished" and "discriminator: D_100000.pth" in log and "random" not in log
