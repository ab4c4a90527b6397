"""Each optimization switch changes the code path it claims (inspected on CPU, never timed), and the
measured batch probe bisects to what fits."""
from __future__ import annotations

import json
import warnings
from dataclasses import replace

import pytest
import torch

from models.matcha import MatchaConfig, MatchaTTS
from tests.test_training import corpus, tiny_config  # noqa: F401  (module fixture)
from utils import hardware
from utils.datasets import load_manifest
from utils.events import StudioError
from utils.training import prepare_run, run
from utils.training import optimization as opt
from utils.training.config import TrainConfig
from utils.training.batching import Collate, FrameBatchSampler, make_loader, split_batch
from utils.training.probe import probe_max_frames

torch.set_num_threads(1)


def h100_report() -> hardware.HardwareReport:
    report = hardware.HardwareReport(gpus=[hardware.GPUInfo(0, "NVIDIA H100 80GB HBM3", 79.2, "9.0", 132)],
                                     cpu_count=16, ram_gb=128, disk_free_gb=500)
    report.recommended = hardware.recommend(report)
    return report


def cpu_report() -> hardware.HardwareReport:
    report = hardware.HardwareReport(gpus=[], cpu_count=2, ram_gb=16, disk_free_gb=50)
    report.recommended = hardware.recommend(report)
    return report


def test_auto_settings_follow_the_hardware_recommendation_with_reasons():
    gpu = opt.resolve(TrainConfig(preset="base"), h100_report())
    assert gpu.device == "cuda" and gpu.precision == "bf16" and gpu.tf32 and gpu.attention == "flash"
    assert gpu.compile and gpu.length_multiple == 64 and gpu.fused_adamw and gpu.cudnn_benchmark
    assert gpu.pin_memory and gpu.num_workers > 0 and gpu.persistent_workers and gpu.probe
    assert all(gpu.reasons[k] for k in gpu.values)
    cpu = opt.resolve(TrainConfig(preset="tiny"), cpu_report())
    assert (cpu.device, cpu.precision, cpu.tf32, cpu.attention, cpu.compile) == ("cpu", "fp32", False, "math", False)
    assert not cpu.pin_memory and not cpu.fused_adamw and not cpu.probe and cpu.length_multiple == 4
    assert gpu.mas == "triton" and cpu.mas == "cython"  # alignment search where the tensors are
    assert gpu.lr == 2e-4 and cpu.lr == 2e-3 and "clearer voice in 3 minutes" in cpu.reasons["lr"]  # the size's rate
    assert opt.resolve(TrainConfig(preset="tiny", lr="1e-3"), cpu_report()).lr == 1e-3  # as the CLI passes it
    with pytest.raises(StudioError, match="mas triton runs on a CUDA GPU"):
        opt.resolve(TrainConfig(preset="tiny", options={"mas": "triton"}), cpu_report())
    short = opt.resolve(TrainConfig(preset="base", max_steps=2000), h100_report())
    assert not short.compile and "it pays from about" in short.reasons["compile"]
    assert short.length_multiple == 4  # nothing compiled: no padding for it either
    assert opt.resolve(TrainConfig(preset="base", max_steps=100, compile="true"), h100_report()).compile
    forced = opt.resolve(TrainConfig(preset="tiny", attention="flash", compile="true", grad_checkpointing="true",
                                     max_frames_per_batch=1234, grad_accumulation=3), cpu_report())
    assert forced.attention == "flash" and forced.compile and forced.grad_checkpointing
    assert forced.max_frames_per_batch == 1234 and forced.grad_accumulation == 3
    assert forced.reasons["attention"] == "set by the user"
    # --device cpu on a GPU machine (a quick check beside a run on the card) gets a CPU's settings, not the card's
    asked_cpu = opt.resolve(TrainConfig(preset="tiny", device="cpu"), h100_report())
    assert (asked_cpu.device, asked_cpu.precision, asked_cpu.compile, asked_cpu.pin_memory, asked_cpu.probe) == \
        ("cpu", "fp32", False, False, False)
    assert asked_cpu.max_frames_per_batch == cpu.max_frames_per_batch and asked_cpu.mas == "cython"


