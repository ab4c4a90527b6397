"""The benchmark harness runs end to end on a CPU in a tiny configuration and writes what RESULTS.md is
built from: a JSON with the machine, the command and the expected rows, and a valid PNG. No timing is
asserted (timings belong in bench/, not in tests). Also: the FP8 option falls back with its reason where it
cannot run, and the training loop converts its losses to Python numbers only when it logs them."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import torch

from tests.helpers import make_dataset

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run_bench(script: str, out: Path, *args: str, name: str = "") -> dict:
    """Run bench/<script>.py with --out; returns its JSON (<name or script>-cpu.json) after checking the PNG
    beside it."""
    log = out / f"{script}.log"
    with open(log, "w") as f:
        proc = subprocess.run([sys.executable, f"bench/{script}.py", "--out", str(out), *args], cwd=ROOT,
                              stdout=f, stderr=subprocess.STDOUT, timeout=240)
    assert proc.returncode == 0, log.read_text()[-3000:]
    record = json.loads((out / f"{name or script}-cpu.json").read_text())
    png = (out / f"{name or script}-cpu.png").read_bytes()
    assert png[:8] == PNG_SIGNATURE and png[12:16] == b"IHDR" and len(png) > 2000
    assert record["machine"]["cpu_cores"] >= 1 and record["machine"]["torch"] == torch.__version__
    assert record["command"].startswith(f"python bench/{script}.py --out ")
    return record


def test_train_throughput_runs_the_cpu_ladder_and_reports_why_fp8_is_skipped(tmp_path):
    record = run_bench("train_throughput", tmp_path, "--steps", "1", "--warmup", "1", "--frames", "400",
                       "--utt-frames", "100", "--rows", "fp32,fused,fp8", "--fp8", "--threads", "1")
    rows = {r["key"]: r for r in record["rows"]}
    assert list(rows) == ["fp32", "fused", "fp8"]
    for key in ("fp32", "fused"):
        assert {"ms_per_step", "samples_per_s", "frames_per_s", "peak_gib", "gpu_util", "data_wait", "vs_fp32",
                "vs_tf32"} <= set(rows[key])
        assert rows[key]["data_wait"] == "synthetic" and rows[key]["gpu_util"] is None
    assert rows["fp32"]["vs_fp32"] == 1.0
    assert rows["fused"]["settings"]["fused_adamw"] == "true" and rows["fused"]["resolved"]["fused_adamw"] is True
    assert "CUDA GPU" in rows["fp8"]["skipped"]


def test_f5_step_times_the_reference_beside_ours_on_the_same_batch(tmp_path):
    """bench/f5_step.py --reference: f5-tts 1.1.22's CFM + DiT built from the same config (the same parameter
    count), one row each, and the ratio of their step times."""
    proc = subprocess.run([sys.executable, "bench/f5_step.py", "--preset", "tiny", "--steps", "1", "--reference",
                           "--threads", "1", "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    record = json.loads((tmp_path / "f5_step-cpu.json").read_text())
    theirs, ours = record["rows"]  # the reference first: its row is printed before ours compiles on a GPU
    assert ours["model"].startswith("ours") and theirs["model"] == "reference (f5-tts 1.1.22)"
    assert proc.stdout.index("reference (f5-tts 1.1.22): ") < proc.stdout.index("ours (models/f5.py): ")
    assert ours["params_m"] == theirs["params_m"] and ours["frames"] == theirs["frames"] == 282
    assert record["speed_vs_reference"] == theirs["ms_per_step"] / ours["ms_per_step"] > 0
    assert "ours vs the reference, same batch and card" in proc.stdout


def test_f5_reference_imports_where_librosa_and_torchaudio_are_missing():
    """The GPU image has neither: stand-ins take their place (the first H200 run failed with "'librosa' is not a
    package" when the stand-in for librosa made librosa.filters look importable)."""
    code = ("import sys; sys.modules['librosa'] = sys.modules['torchaudio'] = None\n"
            "sys.path.insert(0, 'bench'); import f5_step\n"
            "dit, cfm = f5_step.import_reference(); print(dit.DiT.__name__, cfm.CFM.__name__)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["DiT", "CFM"]


def test_batch_sweep_marks_the_trainers_choice(tmp_path):
    record = run_bench("batch_sweep", tmp_path, "--frames", "200", "400", "--utt-frames", "100", "--steps", "1",
                       "--warmup", "1", "--threads", "1")
    assert [r["frames"] for r in record["rows"]] == [200, 400]
    assert all(r["frames_per_s"] > 0 and 0 <= r["padding"] < 1 for r in record["rows"])
    assert record["choice"]["frames"] > 0 and "no probe" in record["choice"]["reason"]
    assert record["rows"][-1]["mark"].startswith("<- nearest")


def test_data_loading_times_the_wait_per_worker_count(tmp_path):
    record = run_bench("data_loading", tmp_path, "--clips", "6", "--frames", "600", "--workers", "0", "1",
                       "--steps", "3", "--step-ms", "5", "--threads", "1")
    assert [r["workers"] for r in record["rows"]] == [0, 1]
    for r in record["rows"]:
        assert 0 <= r["wait_fraction"] < 1 and r["wait_max_ms"] >= r["wait_mean_ms"] >= 0
        assert r["gpu_waits"] in ("yes", "no")


def test_profile_step_names_top_ops_mas_and_host_syncs(tmp_path):
    record = run_bench("profile_step", tmp_path, "--steps", "1", "--warmup", "1", "--frames", "400",
                       "--utt-frames", "100", "--threads", "1")
    assert len(record["top_ops"]) > 3 and all(o["self_ms_per_step"] >= 0 for o in record["top_ops"])
    summary = record["summary"]
    assert summary["mas_ms_per_step"] > 0 and 0 <= summary["padding_fraction"] < 1
    assert summary["mas_alone"]["torch_ms"] > 0
    # the model's MAS round trip through numpy is one of the syncs it finds
    assert any("monotonic_alignment_search" in s["where"] or "models/" in s["where"] for s in record["host_syncs"])


def test_time_to_quality_reports_each_threshold_through_the_given_vocoder(tmp_path):
    from models.vocoder import PRESETS, Vocoder
    from utils.vocoder import save_vocoder

    vocoder = save_vocoder(Vocoder(PRESETS["tiny"]), tmp_path / "my-vocoder")
    record = run_bench("time_to_quality", tmp_path, "--clips", "3", "--val-clips", "1", "--eval-clips", "1",
                       "--steps", "6", "--eval-every", "3", "--mcd", "logmel", "--thresholds", "100", "1",
                       "--threads", "1", "--vocoder", str(vocoder))
    assert record["train_config"]["eval_vocoder"] == "vocoders/bench"
    assert record["curve"] and all(c["mcd"] > 0 and c["minutes"] > 0 for c in record["curve"])
    hit, missed = record["rows"]
    assert hit["threshold_db"] == 100 and hit["mcd"] <= 100 and hit["train_minutes"] <= hit["minutes"]
    assert missed["threshold_db"] == 1 and str(missed["step"]).startswith("not reached")
    # the warm-up, from the run's own files: when its first step was logged (no compilation on this CPU run)
    warm = record["warmup"]
    assert warm["first_log_step"] >= 1 and warm["first_log_s"] > 0 and warm["first_step_s"] is None
    assert warm["said"].startswith(f"step {warm['first_log_step']} logged ")


def test_time_to_quality_scores_the_voice_when_its_time_budget_ends_before_any_scheduled_evaluation(tmp_path):
    """The GPU suite's lane E had ~330 s and a first evaluation at step 200: its run was stopped by a STOP file, which
    evaluates nothing, so it reported no MCD at all. The budget is now the trainer's own (max_minutes): the run
    finishes there with a last evaluation, as a curator's run with a time limit does."""
    record = run_bench("time_to_quality", tmp_path, "--clips", "3", "--val-clips", "1", "--eval-clips", "1",
                       "--minutes", "0.1", "--eval-every", "100000", "--mcd", "logmel", "--threads", "1")
    assert record["train_config"]["max_minutes"] == 0.1
    last = record["curve"][-1]  # none on schedule in 6 s; this one came after the budget: the end's
    assert last["step"] >= 1 and last["mcd"] > 0 and last["minutes"] >= 0.1


def test_time_to_quality_defaults_compile_as_a_run_without_its_time_limit_would(tmp_path, monkeypatch, capsys):
    """Lane E measures the first minutes of a curator's default run (20,000 steps, no time limit). Its budget is a
    time limit, and under one `auto` compiles only if it pays within it: the lane would have measured an eager run
    no curator starts. It takes the verdict of the run without the limit, and says it."""
    import importlib

    from utils import hardware

    ttq = importlib.import_module("time_to_quality")

    def machine(cores: int, gpu: str, gib: float, cc: str):
        report = hardware.HardwareReport(gpus=[hardware.GPUInfo(0, gpu, gib, cc, 100)], cpu_count=cores, ram_gb=128,
                                         disk_free_gb=500)
        report.recommended = hardware.recommend(report)
        return lambda *a, **k: report

    args = type("Args", (), {"workspace": tmp_path, "dataset": "bench"})()
    monkeypatch.setattr(hardware, "detect", machine(16, "NVIDIA H200", 139.8, "9.0"))
    assert ttq.compile_without_limit(args, "base", 20_000) == "true"
    assert "run without a time limit: on: " in capsys.readouterr().out
    monkeypatch.setattr(hardware, "detect", machine(2, "Tesla T4", 14.7, "7.5"))
    assert ttq.compile_without_limit(args, "base", 1_000) == "false"
    assert "it pays from about" in capsys.readouterr().out


def test_time_to_quality_ab_trains_each_value_on_the_same_clips_with_the_same_step_budget(tmp_path):
    record = run_bench("time_to_quality", tmp_path, "--clips", "3", "--val-clips", "1", "--eval-clips", "1",
                       "--steps", "4", "--eval-every", "2", "--mcd", "logmel", "--threads", "1",
                       "--ab", "blanks=true,false", name="ab_blanks")
    assert [s["setting"] for s in record["summary"]] == ["blanks=true", "blanks=false"]
    assert all(s["steps"] == 4 and s["best"] > 0 for s in record["summary"])
    assert [c["step"] for c in record["curves"]["blanks=true"]] == [2, 4] == [
        c["step"] for c in record["curves"]["blanks=false"]]


def test_inference_reports_the_real_time_factor_per_device_and_vocoder(tmp_path):
    record = run_bench("inference", tmp_path, "--presets", "tiny", "--batch", "1", "2", "--sentences", "2",
                       "--tokens", "12", "--steps", "2", "--threads", "1")
    assert [(r["device"], r["batch"]) for r in record["rows"]] == [("cpu", 1), ("cpu", 2)]
    for r in record["rows"]:
        assert r["audio_s"] == 2 * 12 * 7 * 256 / 24000  # every symbol got --frames-per-token frames
        # each vocoder's RTF adds its time to the acoustic model's; which vocoder is faster is the bench's to say
        # (asserted, it failed on a machine busy with other work: Vocos 0.157 against Griffin-Lim 0.141)
        assert 0 < r["acoustic_rtf"] < min(r["vocos_rtf"], r["griffin_lim_rtf"])


def test_vocoder_throughput_times_generation_griffin_lim_and_the_trainers_gan_step(tmp_path):
    record = run_bench("vocoder_throughput", tmp_path, "--seconds", "1", "--repeat", "1", "--train-batch", "1",
                       "--train-repeat", "1", "--threads", "1", "--devices", "cpu")
    models = [r["model"] for r in record["rows"]]
    assert models == ["vocos mel-24khz", "vocos tiny", "griffin-lim 64 it", "GAN train step fp32, batch 1 x 16384"]
    assert all(r["x_realtime"] > 0 for r in record["rows"])


def test_op_count_counts_the_casts_bf16_autocast_adds_under_cudas_rule(tmp_path):
    record = run_bench("op_count", tmp_path, "--presets", "tiny", "--frames", "800", "--utt", "200", "--threads", "1")
    fp32, bf16 = record["rows"]
    assert (fp32["precision"], bf16["precision"]) == ("fp32", "bf16")
    assert bf16["by_op"]["mm"] == fp32["by_op"]["mm"] > 0  # the same model, the same matmuls
    assert bf16["casts"] > 10 * max(1, fp32["casts"])
    assert bf16["kernels"] - bf16["casts"] == fp32["kernels"] - fp32["casts"]  # what bf16 adds is its casts


def test_fp8_request_falls_back_with_the_reason_where_it_cannot_run():
    from tests.test_training_optimizations import cpu_report, h100_report
    from models.matcha import MatchaConfig, MatchaTTS
    from utils import hardware
    from utils.matcha.settings import compile_targets
    from utils.training import optimization as opt
    from utils.training.config import TrainConfig

    default = opt.resolve(TrainConfig(preset="tiny"), h100_report())
    assert default.fp8 is False and "off unless asked" in default.reasons["fp8"]
    cpu = opt.resolve(TrainConfig(preset="tiny", fp8="true"), cpu_report())
    assert cpu.fp8 is False and "asked for, but off" in cpu.reasons["fp8"] and "CUDA GPU" in cpu.reasons["fp8"]
    assert any(line.startswith("fp8") and "asked for, but off" in line for line in cpu.describe())  # the run's log
    a100 = hardware.HardwareReport(gpus=[hardware.GPUInfo(0, "NVIDIA A100-SXM4-80GB", 79.2, "8.0", 108)],
                                   cpu_count=16, ram_gb=128, disk_free_gb=500)
    a100.recommended = hardware.recommend(a100)
    assert "no FP8 tensor cores" in opt.resolve(TrainConfig(fp8="true"), a100).reasons["fp8"]
    h100 = opt.resolve(TrainConfig(fp8="true"), h100_report())
    if importlib.util.find_spec("torchao") is None:
        assert h100.fp8 is False and "torchao is not installed" in h100.reasons["fp8"]
    else:
        assert h100.fp8 is True
    model = MatchaTTS(MatchaConfig.preset_config("tiny", n_symbols=20))
    opt.apply_model_settings(model, cpu, compile_targets(model))
    assert all(type(m) is torch.nn.Linear for m in model.modules() if isinstance(m, torch.nn.Linear))


def test_training_loop_keeps_losses_on_the_device_between_log_lines(tmp_path):
    """Turning every step's loss into a Python float makes the CPU wait for the GPU each step (a host sync)."""
    from profile_step import ConversionCounter

    from utils.training import TrainConfig, prepare_run, run

    ws = make_dataset(tmp_path / "ws", n_train=3, n_val=1, max_chars=30)
    counts = []
    for n in (3, 6):
        cfg = TrainConfig(workspace=str(ws.root), dataset="am", run=f"r{n}", preset="tiny", max_steps=n,
                          log_every=n, eval_every=0, checkpoint_every=1000, mcd="logmel", eval_clips=1,
                          sample_clips=0, ode_steps=2, max_frames_per_batch=400, grad_accumulation=1)
        with ConversionCounter("cpu") as conversions:
            run(prepare_run(cfg))
        counts.append(sum(c for where, c in conversions.counts.items()
                          if where.startswith("utils/training/loop.py") and where.endswith(".float")))
    assert counts[0] == counts[1] > 0  # a fixed number per log line, none per step


def test_train_startup_compares_the_old_and_new_reads_on_the_same_clips(tmp_path):
    record = run_bench("train_startup", tmp_path, "--clips", "12", "--seconds", "1", "--warm")
    before, now = record["rows"]
    assert before["clips"] == now["clips"] == 12 and {"hash_s", "frames_s", "stats_s", "total_s"} <= set(now)
    assert now["mel_mean"] == before["mel_mean"] and now["mel_std"] == before["mel_std"]  # 12 < the sample size
    assert now["mb_read"] < before["mb_read"]  # headers and an index instead of whole files


def test_dataset_scale_times_each_click_beside_the_old_whole_file_edit(tmp_path):
    record = run_bench("dataset_scale", tmp_path, "--rows", "300", "900", "--repeat", "1")
    assert [r["rows"] for r in record["records"]] == [300, 900]
    for r in record["records"]:
        assert all(r[k] > 0 for k in ("select", "open_row", "fix_text", "exclude", "deep_page", "jsonl_edit"))
        assert r["table_mb"] > 0 and r["clicks_rss_mb"] > 0



def test_compile_shapes_counts_graphs_per_part_before_and_after_on_synthetic_lengths():
    """`--synthetic-hours` needs no audio: the lengths of a lognormal 1-20 s set through the trainer's sampler."""
    out = subprocess.run([sys.executable, "bench/compile_shapes.py", "--synthetic-hours", "2", "--epochs", "2"],
                         cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(x for x in out.stdout.splitlines() if x.startswith("graphs per part: before encoder "))
    after = line.split("; after ")[1]
    assert int(after.split("encoder ")[1].split(",")[0]) <= 8 and int(after.split("decoder ")[1].split(" ")[0]) <= 8
