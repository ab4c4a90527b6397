"""Training loop behaviours on a tiny espeak-ng Amharic corpus (CPU, a few seconds per run)."""
from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers import make_dataset
from utils.audio import MODEL_SAMPLE_RATE
from utils.workspace import Workspace, read_jsonl, write_jsonl

torch.set_num_threads(1)


# ---------------------------------------------------------------------------------- fixtures
from utils.training import TrainConfig, load_checkpoint, prepare_run, run  # noqa: E402
from utils.training.checkpoint import load_trainer_state, step_folders  # noqa: E402
from utils.datasets import load_manifest


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Workspace:
    return make_dataset(tmp_path_factory.mktemp("ws"), n_train=4, n_val=1, voices=("am", "am+f2"), max_chars=30)


def tiny_config(ws: Workspace, run_name: str, **kw) -> TrainConfig:
    base = dict(workspace=str(ws.root), dataset="am", run=run_name, preset="tiny", max_steps=6, lr=2e-3,
                warmup_steps=1, log_every=1, eval_every=0, checkpoint_every=3, keep_checkpoints=2,
                grad_accumulation=1, max_frames_per_batch=400, mcd="logmel", eval_clips=1, sample_clips=1,
                ode_steps=2, ema_decay=0.9)
    base.update(kw)
    return TrainConfig.from_dict(base)  # Matcha's own settings (finetune_mode, blanks...) by name too


def losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r}


# ---------------------------------------------------------------------------------- behaviours
def test_tiny_run_lowers_the_loss_and_writes_every_run_file(corpus):
    result = run(prepare_run(tiny_config(corpus, "basic", max_steps=12, checkpoint_every=6)))
    run_dir = corpus.run_dir("basic")
    curve = losses(run_dir)
    assert result["state"] == "finished" and len(curve) == 12
    assert np.mean([curve[s] for s in (10, 11, 12)]) < np.mean([curve[s] for s in (1, 2, 3)])
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "finished" and status["step"] == 12 and status["max_steps"] == 12
    assert status["heartbeat"] > 0 and status["last_checkpoint"].endswith("step-12")
    config = json.loads((run_dir / "config.json").read_text())
    assert config["train"]["preset"] == "tiny" and config["resolved"]["precision"] == "fp32"
    assert all(config["reasons"][k] for k in config["resolved"])
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert set(rows[0]) == {"step", "start_s", "time"} and rows[0]["step"] == 0  # the start's loading, timed
    row = rows[1]
    for key in ("step", "epoch", "loss", "dur", "prior", "cfm", "lr", "grad_norm", "samples_per_s", "frames_per_s",
                "data_wait"):
        assert key in row
    assert any("mcd" in r and "val_loss" in r for r in read_jsonl(run_dir / "metrics.jsonl"))
    assert list((run_dir / "events").iterdir()) and "attention" in (run_dir / "train.log").read_text()
    assert [s for s, _ in step_folders(run_dir / "checkpoints")] == [6, 12]
    assert list((run_dir / "samples" / "step-12").glob("*.wav"))


def test_checkpoint_round_trip_restores_the_same_model(corpus):
    run(prepare_run(tiny_config(corpus, "roundtrip", max_steps=2, checkpoint_every=2)))
    folder = corpus.run_dir("roundtrip") / "checkpoints" / "step-2"
    assert {p.name for p in folder.iterdir()} == {"model.safetensors", "config.json", "trainer_state.pt"}
    model, config = load_checkpoint(folder)
    again, _ = load_checkpoint(folder)
    assert config["speakers"] == ["am", "am_f2"] and config["frontend"]["symbols"][0] == "<pad>"
    assert config["features"]["n_mels"] == 100 and config["model"]["n_symbols"] == len(config["frontend"]["symbols"])
    tokens = [1, 5, 9, 3]
    a = model.synthesise(tokens, speaker=1, n_steps=2, generator=torch.Generator().manual_seed(0))
    b = again.synthesise(tokens, speaker=1, n_steps=2, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a["mel"], b["mel"]) and a["mel"].shape[1] == 100
    state = load_trainer_state(folder)
    assert state["step"] == 2 and "model" in state["optimizers"] and "scaler" in state
    assert state["adapter"]["next_pos"] and "model" in state["modules"]