def test_auto_compiles_only_where_the_faster_steps_win_back_the_compile_time(tmp_path):
    """`auto` compiled every run of 2,000 steps or more on any Linux GPU of compute 7.0, a T4 with 2 CPU cores
    included, reasoned from one batch shape. Now the graphs a run builds (its batch shapes x compiled parts), what one
    costs on this machine (CPU cores; measured by earlier graphs of the workspace) and what a step saves decide, and
    the reason gives the numbers."""
    import re

    from utils.training import compile_pays

    def resolved(gpu: hardware.GPUInfo, cores: int, steps: int, minutes: float = 0) -> opt.Machine:
        report = hardware.HardwareReport(gpus=[gpu], cpu_count=cores, ram_gb=64, disk_free_gb=100)
        report.recommended = hardware.recommend(report)
        return opt.resolve(TrainConfig(preset="base", max_steps=steps, workspace=str(tmp_path), max_minutes=minutes),
                           report)

    h100 = h100_report().gpus[0]
    t4 = hardware.GPUInfo(0, "Tesla T4", 14.7, "7.5", 40)
    assert resolved(h100, 16, 50_000).compile and not resolved(h100, 16, 5_000).compile  # long runs pay
    assert resolved(h100, 16, 20_000).compile and not resolved(h100, 2, 20_000).compile  # fewer cores: dearer graphs
    assert resolved(t4, 2, 20_000).compile and not resolved(t4, 2, 1_000).compile  # a T4's slow steps save more each
    on, off = resolved(h100, 16, 20_000).reasons["compile"], resolved(h100, 2, 20_000).reasons["compile"]
    assert on.startswith("on: ") and "16 graph(s)" in on and "estimated for 16 CPU core(s)" in on
    assert off.startswith("off: ") and "estimated for 2 CPU core(s)" in off
    assert re.search(r"it pays from about \d+ steps", off)
    assert resolved(h100, 2, 20_000).length_multiple == 4  # nothing compiled: no padding for it
    # a time limit leaves time for fewer steps than the run asks: the graphs must pay within it
    short = resolved(h100, 16, 50_000, minutes=10)
    assert not short.compile and "what its time limit of 10 min leaves time for" in short.reasons["compile"]
    needed = int(re.search(r"it pays with a time limit of about (\d+) min or more", short.reasons["compile"])[1])
    assert resolved(h100, 16, 50_000, minutes=needed + 1).compile
    assert not resolved(h100, 16, 50_000, minutes=needed - 1).compile
    assert resolved(h100, 16, 50_000, minutes=24 * 60).compile  # a limit the steps end before changes nothing
    report = hardware.HardwareReport(gpus=[h100], cpu_count=2, ram_gb=64, disk_free_gb=100)
    for _ in range(3):  # graphs this machine built fast before (a warm cache, a fast CPU): the next run knows it
        compile_pays.remember(tmp_path, compile_pays.machine_key(report), 10.0, is_warm=False)
    measured = resolved(h100, 2, 20_000)
    assert measured.compile and "measured by 3 earlier graph(s) here" in measured.reasons["compile"]


