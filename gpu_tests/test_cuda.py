"""The trainer's and the voice's CUDA paths, run for real on a GPU (see conftest.py for how to run them).

Each test is one promise of the training loop that only a GPU can check: the hardware defaults
(bf16, TF32, flash attention, fused AdamW, torch.compile) train; the flash kernel is the one that runs;
fp16 with its gradient scaler survives a NaN; the batch probe finds what fits under a memory cap; a real
CUDA out-of-memory halves the micro-batch and training goes on; resume continues the curve; GPU memory
lands in metrics.jsonl; the vocoder trains; a voice speaks on the GPU, batched as it does alone.
"""
from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
import torch

from utils.training import TrainConfig, load_checkpoint, prepare_run, run
from utils.workspace import read_jsonl


def config(ws, name: str, **kw) -> TrainConfig:
    base = dict(workspace=str(ws.root), dataset="bench", run=name, preset="small", max_steps=40, lr=1e-3,
                warmup_steps=5, log_every=5, eval_every=0, checkpoint_every=20, keep_checkpoints=2, mcd="logmel",
                eval_clips=2, sample_clips=1, ode_steps=4, compile="false")
    base.update(kw)
    return TrainConfig.from_dict(base)  # a family's own settings (mas, blanks...) by name too


def metrics(ws, name: str) -> list[dict]:
    return read_jsonl(ws.run_dir(name) / "metrics.jsonl")


def train_log(ws, name: str) -> str:
    return (ws.run_dir(name) / "train.log").read_text()


DEFAULTS_BUDGET_S = 240  # the defaults run's wall budget: Stop is pressed then, as a curator would


@pytest.mark.timeout(DEFAULTS_BUDGET_S + 160)  # the step running at Stop ends first: a graph being compiled, ~1-2 min
def test_hardware_defaults_train_with_every_gpu_optimization_on(corpus):
    """device/precision/attention/... all 'auto': what a user gets on an H100 without touching a setting, and compile
    forced on, as 'auto' sets it for a run long enough that its compile time pays (utils/training/compile_pays.py).
    Its batches take a few planned shapes (utils/training/shapes.py); a compilation that fails would be said and the
    run go on.

    A budget it can meet: the run is stopped after DEFAULTS_BUDGET_S seconds (data, probe and compilation included),
    however many steps that was (the H200 suite's 60 steps met the 300 s test limit at step ~15: 143 s for the
    first step, 4 graphs); it must have trained at least 4 steps by then (the loss falls, an evaluation at step 4).
    Its train.log (in the suite's archive) says what the warm-up cost."""
    path = prepare_run(config(corpus, "auto", compile="true", max_steps=2000, log_every=1, eval_every=0,
                              early_evals="4", checkpoint_every=1000))
    stop = threading.Timer(DEFAULTS_BUDGET_S, lambda: (path.parent / "STOP").write_text("the test's budget"))
    stop.start()
    try:
        result = run(path)
    finally:
        stop.cancel()
    log = train_log(corpus, "auto")
    warm = [line for line in log.splitlines() if "first step took" in line or "graph(s) built" in line]
    assert result["state"] == "stopped" and result["step"] >= 4, (result, warm)
    resolved = json.loads((corpus.run_dir("auto") / "config.json").read_text())["resolved"]
    assert resolved["device"] == "cuda" and resolved["precision"] == "bf16"
    assert resolved["tf32"] is True and resolved["attention"] == "flash" and resolved["fused_adamw"] is True
    assert resolved["compile"] is True and resolved["cudnn_benchmark"] is True and resolved["mas"] == "triton"
    assert resolved["probe"] is True and resolved["max_frames_per_batch"] > 0
    # the probe decides how the effective batch is split, not its size: the same on every GPU
    from utils.hardware import TARGET_FRAMES_PER_STEP
    effective = resolved["max_frames_per_batch"] * resolved["grad_accumulation"]
    assert effective == resolved["effective_batch"] and 0 <= effective - TARGET_FRAMES_PER_STEP < 64, resolved
    rows = [r for r in metrics(corpus, "auto") if "loss" in r]
    first, last = np.mean([r["loss"] for r in rows[:2]]), np.mean([r["loss"] for r in rows[-2:]])
    assert last < first, (first, last)
    for key in ("gpu_mem_allocated_gb", "gpu_mem_reserved_gb", "gpu_mem_peak_gb"):
        assert all(r[key] > 0 for r in rows), key
    assert rows[-1]["gpu_mem_peak_gb"] >= rows[-1]["gpu_mem_allocated_gb"]
    for word in ("bf16", "tf32", "flash", "fused_adamw", "compile", "probe", "first step took"):
        assert word in log, word
    assert "(torch.compile) failed" not in log, log  # it would not end the run, but it must not happen here
    assert any("mcd" in r for r in metrics(corpus, "auto"))


