"""The recipe that decides whether a fine-tune learns a new language (what F5-TTS fine-tuners reported): mixed
precision that falls back to fp32 by itself instead of failing, a schedule fitted to the run (warm-up at most a
tenth, the EMA's span a tenth, early evaluations), the rows added for Amharic learning faster than the pretrained
body, and the averaged and the raw weights both scored. On the CPU with tiny models; the loop is Matcha's and
F5's alike."""
from __future__ import annotations

import json
import re

import pytest
import torch

from tests.helpers import make_dataset
from tests.test_f5_engine import f5_config, public_base
from utils.runs import settings
from utils.training import TrainConfig, prepare_run, run
from utils.training import optimization as opt
from utils.training.checkpoint import load_trainer_state, read_config
from utils.workspace import Workspace, read_jsonl

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Workspace:
    return make_dataset(tmp_path_factory.mktemp("ws"), n_train=4, n_val=1, voices=("am",), max_chars=30)


def matcha_config(ws: Workspace, run_name: str, **kw) -> TrainConfig:
    base = dict(workspace=str(ws.root), dataset="am", run=run_name, preset="tiny", max_steps=6, lr=2e-3,
                warmup_steps=1, log_every=1, eval_every=0, checkpoint_every=100, grad_accumulation=1,
                max_frames_per_batch=400, mcd="logmel", eval_clips=1, sample_clips=1, ode_steps=2, ema_decay=0.9)
    return TrainConfig(**{**base, **kw})


@pytest.mark.parametrize("engine", ["matcha", "f5"])
def test_a_run_whose_mixed_precision_keeps_failing_goes_on_in_fp32_and_stays_there(corpus, engine):
    """fp16 fine-tunes of F5 went NaN after an epoch or two (F5-TTS issue 341), and a T4 has no bf16: instead of
    stopping, the run continues in fp32 from its last good weights, says so, saves it, and resumes in fp32."""
    make = f5_config if engine == "f5" else matcha_config
    name = f"fp16-falls-back-{engine}"
    result = run(prepare_run(make(corpus, name, precision="fp16", max_steps=6, max_bad_steps=3, checkpoint_every=6,
                                  fault_nan_steps=[1, 2, 3])))
    assert result["state"] == "finished" and result["step"] == 6, result
    run_dir = corpus.run_dir(name)
    log = (run_dir / "train.log").read_text(encoding="utf-8")
    assert "3 steps in a row had non-finite loss or gradients in fp16" in log and "continuing in fp32" in log
    assert "continuing in fp32" in json.loads((run_dir / "status.json").read_text())["precision_note"]
    from utils.runs.views import view

    assert "continuing in fp32" in view(corpus, name).summary()  # what the Training tab shows of the run
    state = load_trainer_state(run_dir / "checkpoints" / "step-6")
    assert state["precision_fallback"]["from"] == "fp16" and state["precision_fallback"]["step"] == 4
    assert state["lr_scale"] == 1.0  # the failing steps lowered the loss scale, not the learning rate
    losses = [r["loss"] for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r]
    assert losses and all(torch.isfinite(torch.tensor(losses)))
    assert read_config(run_dir / "checkpoints" / "step-6")["resolved"]["precision"] == "fp32"

    resumed = run(prepare_run(make(corpus, name, precision="fp16", max_steps=8, max_bad_steps=3, checkpoint_every=8)))
    assert resumed["state"] == "finished" and resumed["step"] == 8
    config = json.loads((run_dir / "config.json").read_text())
    assert config["resolved"]["precision"] == "fp32" and "switched from fp16 at step 4" in config["reasons"]["precision"]


def test_a_run_in_fp32_that_keeps_failing_still_stops_with_its_last_good_weights(corpus):
    result = run(prepare_run(matcha_config(corpus, "fp32-fails", max_bad_steps=2, fault_nan_steps=[1, 2, 3, 4, 5])))
    assert result["state"] == "failed" and "2 steps in a row had non-finite" in result["message"]


def test_the_f5_recommendation_on_a_card_without_bf16_says_what_it_chose_and_why(corpus):
    from utils import hardware
    from utils.f5.adapter import F5Adapter

    t4 = hardware.HardwareReport(gpus=[hardware.GPUInfo(0, "Tesla T4", 14.7, "7.5", 40)], cpu_count=2, ram_gb=12,
                                 disk_free_gb=50)
    t4.recommended = hardware.recommend(t4)
    prepare_run(f5_config(corpus, "f5-on-a-t4"))
    adapter = F5Adapter(f5_config(corpus, "f5-on-a-t4"), t4)  # resolved for the T4 (nothing is built here)
    m = adapter.machine
    assert m.precision == "fp16" and m.reasons["precision"].startswith("Tesla T4")  # the card's own reason first
    assert "goes on in fp32 by itself" in m.reasons["precision"] and "issue 341" in m.reasons["precision"]