def test_a_run_settles_auto_compile_with_its_own_shapes_and_measured_batch(tmp_path, monkeypatch):
    """resolve() can only count the most graphs a run may need (8 shapes x 2 parts) and the guessed batch; once the
    data is read and the probe has measured the batch, the run decides with its own numbers: 800 frames a step
    instead of 40,000 save too little a step for its graphs, and nothing is compiled or padded for them."""
    from models.matcha import MatchaConfig, MatchaTTS
    from utils.matcha.adapter import MatchaAdapter
    from utils.training.data import Item

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "before"))  # a compiling run sets its own
    adapter = MatchaAdapter(TrainConfig(preset="base", max_steps=20_000, workspace=str(tmp_path), dataset="am",
                                        run="r"), h100_report())
    m = adapter.machine
    assert m.compile and "16 graph(s)" in m.reasons["compile"]  # the most a run may need, at the guessed batch
    adapter.items = [Item({}, [1] * 20, 150 + 10 * (i % 3), 0) for i in range(40)]
    adapter.model = MatchaTTS(MatchaConfig.preset_config("tiny", n_symbols=20))
    assert len(adapter.compile_targets()) == 2 and m.compile  # its own shapes: it pays
    assert "2 graph(s)" in m.reasons["compile"]
    m.set("max_frames_per_batch", 800, "measured by the probe")
    assert adapter.compile_targets() == [] and not m.compile and m.length_multiple == 4
    assert m.reasons["compile"].startswith("off: ") and "it pays from about" in m.reasons["compile"]
    resumed = MatchaAdapter(TrainConfig(preset="base", max_steps=20_000, workspace=str(tmp_path), dataset="am",
                                        run="resumed"), h100_report())
    saved = resumed.run_dir / "checkpoints" / "step-19900"
    saved.mkdir(parents=True)
    for name in ("model.safetensors", "config.json", "trainer_state.pt"):  # what makes a folder resumable
        (saved / name).write_bytes(b"")
    resumed.items, resumed.model = adapter.items, adapter.model
    assert resumed.compile_targets() == []  # 100 steps left, not 20,000, win back no graph
    assert resumed.machine.reasons["compile"].startswith("off: ") and " 100 steps saving" in resumed.machine.reasons["compile"]
    # half way, a resume skips the probe: the verdict weighs the batch the run trained with (its checkpoint's),
    # not the machine's first guess, under which 10,000 steps would pay
    halfway = MatchaAdapter(TrainConfig(preset="base", max_steps=20_000, workspace=str(tmp_path), dataset="am",
                                        run="halfway"), h100_report())
    halfway.items, halfway.model = adapter.items, adapter.model
    assert len(halfway.compile_targets()) == 2  # a new run of it, at the guessed batch
    saved = halfway.run_dir / "checkpoints" / "step-10000"
    saved.mkdir(parents=True)
    for name in ("model.safetensors", "trainer_state.pt"):
        (saved / name).write_bytes(b"")
    (saved / "config.json").write_text(json.dumps({"resolved": {"max_frames_per_batch": 800}}))
    halfway.machine.set("compile", True, "auto, before the run's own numbers")
    assert halfway.compile_targets() == [] and halfway.machine.max_frames_per_batch == 800
    assert halfway.machine.reasons["max_frames_per_batch"].startswith("kept from the run being resumed")


def test_a_graph_measured_at_no_cost_or_no_graph_to_build_still_gets_a_verdict():
    """Graph costs are kept rounded to 0.1 s: a workspace whose records read 0.0 divided the saving by nothing
    and the run failed as it settled compile; a cost is never taken below 0.1 s a graph, nor fewer than one graph."""
    from utils.training import compile_pays

    for graphs, graph_s in ((16, 0.0), (0, 45.0)):
        on, why = compile_pays.verdict(graphs, 20_000, graph_s, "measured", 0.5)
        assert on and why.startswith("on: ")
    assert not compile_pays.verdict(16, 10, 0.0, "measured", 0.001)[0]  # a floor, not a free pass


def test_backend_flags_autocast_and_scaler_follow_the_settings():
    gpu = opt.resolve(TrainConfig(preset="base"), h100_report())
    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    try:
        opt.apply_backend_flags(gpu)
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        assert torch.backends.cudnn.benchmark
    finally:
        (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark) = old
    with warnings.catch_warnings():  # no CUDA here: torch warns that the cuda autocast it builds is inactive
        warnings.simplefilter("ignore", UserWarning)
        ctx = opt.autocast(gpu)
    assert ctx.fast_dtype == torch.bfloat16 and ctx.device == "cuda"
    cpu16 = opt.resolve(TrainConfig(preset="tiny", precision="fp16"), cpu_report())
    assert opt.grad_scaler(cpu16).is_enabled()
    cpu32 = opt.resolve(TrainConfig(preset="tiny"), cpu_report())
    assert not opt.grad_scaler(cpu32).is_enabled()
    assert type(opt.autocast(cpu32)).__name__ == "nullcontext"