def test_flash_backend_runs_the_flash_kernel_and_math_does_not(corpus):
    from models.matcha import MatchaConfig, MatchaTTS

    model = MatchaTTS(MatchaConfig.preset_config("small", n_symbols=80, n_speakers=2)).cuda()
    tokens = torch.randint(1, 80, (4, 60), device="cuda")
    lens = torch.full((4,), 60, device="cuda")

    def kernels(backend: str) -> list[str]:
        model.set_attention_backend(backend)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof, \
                torch.autocast("cuda", dtype=torch.bfloat16), torch.no_grad():
            model.encode(tokens, lens, torch.zeros(4, dtype=torch.long, device="cuda"))
            torch.cuda.synchronize()
        return [e.key.lower() for e in prof.key_averages()]

    flash = kernels("flash")
    assert any("flash" in k for k in flash), flash
    assert not any("flash" in k for k in kernels("math"))


def test_fp16_scaler_skips_a_nan_step_and_lowers_the_scale(corpus):
    result = run(prepare_run(config(corpus, "fp16", precision="fp16", max_steps=12, fault_nan_steps=[4],
                                    checkpoint_every=100)))
    assert result["state"] == "finished"
    log = train_log(corpus, "fp16")
    assert "step 4: non-finite loss/gradients, step skipped, loss scale lowered" in log
    scales = [r["loss_scale"] for r in metrics(corpus, "fp16") if "loss_scale" in r]
    assert scales and min(scales) < 65536.0
    state = torch.load(corpus.run_dir("fp16") / "checkpoints" / "step-12" / "trainer_state.pt", weights_only=False)
    assert state["scaler"]["scale"] > 0


def test_probe_measures_what_fits_under_a_memory_cap(corpus):
    """Half of the GPU's memory refused: the probe must find a smaller batch than with the whole GPU."""
    def probed(name: str) -> int:
        run(prepare_run(config(corpus, name, preset="base", max_steps=2, checkpoint_every=100, eval_every=0)))
        return json.loads((corpus.run_dir(name) / "config.json").read_text())["resolved"]["max_frames_per_batch"]

    whole = probed("probe-whole")
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(0.04)  # ~3 GiB of an 80 GiB H100, ~5.6 GiB of a 140 GiB H200
    try:
        capped = probed("probe-capped")
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    assert 0 < capped < whole, (capped, whole)
    assert "fitted in one real step" in json.loads((corpus.run_dir("probe-capped") / "config.json").read_text()
                                                   )["reasons"]["max_frames_per_batch"]


def test_a_real_cuda_out_of_memory_halves_the_micro_batch_and_training_goes_on(corpus):
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(0.03)
    try:
        result = run(prepare_run(config(corpus, "oom", preset="base", probe="false", max_frames_per_batch=120_000,
                                        grad_accumulation=1, max_steps=4, checkpoint_every=100)))
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    assert result["state"] == "finished" and result["step"] == 4, result
    assert "out of memory at step 0: micro-batch halved" in train_log(corpus, "oom")


def test_resume_on_gpu_continues_the_loss_curve(corpus):
    straight = config(corpus, "straight", max_steps=16, checkpoint_every=8, precision="fp32", tf32="false",
                      attention="math", probe="false", max_frames_per_batch=4000, grad_accumulation=1, log_every=4)
    run(prepare_run(straight))
    run_dir = corpus.run_dir("halves")
    path = prepare_run(config(corpus, "halves", **{k: v for k, v in straight.to_dict().items()
                                                    if k not in ("workspace", "run")}))

    def stop_at_8():
        while not any(r.get("step", 0) >= 8 for r in (read_jsonl(run_dir / "metrics.jsonl")
                                                      if (run_dir / "metrics.jsonl").exists() else [])):
            time.sleep(0.01)
        (run_dir / "STOP").write_text("stop")

    threading.Thread(target=stop_at_8, daemon=True).start()
    first = run(path)
    assert first["state"] == "stopped"
    second = run(prepare_run(config(corpus, "halves", **{k: v for k, v in straight.to_dict().items()
                                                         if k not in ("workspace", "run")})))
    assert second["state"] == "finished" and second["step"] == 16
    a = {r["step"]: r["loss"] for r in metrics(corpus, "straight") if "loss" in r}
    b = {r["step"]: r["loss"] for r in metrics(corpus, "halves") if "loss" in r}
    for step in (12, 16):  # cuDNN/atomics make GPU sums order-dependent: the same curve within noise
        assert b[step] == pytest.approx(a[step], rel=0.02), step