def test_resume_after_a_stop_continues_the_same_loss_curve(corpus):
    straight = corpus.run_dir("straight")
    run(prepare_run(tiny_config(corpus, "straight")))
    # same run, stopped by a STOP file after the first step, then resumed
    run_dir = corpus.run_dir("interrupted")
    path = prepare_run(tiny_config(corpus, "interrupted", max_steps=6, checkpoint_every=100))

    def request_stop():  # what the UI's Stop button does (besides SIGTERM)
        while not (run_dir / "metrics.jsonl").exists():
            time.sleep(0.01)
        (run_dir / "STOP").write_text("stop requested")

    threading.Thread(target=request_stop, daemon=True).start()
    first = run(path)
    assert first["state"] == "stopped" and 1 <= first["step"] < 6
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "stopped" and status["last_checkpoint"].endswith(f"step-{first['step']}")
    # the second half loads its data in a worker process: the same batches must arrive
    path = prepare_run(tiny_config(corpus, "interrupted", checkpoint_every=100, num_workers=1,
                                   persistent_workers="true"))
    second = run(path)
    assert second["state"] == "finished" and second["step"] == 6
    a, b = losses(straight), losses(run_dir)
    assert sorted(b) == list(range(1, 7))
    for step in range(1, 7):
        assert b[step] == pytest.approx(a[step], rel=1e-5, abs=1e-6), step
    log = (run_dir / "train.log").read_text()
    assert "resume: continuing from" in log and "num_workers changed since the checkpoint: 'auto' -> 1" in log