def test_model_settings_set_attention_checkpointing_and_compile_on_the_modules():
    from utils.matcha.settings import compile_targets

    model = MatchaTTS(MatchaConfig.preset_config("tiny", n_symbols=30, n_speakers=2))
    m = opt.resolve(TrainConfig(preset="tiny", attention="flash", compile="true", grad_checkpointing="true"),
                    cpu_report())
    assert model.encoder._compiled_call_impl is None
    opt.apply_model_settings(model, m, compile_targets(model))
    assert model.encoder._compiled_call_impl is not None and model.decoder.estimator._compiled_call_impl is not None
    assert model.encoder.grad_checkpointing and model.decoder.estimator.grad_checkpointing
    assert {a.backend for a in model.modules() if type(a).__name__ == "Attention"} == {"flash"}
    assert set(model.state_dict()) == set(MatchaTTS(model.cfg).state_dict())  # checkpoints stay loadable


def test_fused_adamw_and_decay_groups():
    model = MatchaTTS(MatchaConfig.preset_config("tiny", n_symbols=30, n_speakers=2))
    cfg = TrainConfig(preset="tiny")
    fused = opt.make_optimizer(model, cfg, opt.resolve(TrainConfig(preset="tiny", fused_adamw="true"), cpu_report()))
    plain = opt.make_optimizer(model, cfg, opt.resolve(cfg, cpu_report()))
    assert fused.defaults["fused"] and not plain.defaults.get("fused") and plain.defaults["foreach"]
    no_decay = {id(p) for p in fused.param_groups[1]["params"]}
    assert id(model.encoder.emb.weight) in no_decay and id(model.spk_emb.weight) in no_decay
    assert fused.param_groups[1]["weight_decay"] == 0.0


def test_lr_warms_up_then_decays():
    cfg = TrainConfig(lr=1e-3, warmup_steps=10, max_steps=100, min_lr_ratio=0.1)
    lrs = [opt.lr_at(s, cfg) for s in range(100)]
    assert lrs[0] < lrs[5] < lrs[9] == 1e-3 and lrs[-1] < lrs[50] < lrs[10] and min(lrs[10:]) >= 1e-4 - 1e-12


def test_ema_warms_up_so_a_short_run_is_not_averaged_with_its_random_start():
    cfg = TrainConfig(ema_decay=0.999)
    decays = [opt.ema_decay_at(s, cfg) for s in (0, 10, 90, 990, 20_000)]
    assert decays[0] == 0.1 and decays[1] == 11 / 20 and decays[2] == 0.91 and decays == sorted(decays)
    assert decays[-1] == 0.999  # a long run ends at the configured decay
    kept = 1.0
    for step in range(2000):  # the weight left on the initial weights after a 2000-step CPU run
        kept *= opt.ema_decay_at(step, cfg)
    assert kept < 1e-3  # was 0.999 ** 2000 = 13.5 % before the warm-up