def test_vocoder_trains_on_the_gpu(corpus):
    from utils.vocoder.training import VocoderTrainConfig, prepare_vocoder_run, train_vocoder

    cfg = VocoderTrainConfig(dataset="bench", run="voc", max_steps=6, batch_size=4, log_every=2, eval_every=6,
                             checkpoint_every=6, val_clips=2, mcd_clips=0, device="auto")
    prepare_vocoder_run(corpus, cfg)
    events = list(train_vocoder(corpus, cfg))
    text = "\n".join(str(getattr(e, "message", e)) for e in events)
    assert "cuda" in text, text[-2000:]
    assert "tf32             on" in text and "cudnn_benchmark  on" in text, text[-2000:]
    assert (corpus.run_dir("voc") / "checkpoints").exists()


def a_trained_voice(ws) -> str:
    """The last checkpoint of the compiled run (test_hardware_defaults_...), or, run alone, of a short one of its own."""
    status = ws.run_dir("auto") / "status.json"
    if status.exists() and json.loads(status.read_text()).get("last_checkpoint"):
        return json.loads(status.read_text())["last_checkpoint"]
    result = run(prepare_run(config(ws, "speaker", max_steps=20, checkpoint_every=20)))
    assert result["state"] == "finished", result
    return json.loads((ws.run_dir("speaker") / "status.json").read_text())["last_checkpoint"]


def test_a_trained_voice_speaks_on_the_gpu_batched_as_alone(corpus, exact_fp32):
    """Padding must not change a sentence (masked attention and GroupNorm): the mels batched and alone agree, checked
    in exact fp32 (see exact_fp32: with TF32 the kernels a shape gets differ in rounding, which is noise, not padding
    leaking in). The waveforms are compared as a whole: Griffin-Lim turns the mels' last-digit differences into
    samples up to 3 % of the peak apart (the H100 run, exact fp32, mels within 1e-3), not a sign of leaking padding."""
    from utils.inference import Voice

    folder = a_trained_voice(corpus)
    model, _ = load_checkpoint(folder, device="cuda")
    assert next(model.parameters()).is_cuda
    voice = Voice.load(folder, device="cuda")
    text = "ሰላም ነው። ዛሬ አየሩ ጥሩ ነው። እንዴት ነህ?"
    together, sr, info = voice.synthesize(text, temperature=0.0, batch_size=3)
    alone, _, alone_info = voice.synthesize(text, temperature=0.0, batch_size=1)
    assert sr == 24000 and len(together) > sr and np.isfinite(together).all()
    assert len(together) == len(alone)
    for batched, lone in zip(info["mels"], alone_info["mels"]):  # the acoustic model's output, before the vocoder
        torch.testing.assert_close(torch.as_tensor(batched), torch.as_tensor(lone), atol=1e-3, rtol=1e-3)
    apart = float(np.linalg.norm(together - alone) / max(1e-9, np.linalg.norm(alone)))
    assert apart < 5e-2, f"batched and alone {apart:.2%} apart (L2), {np.abs(together - alone).max():.4f} at most"


def test_triton_alignment_search_matches_cython_on_training_sized_batches():
    """The trainer's GPU default: same paths as the Cython kernel on the CPU, on long padded batches."""
    from models.alignment import mas_disagreement, maximum_path, sequence_mask

    assert mas_disagreement("triton", "cuda") == ""
    g = torch.Generator().manual_seed(0)
    n_lens = torch.randint(20, 300, (24,), generator=g, device=g.device)
    t_lens = n_lens * 4 + torch.randint(0, 400, (24,), generator=g, device=g.device)
    log_p = torch.randn(24, int(n_lens.max()), int(t_lens.max()), generator=g, device=g.device) * 4
    mask = (sequence_mask(n_lens)[:, :, None] & sequence_mask(t_lens)[:, None, :]).float()
    assert torch.equal(maximum_path(log_p.cuda(), mask.cuda(), "triton").cpu(), maximum_path(log_p, mask, "cython"))


def test_bf16_autocast_keeps_the_models_activations_bf16_on_the_gpu():
    """CUDA autocast runs layer norms in fp32: the model casts their outputs (and its masks) back, so the
    saved activations are bf16 as on the CPU (tests/test_model.py has the same check there)."""
    from models.matcha import MatchaConfig, MatchaTTS

    model = MatchaTTS(MatchaConfig.preset_config("small", n_symbols=80, n_speakers=2)).cuda()
    dtypes = {}
    for name, module in model.named_modules():
        if name and name.count(".") <= 3:
            module.register_forward_hook(lambda m, i, o, name=name: dtypes.setdefault(
                name, (o[0] if isinstance(o, tuple) else o).dtype) and None)
    tokens = torch.randint(1, 80, (4, 60), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        model(tokens, torch.full((4,), 60), torch.randn(4, 100, 240, device="cuda"), torch.full((4,), 240),
              torch.zeros(4, dtype=torch.long, device="cuda"))
    assert {n for n, d in dtypes.items() if d == torch.float32} == {"encoder.emb", "spk_emb", "decoder.estimator"}