# ------------------------------------------------------------------------------------ the schedule
def test_the_added_rows_learn_at_ten_times_the_bodys_rate_exactly_as_their_own_adamw_would():
    torch.manual_seed(0)
    table = torch.nn.Parameter(torch.randn(6, 4))
    alone = torch.nn.Parameter(table.detach()[3:].clone())  # the same rows with an optimizer of their own
    body = torch.optim.AdamW([table], lr=1e-3, weight_decay=0.01)
    own = torch.optim.AdamW([alone], lr=1e-2, weight_decay=0.01)
    opt.faster_rows(body, table, 3, 10.0)
    before = table.detach()[:3].clone()
    for step in range(5):
        grad = torch.randn(6, 4, generator=torch.Generator().manual_seed(step), device="cpu")
        table.grad, alone.grad = grad.clone(), grad[3:].clone()
        body.step()
        own.step()
    assert torch.allclose(table.detach()[3:], alone.detach(), atol=1e-6)
    assert not torch.equal(table.detach()[:3], before)  # the body learns too, at its own rate


def test_a_fine_tune_shows_the_rates_of_the_body_and_of_the_added_rows(corpus):
    base = public_base(corpus.root / "pretrained" / "rates-base")
    assert run(prepare_run(f5_config(corpus, "f5-rates", init=str(base), max_steps=2, lr="auto")))["state"] == "finished"
    config = json.loads((corpus.run_dir("f5-rates") / "config.json").read_text())
    from utils.f5.adapter import auto_rate

    body = auto_rate(f5_config(corpus, "f5-rates", init=str(base)))[0]  # a tiny base's rate (the public one's: 1e-5)
    assert config["resolved"]["lr"] == body and config["resolved"]["new_rows_lr"] == pytest.approx(10 * body)
    assert "learn 10x faster than the pretrained body" in config["reasons"]["new_rows_lr"]
    log = (corpus.run_dir("f5-rates") / "train.log").read_text(encoding="utf-8")
    assert "warm-up 1 updates (at most a tenth of the run)" in log and "passes over the data" in log


def test_the_averages_span_is_fitted_to_the_runs_length():
    for steps, decay in ((100, 0.95), (2_000, 0.995), (20_000, 0.999), (200_000, 0.999)):
        m = opt.resolve(TrainConfig(preset="tiny", max_steps=steps))
        assert m.ema_decay == pytest.approx(decay) and "a tenth of this" in m.reasons["ema_decay"], steps
    chosen = opt.resolve(TrainConfig(preset="tiny", ema_decay=0.9))
    assert chosen.ema_decay == 0.9 and chosen.reasons["ema_decay"] == "set by the user"


def test_early_evaluations_come_before_the_first_scheduled_one(corpus):
    early = opt.early_evaluations
    assert early(TrainConfig(max_steps=20_000, eval_every=1000)) == (200, 500)
    assert early(TrainConfig(max_steps=20_000, eval_every=300)) == (200,)
    assert early(TrainConfig(max_steps=20_000, early_evals="none")) == ()
    assert early(TrainConfig(max_steps=400, eval_every=0, early_evals="100, 300,900")) == (100, 300)
    with pytest.raises(Exception, match="early_evals must be"):
        early(TrainConfig(early_evals="soon"))
    run(prepare_run(matcha_config(corpus, "early", max_steps=6, eval_every=5, early_evals="2")))
    evaluated = [r["step"] for r in read_jsonl(corpus.run_dir("early") / "metrics.jsonl") if "mcd" in r]
    assert evaluated == [2, 5, 6]
    assert any((corpus.run_dir("early") / "samples" / "step-2").glob("*.wav"))


def test_each_evaluation_scores_the_averaged_and_the_raw_weights(corpus):
    run(prepare_run(matcha_config(corpus, "both", max_steps=4, eval_every=2)))
    for row in [r for r in read_jsonl(corpus.run_dir("both") / "metrics.jsonl") if "mcd" in r]:
        assert {"mcd_ema", "mcd_raw", "weights"} <= set(row)
        assert row["mcd"] == min(row["mcd_ema"], row["mcd_raw"]) == row[f"mcd_{row['weights']}"]