def test_frame_batches_respect_the_budget_bucket_shapes_and_shard_across_ranks():
    g = torch.Generator().manual_seed(0)
    frames = [int(x) for x in torch.randint(50, 900, (200,), generator=g)]
    sampler = FrameBatchSampler(frames, 4000, seed=3, length_multiple=64)
    batches = sampler.epoch_batches(0)
    assert sorted(i for b in batches for i in b) == list(range(200))  # every clip once per epoch
    pad = lambda n: -(-n // 64) * 64  # noqa: E731
    assert all(max(pad(frames[i]) for i in b) * len(b) <= 4000 for b in batches)
    assert len({max(pad(frames[i]) for i in b) for b in batches}) <= 900 // 64 + 1  # few distinct shapes
    assert sampler.epoch_batches(1) != batches  # reshuffled per epoch
    r0, r1 = (FrameBatchSampler(frames, 4000, seed=3, rank=r, world_size=2).epoch_batches(0) for r in (0, 1))
    assert len(r0) == len(r1) and not set(map(tuple, r0)) & set(map(tuple, r1))
    # resuming at (epoch 1, batch 2) yields exactly what an uninterrupted iterator yields there
    it = iter(sampler)
    seq = [next(it) for _ in range(len(batches) + 5)]
    resumed = iter(FrameBatchSampler(frames, 4000, seed=3, length_multiple=64, start=(1, 2)))
    assert next(resumed) == seq[len(batches) + 2]


def test_a_compiled_runs_batches_take_few_shapes_with_little_padding():
    """Batches filled up to a frame budget made 196 text-encoder and 33 decoder shapes over two epochs of a 200 h set,
    each a graph to compile. With a plan from the length histogram, lognormal 1-20 s clips at the trainer's 40,000
    frames take at most 8 shapes a part over two epochs, the last batch of each bucket included, every clip in each
    epoch, with under 15 % of the computed frames padding."""
    import numpy as np

    from utils.training.shapes import ShapePlan

    rng = np.random.default_rng(0)
    frames = [int(s * 93.75) for s in np.clip(rng.lognormal(np.log(5.5), 0.6, 11_000), 1, 20)]  # ~20 h
    tokens = [max(1, int(f * 0.13 * x)) for f, x in zip(frames, rng.lognormal(0, 0.15, len(frames)))]
    plan = ShapePlan.fit(frames, tokens, 40_000, multiple=64)
    sampler = FrameBatchSampler(frames, 40_000, seed=3, length_multiple=64, plan=plan)
    shapes, computed = set(), 0
    for epoch in (0, 1):
        batches = sampler.epoch_batches(epoch)
        assert {i for b in batches for i in b} == set(range(len(frames)))
        for b in batches:
            bucket = plan.of_batch([frames[i] for i in b])
            assert len(b) == bucket.size and len(b) * bucket.frames <= 40_000
            # every clip padded: a batch without padding runs without a mask, another graph of the same shape
            assert max(frames[i] for i in b) < bucket.frames and max(tokens[i] for i in b) < bucket.tokens
            shapes.add((len(b), bucket.tokens, bucket.frames))
            computed += len(b) * bucket.frames
    assert len(shapes) == len(plan) <= 8
    assert 1 - 2 * sum(frames) / computed < 0.15


def test_a_planned_batch_and_its_out_of_memory_pieces_keep_their_bucket_shape():
    """Collate pads a planned batch to its bucket's bounds, not its own longest clip; an out-of-memory split cuts it
    into pieces of one shape (the last topped up with the batch's first clips, which do not count in its weight)."""
    from utils.training.shapes import Bucket, ShapePlan

    plan = ShapePlan([Bucket(frames=64, tokens=16, size=5), Bucket(frames=128, tokens=32, size=5)])
    items = [{"tokens": torch.arange(1, n + 1), "mel": torch.zeros(100, 4 * n), "speaker": 0, "pos": (0, 0),
              "index": i} for i, n in enumerate([17, 20, 25, 30, 18])]
    batch = Collate(64, plan=plan)(items)
    assert batch["tokens"].shape == (5, 32) and batch["mels"].shape == (5, 100, 128)
    for parts in (2, 3, 4):
        pieces = split_batch(batch, parts, 64, fixed=True)
        assert {(p["tokens"].shape, p["mels"].shape) for p in pieces} == {(pieces[0]["tokens"].shape,
                                                                            pieces[0]["mels"].shape)}
        assert pieces[0]["mels"].shape[-1] == 128 and pieces[0]["tokens"].shape[-1] == 32
        assert sum(p.get("rows", len(p["tokens"])) for p in pieces) == 5
        assert sorted({int(i) for p in pieces for i in p["index"]}) == [0, 1, 2, 3, 4]


def test_loader_uses_workers_pinning_persistence_and_prefetch_when_set():
    m = opt.resolve(TrainConfig(preset="tiny", num_workers=2, pin_memory="true", persistent_workers="true"),
                    cpu_report())
    assert m.pin_memory is False  # nothing to pin for without a GPU: the reason says so
    m.values["pin_memory"] = True
    loader = make_loader(torch.utils.data.TensorDataset(torch.zeros(4)), FrameBatchSampler([10] * 4, 100), m, 3)
    assert loader.num_workers == 2 and loader.pin_memory and loader.persistent_workers and loader.prefetch_factor == 3
    assert isinstance(loader.collate_fn, Collate) and loader.collate_fn.length_multiple == m.length_multiple


def test_split_batch_keeps_every_utterance_and_trims_padding():
    items = [{"tokens": torch.arange(1, n + 1), "mel": torch.zeros(100, 4 * n), "speaker": 0, "pos": (0, 0),
              "index": i} for i, n in enumerate([3, 5, 9, 12])]
    batch = Collate(4)(items)
    parts = split_batch(batch, 2)
    assert [p["tokens"].shape[0] for p in parts] == [2, 2]
    assert parts[0]["mels"].shape[-1] == 20 and parts[1]["mels"].shape[-1] == 48
    # tokens padded to Collate's multiple of 8, as the compiled shapes are, never past the batch's own width
    assert [p["tokens"].shape[1] for p in parts] == [8, 16]
    assert [p["tokens"].shape[1] for p in split_batch(batch, 4)] == [8, 8, 16, 16]
    assert [torch.equal(p["token_lens"], batch["token_lens"][2 * i: 2 * i + 2]) for i, p in enumerate(parts)] == [True] * 2


def test_probe_bisects_to_the_largest_batch_that_fits():
    limit = 13_337

    def try_frames(frames):
        if frames > limit:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    for start in (1000, 50_000):
        fitted, trials = probe_max_frames(try_frames, start=start, longest=400, log=lambda s: None)
        assert limit * 0.94 <= fitted <= limit
        assert any(not ok for _, ok in trials)
    assert probe_max_frames(try_frames, start=20_000, longest=20_000, log=lambda s: None)[0] == 0


def test_trainer_probe_replaces_the_batch_guess_with_the_measured_one(corpus):
    rows = load_manifest(corpus, "am")
    longest = max(int(r["duration"] * 24000) // 256 + 1 for r in rows if r["split"] == "train")
    longest = -(-longest // 4) * 4
    cap = 3 * longest + 10  # more than 3 longest clips in one batch 'runs out of memory'
    result = run(prepare_run(tiny_config(corpus, "probe", max_steps=1, probe="true", max_frames_per_batch="auto",
                                         fault_oom_above_frames=cap, checkpoint_every=1)))
    assert result["state"] == "finished"
    config = json.loads((corpus.run_dir("probe") / "config.json").read_text())
    # a budget of 4 longest clips would not fit; 3 do
    assert 3 * longest <= config["resolved"]["max_frames_per_batch"] < 4 * longest
    assert config["reasons"]["max_frames_per_batch"].startswith("measured:")
    log = (corpus.run_dir("probe") / "train.log").read_text()
    assert "probe:" in log and "out of memory at step" not in log


def test_one_process_on_a_box_of_two_gpus_plans_its_batch_for_one(monkeypatch):
    """With one training process on a machine of two GPUs the batch plan (frames a micro-batch, accumulation, the
    learning rate's scale) was made for both GPUs; the run is one GPU's."""
    one, two = h100_report(), h100_report()
    two.gpus = [two.gpus[0], replace(two.gpus[0], index=1)]
    two.recommended = hardware.recommend(two)
    keys = ("max_frames_per_batch", "grad_accumulation", "effective_batch", "lr")
    alone = opt.resolve(TrainConfig(preset="base"), one, world_size=1)
    beside = opt.resolve(TrainConfig(preset="base"), two, world_size=1)
    assert [beside.values[k] for k in keys] == [alone.values[k] for k in keys]
    both = opt.resolve(TrainConfig(preset="base"), two, world_size=2)
    assert both.effective_batch == both.max_frames_per_batch * both.grad_accumulation * 2


def test_the_optimizations_tab_explains_its_settings_for_the_steps_it_shows(tmp_path):
    """The averaged weights' reason said "a tenth of this 20000-step run" beside a plan of 2000 steps (the run's own
    log was right): the form resolves 'auto' for the steps it shows, saved or recommended."""
    from utils.runs import settings
    from utils.workspace import Workspace

    ws = Workspace.open(tmp_path)
    steps = settings.default_steps(ws)
    rows = {r.name: r for r in settings.settings_form(ws, "tiny")}
    assert rows["max_steps"].value == steps and f"a tenth of this {steps}-step run" in rows["ema_decay"].reason
    settings.save_settings(ws, {"max_steps": 300})
    rows = {r.name: r for r in settings.settings_form(ws, "tiny")}
    assert rows["max_steps"].value == 300 and "a tenth of this 300-step run" in rows["ema_decay"].reason
    assert "each run fits it to its own steps" in rows["ema_decay"].reason  # a 120-step run's 0.95 is no surprise


def test_a_saved_warm_up_longer_than_a_tenth_of_the_run_says_what_a_run_uses(tmp_path):
    """A curator saved 30 warm-up steps with 120 steps; the run warmed up for 12, said only in its log. The save says
    it, and says nothing for a warm-up a run keeps whole."""
    from utils.runs import settings
    from utils.workspace import Workspace

    ws = Workspace.open(tmp_path)
    form = {r.name: r.value for r in settings.settings_form(ws, "tiny")}
    _, lines = settings.save_form(ws, "tiny", {**form, "max_steps": 120, "warmup_steps": 30})
    said = next(line for line in lines if line.startswith("**warmup_steps**"))
    assert "at most a tenth of its steps: 12 in a 120-step run" in said
    _, lines = settings.save_form(ws, "tiny", {**form, "max_steps": 1200, "warmup_steps": 30})
    assert "a tenth" not in next(line for line in lines if line.startswith("**warmup_steps**"))


def test_the_effective_batch_says_how_it_adds_up_once():
    """The first H200 run's log read "40000 frames x 1 micro-batches = 40000 frames per optimizer step. 40000 frames
    x 1 micro-batch = 40000 frames per optimizer step, the batch ...": the plan's reason, already with the sum, was
    appended to the same sum."""
    m = opt.resolve(TrainConfig(preset="base"), h100_report(), world_size=1)
    why = m.reasons["effective_batch"]
    assert why.count("frames per optimizer step") == 1 and "the batch the learning rate was chosen for" in why, why
    assert "1 micro-batches" not in why
    mine = opt.resolve(TrainConfig(preset="base", max_frames_per_batch="10000", grad_accumulation="1"),
                       h100_report(), world_size=1)
    assert mine.reasons["effective_batch"] == "10000 frames x 1 micro-batch = 10000 frames per optimizer step; set by " \
                                              "the user"


def test_a_small_set_gets_no_bucket_that_saves_next_to_nothing(monkeypatch):
    """The GPU test set (120 clips of 60-390 frames, one batch at 40,000 frames) was given 7 buckets, the 7th for a
    single clip: each bucket is a graph per compiled part (a minute or more on a GPU) at the run's first steps, and
    frame-filled batches had made 2. A set gets no more buckets than the batches an epoch fills, and a bucket is
    added only when it saves more than BUCKET_GAIN of the work (with no such floor the plan is larger for about the
    same work)."""
    import numpy as np

    from utils.training import shapes

    rng = np.random.default_rng(3)  # two clips under 64 frames: a bucket of their own saves 0.5 % of the work
    frames = [int(f) for f in rng.integers(60, 390, 119)] + [440]
    tokens = [max(1, f // 8) for f in frames]
    assert shapes.ShapePlan.fit(frames, tokens, 40_000).describe() == "60x448"  # 2 batches an epoch, one shape

    def work(plan) -> int:
        clips = [sum(plan.index(f) == k for f in frames) for k in range(len(plan))]
        return sum(shapes._work(b.frames, n, 4_000) for b, n in zip(plan.buckets, clips))

    plan = shapes.ShapePlan.fit(frames, tokens, 4_000)  # smaller batches: 7 an epoch
    monkeypatch.setattr(shapes, "BUCKET_GAIN", 0.0)
    least = shapes.ShapePlan.fit(frames, tokens, 4_000)
    assert len(plan) < len(least) <= 7 and work(plan) <= work(least) * (1 + 0.01)