def test_a_checkpoint_written_before_the_shared_engine_resumes_exactly(corpus):
    """trainer_state.pt of the acoustic trainer before utils/training/loop.py kept the model's and the optimizer's
    state at the top level: such a run still resumes, onto the same curve as a run that never stopped."""
    run(prepare_run(tiny_config(corpus, "legacy", max_steps=6, checkpoint_every=3)))
    checkpoints = corpus.run_dir("legacy") / "checkpoints"
    straight = losses(corpus.run_dir("legacy"))
    new = load_trainer_state(checkpoints / "step-3")
    legacy = {"model": new["modules"]["model"], "optimizer": new["optimizers"]["model"], "scaler": new["scaler"],
              "ema": new["ema"], "step": new["step"], "split": new["split"], "lr_scale": new["lr_scale"],
              "best": new["best"], **new["adapter"]}
    torch.save(legacy, checkpoints / "step-3" / "trainer_state.pt")
    shutil.rmtree(checkpoints / "step-6")
    result = run(prepare_run(tiny_config(corpus, "legacy", max_steps=6, checkpoint_every=3)))
    assert result["state"] == "finished" and result["step"] == 6
    rows = [r for r in read_jsonl(corpus.run_dir("legacy") / "metrics.jsonl") if "loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6, 4, 5, 6]  # the second run continued after step 3
    for row in rows[6:]:
        assert row["loss"] == pytest.approx(straight[row["step"]], rel=1e-5, abs=1e-6), row["step"]
    assert load_trainer_state(corpus.run_dir("legacy") / "checkpoints" / "step-6")["format"] == 2


def test_resume_reports_settings_changed_since_the_checkpoint(corpus):
    path = prepare_run(tiny_config(corpus, "changed", max_steps=1, checkpoint_every=1))
    run(path)
    run(prepare_run(tiny_config(corpus, "changed", max_steps=2, checkpoint_every=1, lr=5e-3)))
    log = (corpus.run_dir("changed") / "train.log").read_text()
    assert "resume: setting lr changed since the checkpoint: 0.002 -> 0.005" in log
    # trained longer (1 -> 2 steps): where its learning rate goes on is said, on the 2-step schedule at step 1
    assert "learning rate goes on from 0.005 at step 1: the cosine schedule of a 2-step run" in log


def test_out_of_memory_halves_the_micro_batch_and_continues(corpus):
    # one batch of all 4 clips; a micro-batch of more than 2 longest clips "runs out of memory"
    rows = [r for r in load_manifest(corpus, "am") if r["split"] == "train"]
    longest = max(int(r["duration"] * MODEL_SAMPLE_RATE) // 256 + 1 for r in rows)
    longest = -(-longest // 4) * 4
    result = run(prepare_run(tiny_config(corpus, "oom", max_steps=3, max_frames_per_batch=4 * longest,
                                         fault_oom_above_frames=2 * longest, checkpoint_every=3)))
    log = (corpus.run_dir("oom") / "train.log").read_text()
    assert result["state"] == "finished" and result["step"] == 3
    assert "out of memory at step 0: micro-batch halved" in log
    state = load_trainer_state(corpus.run_dir("oom") / "checkpoints" / "step-3")
    assert state["split"] >= 2


def test_nan_loss_skips_the_step_and_lowers_the_learning_rate(corpus):
    result = run(prepare_run(tiny_config(corpus, "nan", max_steps=4, fault_nan_steps=[1], checkpoint_every=4)))
    log = (corpus.run_dir("nan") / "train.log").read_text()
    assert result["state"] == "finished"
    assert "step 1: non-finite loss/gradients, step skipped, learning rate halved" in log
    assert load_trainer_state(corpus.run_dir("nan") / "checkpoints" / "step-4")["lr_scale"] == 0.5


def test_nan_in_fp16_lowers_the_loss_scale(corpus):
    run(prepare_run(tiny_config(corpus, "nan16", max_steps=3, precision="fp16", fault_nan_steps=[1],
                                checkpoint_every=3)))
    log = (corpus.run_dir("nan16") / "train.log").read_text()
    assert "step 1: non-finite loss/gradients, step skipped, loss scale lowered" in log
    state = load_trainer_state(corpus.run_dir("nan16") / "checkpoints" / "step-3")
    assert state["lr_scale"] == 1.0 and state["scaler"]["scale"] < 65536.0


def test_repeated_nan_stops_with_a_message_and_a_good_checkpoint(corpus):
    result = run(prepare_run(tiny_config(corpus, "nanstop", max_steps=10, fault_nan_steps=list(range(2, 10)),
                                         max_bad_steps=3, checkpoint_every=100)))
    assert result["state"] == "failed" and "3 steps in a row had non-finite" in result["message"]
    status = json.loads((corpus.run_dir("nanstop") / "status.json").read_text())
    assert status["state"] == "failed" and "non-finite" in status["message"]
    model, _ = load_checkpoint(result["last_checkpoint"])
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_evaluation_goes_through_the_chosen_vocoder_and_a_wrong_one_fails_before_training(corpus):
    from models.vocoder import PRESETS, Vocoder
    from utils.events import StudioError
    from utils.vocoder import save_vocoder

    save_vocoder(Vocoder(PRESETS["tiny"]), corpus.root / "vocoders" / "mine")
    calls = []
    hook = torch.nn.modules.module.register_module_forward_hook(
        lambda module, args, output: calls.append(args[0].shape) if isinstance(module, Vocoder) else None)
    try:
        result = run(prepare_run(tiny_config(corpus, "through-vocoder", max_steps=2, eval_every=2,
                                             mcd="world", eval_vocoder="vocoders/mine")))
    finally:
        hook.remove()
    assert result["state"] == "finished"
    # the held-out clip's 100-mel spectrogram, once for the averaged and once for the raw weights
    assert len(calls) == 2 and all(c[1] == 100 for c in calls)
    run_dir = corpus.run_dir("through-vocoder")
    assert "eval vocoder           vocoders/mine" in (run_dir / "train.log").read_text()
    assert np.isfinite([r["mcd"] for r in read_jsonl(run_dir / "metrics.jsonl") if "mcd" in r]).all()
    assert list((run_dir / "samples" / "step-2").glob("*.wav"))

    with pytest.raises(StudioError, match="eval_vocoder: No vocoder at .*vocoders/none: choose one"):
        run(prepare_run(tiny_config(corpus, "no-vocoder", eval_vocoder="vocoders/none")))


def test_finetune_grows_symbols_and_speakers_and_new_speaker_mode_trains_only_that_row(tmp_path, corpus):
    run(prepare_run(tiny_config(corpus, "charbase", max_steps=2, checkpoint_every=2, frontend="char")))
    base_dir = corpus.run_dir("charbase") / "checkpoints" / "step-2"
    base_model, base_cfg = load_checkpoint(base_dir)
    # a second dataset: a new voice and sentences with characters the first one never saw
    ws2 = make_dataset(tmp_path / "ws2", name="new", n_train=2, n_val=0, voices=("am+m3",), first=20)
    text_chars = {ch for r in load_manifest(ws2, "new") for ch in r["normalized"]}
    rows = load_manifest(ws2, "new")
    for r in rows:  # make sure at least one symbol is new
        r["normalized"] = r["text"] = r["text"] + " x"
    write_jsonl(ws2.dataset_dir("new") / "manifest.jsonl", rows)
    init = shutil.copytree(base_dir, ws2.voices / "base")  # a checkpoint to fine-tune lives in the workspace
    cfg = TrainConfig.from_dict({**tiny_config(ws2, "ft", max_steps=2, checkpoint_every=2).to_dict(), "dataset": "new",
                         "init": str(init), "finetune_mode": "new_speaker", "ema_decay": 0.0})
    run(prepare_run(cfg))
    model, config = load_checkpoint(ws2.run_dir("ft") / "checkpoints" / "step-2")
    assert config["speakers"] == ["am", "am_f2", "am_m3"]
    old_symbols = base_cfg["frontend"]["symbols"]
    assert config["frontend"]["symbols"][: len(old_symbols)] == old_symbols
    assert len(config["frontend"]["symbols"]) > len(old_symbols) and text_chars
    old, new = base_model.state_dict(), model.state_dict()
    for name, tensor in new.items():
        if name == "spk_emb.weight":
            assert torch.equal(tensor[:2], old[name][:2]) and not torch.equal(tensor[2], old[name].mean(0))
        elif name == "encoder.emb.weight":
            assert torch.equal(tensor[: len(old_symbols)], old[name])
        else:
            assert torch.equal(tensor, old[name]), name


def test_freeze_encoder_mode_keeps_the_encoder(corpus):
    base_dir = corpus.run_dir("roundtrip") / "checkpoints" / "step-2"
    if not base_dir.exists():
        run(prepare_run(tiny_config(corpus, "roundtrip", max_steps=2, checkpoint_every=2)))
    run(prepare_run(tiny_config(corpus, "frozen", max_steps=2, checkpoint_every=2, init=str(base_dir),
                                finetune_mode="freeze_encoder", ema_decay=0.0)))
    a, _ = load_checkpoint(base_dir)
    b, _ = load_checkpoint(corpus.run_dir("frozen") / "checkpoints" / "step-2")
    sa, sb = a.state_dict(), b.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa if k.startswith("encoder."))
    assert not all(torch.equal(sa[k], sb[k]) for k in sa if k.startswith("decoder."))


def test_single_speaker_checkpoint_adapts_to_a_new_single_speaker(tmp_path):
    one = make_dataset(tmp_path / "one", name="one", n_train=2, n_val=0, voices=("am",))
    run(prepare_run(TrainConfig(**{**tiny_config(one, "solo", max_steps=1, checkpoint_every=1).to_dict(),
                                   "dataset": "one"})))
    base = one.run_dir("solo") / "checkpoints" / "step-1"
    other = make_dataset(tmp_path / "other", name="other", n_train=2, n_val=0, voices=("am+m3",), first=10)
    init = shutil.copytree(base, other.voices / "solo")
    result = run(prepare_run(TrainConfig(**{**tiny_config(other, "adapt", max_steps=1, checkpoint_every=1).to_dict(),
                                            "dataset": "other", "init": str(init)})))
    model, config = load_checkpoint(result["last_checkpoint"])
    assert result["state"] == "finished" and config["speakers"] == ["am_m3"] and model.spk_emb is None


def test_held_out_mcd_that_stops_improving_is_called_overfitting_and_stop_ends_the_run_there(corpus):
    """lr 0: the weights never change, so every evaluation scores the same MCD, which never improves."""
    from utils.runs import views

    frozen = dict(lr=0.0, warmup_steps=1, eval_every=1, checkpoint_every=100, max_steps=6, patience=2)
    warned = run(prepare_run(tiny_config(corpus, "overfit-warn", on_overfit="warn", **frozen)))
    status = json.loads((corpus.run_dir("overfit-warn") / "status.json").read_text())
    assert warned["state"] == "finished" and warned["step"] == 6
    assert status["best_checkpoint"].endswith("step-1")  # the first evaluation stays the best
    assert "has not improved for 5 evaluations" in status["overfitting"] and "overfitting" in status["overfitting"]
    assert "⚠ Held-out MCD has not improved" in views.view(corpus, "overfit-warn").summary()

    stopped = run(prepare_run(tiny_config(corpus, "overfit-stop", on_overfit="stop", **frozen)))
    assert stopped["state"] == "finished" and stopped["step"] == 3  # evaluations 2 and 3 did not improve
    assert stopped["message"].startswith("finished early at step 3") and "step-1" in stopped["message"]
    assert stopped["best_checkpoint"].endswith("step-1")


def test_a_halved_micro_batch_grows_back_after_a_stretch_of_good_steps(corpus, monkeypatch):
    from utils.training import loop

    monkeypatch.setattr(loop, "GROW_BACK_STEPS", 4)  # 4 good steps after the first out-of-memory, then 8
    rows = [r for r in load_manifest(corpus, "am") if r["split"] == "train"]
    longest = -(-max(int(r["duration"] * MODEL_SAMPLE_RATE) // 256 + 1 for r in rows) // 4) * 4
    result = run(prepare_run(tiny_config(corpus, "regrow", max_steps=13, max_frames_per_batch=4 * longest,
                                         fault_oom_above_frames=2 * longest, checkpoint_every=13)))
    log = (corpus.run_dir("regrow") / "train.log").read_text()
    assert result["state"] == "finished" and result["step"] == 13
    # the injected limit stays, so the whole batch fails again; the next try waits twice as long
    assert "out of memory at step 0: micro-batch halved" in log
    assert "step 4: 4 steps without running out of memory: micro-batch doubled back" in log
    assert "out of memory at step 4: micro-batch halved" in log
    assert "step 12: 8 steps without running out of memory: micro-batch doubled back" in log


def test_fp16_overflows_while_the_loss_scale_calibrates_are_not_failed_steps(corpus, monkeypatch):
    """A T4 starts fp16 at loss scale 65536 and skips steps until the scale fits; those skips must not add up
    to the five failed steps that stop a run. Here the scale starts far too high, so many steps overflow."""
    from utils.training import optimization

    made = []

    def huge_scale(m):
        made.append(torch.amp.GradScaler("cpu", init_scale=2.0 ** 28, enabled=m.precision == "fp16"))
        return made[-1]

    monkeypatch.setattr(optimization, "grad_scaler", huge_scale)
    result = run(prepare_run(tiny_config(corpus, "fp16-calibrates", precision="fp16", max_steps=10,
                                         checkpoint_every=10, max_bad_steps=3)))
    log = (corpus.run_dir("fp16-calibrates") / "train.log").read_text()
    assert result["state"] == "finished" and result["step"] == 10, log[-1500:]
    assert log.count("gradients overflowed, step skipped, loss scale lowered") > 3
    assert made[-1].get_scale() < 2.0 ** 24


def test_blanks_are_on_by_default_recorded_in_the_checkpoint_and_a_checkpoint_keeps_its_own(corpus):
    first = run(prepare_run(tiny_config(corpus, "blanks-default", max_steps=2, checkpoint_every=2)))
    folder = Path(first["last_checkpoint"])
    config = json.loads((folder / "config.json").read_text())
    assert config["model"]["add_blank"] is True and config["resolved"]["blanks"] is True
    # a checkpoint from before the setting: no add_blank in its config, so it was trained without blanks
    old = corpus.root / "old-checkpoint"
    shutil.copytree(folder, old)
    del config["model"]["add_blank"]
    (old / "config.json").write_text(json.dumps(config))
    tuned = run(prepare_run(tiny_config(corpus, "blanks-old", max_steps=2, checkpoint_every=2, init=str(old))))
    tuned_config = json.loads((Path(tuned["last_checkpoint"]) / "config.json").read_text())
    assert tuned_config["model"]["add_blank"] is False
    run_config = json.loads((corpus.run_dir("blanks-old") / "config.json").read_text())
    assert "kept from the checkpoint" in run_config["reasons"]["blanks"] and run_config["resolved"]["blanks"] is False
    model, _ = load_checkpoint(tuned["last_checkpoint"])
    assert model.cfg.add_blank is False and model.synthesise([3, 4, 5], n_steps=2)["durations"].shape == (3,)


def test_the_held_out_loss_is_measured_on_a_spread_of_held_out_clips_not_all_of_them(tmp_path, monkeypatch):
    """A 200 h dataset holds out ~11k clips: all of them would be ~1 GB of mels read before the first step."""
    from utils.matcha import adapter as matcha_adapter
    from utils.training import acoustic
    from utils.training.data import spread

    assert spread(list(range(10)), 3) == [0, 4, 8] and spread(list(range(3)), 5) == [0, 1, 2]
    ws = make_dataset(tmp_path / "ws", n_train=2, n_val=5, max_chars=30)
    measured, loss = [], matcha_adapter.validation_loss

    def counting(model, batches, *args):
        measured.append(sum(b["tokens"].shape[0] for b in batches))
        return loss(model, batches, *args)

    monkeypatch.setattr(acoustic, "VAL_LOSS_CLIPS", 2)
    monkeypatch.setattr(matcha_adapter, "validation_loss", counting)
    result = run(prepare_run(tiny_config(ws, "held-out", max_steps=1, checkpoint_every=1, sample_clips=0)))
    assert result["state"] == "finished" and measured and set(measured) == {2}  # the averaged and the raw weights
    assert "5 held-out clips" in (ws.run_dir("held-out") / "train.log").read_text()  # all are still held out


def test_a_run_without_held_out_rows_evaluates_on_training_clips_and_says_so_and_one_with_no_usable_row_is_refused():
    """One rule for every family (Matcha, F5 and MMS read their rows through it)."""
    from utils.events import StudioError
    from utils.training.data import held_out_or_fit

    said = []
    assert held_out_or_fit("d", [1, 2, 3], [9], 2, said.append) == [9] and said == []
    assert held_out_or_fit("d", [1, 2, 3], [], 2, said.append) == [1, 2] and "measures fit" in said[0]
    with pytest.raises(StudioError, match="Dataset 'd': no training row could be used"):
        held_out_or_fit("d", [], [9], 2, said.append)