# ------------------------------------------------------------------------------------ before Start
def test_guidance_before_start_says_the_hours_the_time_and_the_disk(corpus):
    from utils import hardware
    from utils.f5.expectations import guidance, training_speed, usable_hours
    from utils.training.speed import say_hours

    t4 = hardware.HardwareReport(gpus=[hardware.GPUInfo(0, "Tesla T4", 14.7, "7.5", 40)], cpu_count=2, ram_gb=12,
                                 disk_free_gb=50)
    hours = usable_hours(corpus, "am")
    data, time, disk = guidance(corpus, "am", 20_000, t4)
    assert f"{say_hours(hours)} of usable speech" in data and "took people 10-15 h" in data  # seconds, minutes here
    assert hours < 1 and "0.0 h" not in data
    assert "for one pass over the data" in time and "Tesla T4" in time and "estimated" in time
    assert "Checkpoints need up to 12 GB" in disk and "GB are free where the workspace is" in disk
    assert "already speaks Amharic" in guidance(corpus, "am", 20_000, t4, speaks_amharic=True)[0]
    cpu = hardware.HardwareReport(gpus=[], cpu_count=2, ram_gb=12, disk_free_gb=50)
    base = public_base(corpus.root / "pretrained" / "speed-base")
    run(prepare_run(f5_config(corpus, "f5-speed", init=str(base), max_steps=1, device="cpu")))
    speed, source = training_speed(corpus, cpu)
    # the newest run first; earlier F5 runs of the workspace pool their windows with its one
    assert source.startswith("measured by run f5-speed") and source.endswith("on this kind of machine") and speed > 0
    assert "measured by run f5-speed" in guidance(corpus, "am", 100, cpu)[1]


def test_the_training_tab_says_what_to_expect_of_an_f5_run_and_nothing_for_matcha(corpus, monkeypatch):
    """Before Start, with F5 chosen: where the run starts and under which licence, then the hours, the time and the
    disk (the Training tab's `#run-guidance` box, filled by this handler on every change of the form)."""
    from utils import hardware
    from utils.f5 import LICENCE
    from webui.context import AppContext
    from webui.training import expectations

    ctx = AppContext(corpus)
    shown = expectations(ctx, "f5", "am", 20_000, "")
    assert shown["visible"] and f"under its licence: {LICENCE}" in shown["value"]
    assert re.search(r"\d+ s of usable speech", shown["value"]) and "for one pass over the data" in shown["value"]
    assert "Checkpoints need up to" in shown["value"]
    base = public_base(corpus.root / "pretrained" / "tab-base")
    assert f"It starts from {base}" in expectations(ctx, "f5", "am", 100, str(base))["value"]
    matcha = expectations(ctx, "matcha", "am", 100, "")["value"]
    assert "Time: about" in matcha  # Matcha says its time too, and the quality checks Start would schedule
    assert "Also 2 quality checks (each speaks the held-out clips" in matcha  # at 50 and 100, about six a run
    assert "Time limit" not in shown["value"]
    settings.save_settings(corpus, {"max_minutes": 45})  # the Optimizations tab's time limit: every run stops there
    try:
        assert "**Time limit: 45 min** (the Optimizations tab's): a run that takes longer ends there with a last" in \
            expectations(ctx, "matcha", "am", 100, "")["value"]
    finally:
        settings.settings_path(corpus).unlink()
    assert expectations(ctx, "f5", None, 100, "")["visible"] is False
    # a machine without a GPU: Start refuses F5, and the box says so before its time there
    monkeypatch.setattr(hardware, "detect", lambda *a, **k: hardware.HardwareReport(gpus=[], cpu_count=2, ram_gb=12,
                                                                                    disk_free_gb=50))
    assert expectations(ctx, "f5", "am", 100, "")["value"].startswith("- **Start refuses F5-TTS on this machine**")


def test_continuing_an_amharic_fine_tune_is_not_warned_as_a_new_language(corpus):
    """`speaks_amharic` was never passed: every start, also one of this studio's Amharic fine-tunes or a base with
    Ethiopic letters, was warned that a new language took 10-15 h."""
    from utils.f5.base import speaks_amharic
    from utils.workspace import atomic_write_json
    from webui.context import AppContext
    from webui.training import expectations

    base = public_base(corpus.root / "pretrained" / "latin-base")
    assert not speaks_amharic(corpus, str(base)) and not speaks_amharic(corpus, "SWivid/F5-TTS")
    assert not speaks_amharic(corpus, "no-such-run")
    voice = corpus.voices / "amharic-f5"
    voice.mkdir(parents=True)
    atomic_write_json(voice / "config.json", {"engine": "f5", "text": {"symbols": ["a", "b", "ሰ", "ላ", "ም"]}})
    assert speaks_amharic(corpus, "amharic-f5")
    ethiopic = public_base(corpus.root / "pretrained" / "ethiopic-base")
    (ethiopic / "vocab.txt").write_text((ethiopic / "vocab.txt").read_text(encoding="utf-8") + "ሀ\n", encoding="utf-8")
    assert speaks_amharic(corpus, str(ethiopic))
    shown = expectations(AppContext(corpus), "f5", "am", 100, "amharic-f5")["value"]
    assert "already speaks Amharic" in shown and "took people" not in shown
    assert "took people" in expectations(AppContext(corpus), "f5", "am", 100, str(base))["value"]
