"""The training loop of the acoustic model. Reads top to bottom: run folder, machine, data, model,
optimizer, compile, DDP, then the loop (accumulate -> clip -> guard -> step -> EMA -> log -> evaluate
-> checkpoint -> stop?).

    python -m utils.training --config workspace/runs/RUN/config.json            # one process
    torchrun --standalone --nproc_per_node=2 -m utils.training --config ...      # DDP (nccl / gloo)
    python app.py train --dataset NAME --run RUN --preset tiny --max-steps 200   # CLI, same code

Stop: SIGTERM, SIGINT or a file runs/RUN/STOP -> the current step finishes, a checkpoint is saved,
status.json says "stopped", exit 0. Resume "auto" continues the newest checkpoint exactly (same
next batch, LR, RNG streams).
"""
from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
import time
from pathlib import Path

import torch

from models.matcha import MatchaConfig, MatchaTTS
from utils.audio import FeatureConfig
from utils.events import StudioError
from utils.training import checkpoint as ckpt
from utils.training import ddp
from utils.training import optimization as opt
from utils.training.config import TrainConfig, write_run_config
from utils.training.data import (Collate, FrameBatchSampler, Frontend, MelDataset, _dataset_api, batch_to_device,
                                 make_loader, mel_stats, prepare_items, round_up, split_batch, training_rows)
from utils.training.evaluate import load_eval_vocoder, synthesis_quality, validation_loss
from utils.training.probe import probe_max_frames
from utils.training.runfiles import RunFiles, disk_full_message
from utils.workspace import Workspace


GROW_BACK_STEPS = 200  # good steps after an out-of-memory before a halved micro-batch is tried whole again


class StopRequest:
    """SIGTERM / SIGINT / runs/RUN/STOP: finish the step, save, exit cleanly."""

    def __init__(self, run_dir: Path):
        self.file = run_dir / "STOP"
        self.file.unlink(missing_ok=True)  # a request left from an earlier run does not stop this one
        self.reason = ""
        self._previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._on_signal)

    def restore(self) -> None:
        """Give the signals back (in-process runs: the CLI, tests)."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum, frame):
        self.reason = signal.Signals(signum).name

    def __call__(self) -> bool:
        if not self.reason and self.file.exists():
            self.reason = "STOP file"
        return bool(self.reason)


def train(cfg: TrainConfig, report=None) -> dict:
    """Run (or resume) training; returns {"state", "step", "last_checkpoint", "best_checkpoint", "message"}."""
    # ------------------------------------------------------------------ run folder, machine, distributed
    ws = Workspace.open(cfg.workspace)
    run_dir = ws.run_dir(cfg.run)
    machine = opt.resolve(cfg, report, world_size=int(os.environ.get("WORLD_SIZE", "1")))
    dist = ddp.setup(machine.device)
    device = f"cuda:{dist.local_rank}" if machine.device == "cuda" else machine.device
    files = RunFiles(run_dir, enabled=dist.main)
    log = files.info
    stop = StopRequest(run_dir)
    files.status(state="running", pid=os.getpid(), step=0, max_steps=cfg.max_steps, eta_s=None,
                 last_checkpoint=None, best_checkpoint=None, message="preparing data", started=time.time())
    files.start_heartbeat()
    try:
        result = _train(cfg, ws, run_dir, machine, dist, device, files, log, stop)
    except BaseException as exc:
        full = disk_full_message(exc, run_dir, ckpt.step_folders(run_dir / "checkpoints"))
        message = full or f"{type(exc).__name__}: {exc}"
        try:
            files.status(state="failed", message=message, ended=time.time())
        except OSError:
            pass  # a full disk can refuse even this; the launcher then records the end from the exit code
        log(f"failed: {message}")
        if full:
            raise StudioError(full) from exc
        raise
    finally:
        stop.restore()
        files.close()
        ddp.cleanup(dist)
    return result


def _train(cfg, ws, run_dir, machine, dist, device, files, log, stop) -> dict:
    torch.manual_seed(cfg.seed)  # same initial weights on every rank (DDP also broadcasts rank 0's)
    opt.apply_backend_flags(machine)  # TF32, cuDNN benchmark (process-wide switches)
    feat_cfg = FeatureConfig()

    # ------------------------------------------------------------------ where we start from
    if dist.main:
        for note in ckpt.recover(run_dir / "checkpoints"):  # leftovers of a save cut short by a kill
            log(f"checkpoints: {note}")
    resume_from = ckpt.latest_resumable(run_dir / "checkpoints") if cfg.resume == "auto" else None
    if cfg.resume not in ("auto", "none", ""):
        resume_from = Path(cfg.resume)
    init_cfg = ckpt.read_config(cfg.init) if cfg.init else None
    base = ckpt.read_config(resume_from) if resume_from else init_cfg
    if resume_from:
        log(f"resume: continuing from {resume_from}")
        _report_config_changes(base.get("train", {}), cfg.to_dict(), log)
    elif cfg.init:
        log(f"fine-tune: starting from {cfg.init} (mode {cfg.finetune_mode})")
        if base.get("features") and FeatureConfig.from_dict(base["features"]) != feat_cfg:
            raise StudioError(f"{cfg.init} was trained on other mel features; it cannot be fine-tuned on these.")

    # ------------------------------------------------------------------ data
    train_rows, val_rows = training_rows(ws, cfg.dataset)
    frontend = Frontend.create(cfg.frontend, train_rows + val_rows, base.get("frontend") if base else None)
    speakers = list(base.get("speakers", [])) if base else []
    names = sorted({r.get("speaker", "default") for r in train_rows + val_rows})
    if base and base["model"].get("n_speakers", 1) == 1 and not resume_from:
        # a single-speaker checkpoint has no speaker table: its one voice is adapted to this speaker
        if len(names) > 1:
            raise StudioError(f"{cfg.init} is a single-speaker model; fine-tune it on one speaker "
                              f"(this dataset has {len(names)}: {', '.join(names[:5])}).")
        speakers = names
    speakers += [n for n in names if n not in speakers]
    items = prepare_items(ws, cfg.dataset, train_rows, frontend, speakers, feat_cfg, log)
    val_items = prepare_items(ws, cfg.dataset, val_rows, frontend, speakers, feat_cfg, log)
    if not items:
        raise StudioError(f"Dataset {cfg.dataset!r}: no training row could be used (see the log).")
    if not val_items:
        log("data: no held-out (val) rows: evaluation uses the first training clips (this measures fit, not generalisation)")
        val_items = items[: max(1, cfg.eval_clips)]
    if base and "mel_mean" in base.get("model", {}):
        mean, std = base["model"]["mel_mean"], base["model"]["mel_std"]
    else:
        mean, std = mel_stats(ws, cfg.dataset, items, feat_cfg)
    log(f"data: {len(items)} training / {len(val_items)} held-out clips, {len(speakers)} speaker(s), "
        f"{len(frontend.symbols)} symbols ({frontend.kind}), mel mean {mean:.3f} std {std:.3f}")

    # ------------------------------------------------------------------ model
    if base:
        mcfg = MatchaConfig.from_dict(base["model"])
        model = MatchaTTS(mcfg)
        model.load_state_dict(ckpt.load_weights(resume_from or cfg.init))
        model.grow_tables(len(frontend.symbols), len(speakers))  # fine-tuning: new symbols / speakers get rows
    else:
        mcfg = MatchaConfig.preset_config(cfg.preset, n_symbols=len(frontend.symbols), n_speakers=len(speakers),
                                          n_feats=feat_cfg.n_mels, mel_mean=mean, mel_std=std,
                                          add_blank=machine.blanks)
        model = MatchaTTS(mcfg)
    if base and mcfg.add_blank != machine.blanks:
        machine.set("blanks", mcfg.add_blank, "kept from the checkpoint: its text encoder learned with"
                    + ("" if mcfg.add_blank else "out") + " blanks")
    if init_cfg is not None:  # fine-tuning (also when resuming a fine-tuning run): the speakers the init lacked
        added = [s for s in speakers if s not in init_cfg.get("speakers", [])]
        _apply_finetune_mode(model, cfg, speakers, added, log)
    model.to(device)
    opt.apply_model_settings(model, machine, compile=False)  # attention kernel, checkpointing (compile: below)
    n_params = sum(p.numel() for p in model.parameters())
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log(f"model: {mcfg.preset} Matcha-TTS, {n_params / 1e6:.2f}M parameters ({n_train / 1e6:.2f}M trained)")
    autocast = opt.autocast(machine)

    def run_micro(batch: dict, weight: float, step: int) -> dict:
        """Forward + backward of one micro-batch; `weight` = its share of the optimizer step.

        Under DDP no micro-batch all-reduces by itself (no_sync): a rank that ran out of memory would
        leave the others waiting in DDP's bucketed all-reduce for ever. The loop averages the gradients
        once per optimizer step instead, after every rank has said whether it ran out of memory."""
        b = batch_to_device(batch, device, non_blocking=machine.pin_memory)
        frames = b["mels"].shape[0] * b["mels"].shape[-1]
        if cfg.fault_oom_above_frames and frames > cfg.fault_oom_above_frames and \
                (not cfg.fault_oom_ranks or dist.rank in cfg.fault_oom_ranks):
            raise torch.OutOfMemoryError(f"CUDA out of memory (fault injection: {frames} frames)")
        with dmodel.no_sync() if hasattr(dmodel, "no_sync") else contextlib.nullcontext():  # DDP, not the probe
            with autocast:
                losses = dmodel(b["tokens"], b["token_lens"], b["mels"], b["mel_lens"], b["speakers"])
            if step in cfg.fault_nan_steps:  # as a real NaN loss: the reported losses are non-finite too
                losses = {k: v * float("nan") for k, v in losses.items()}
            loss = losses["loss"] * weight
            scaler.scale(loss).backward()
        return {k: v.detach() for k, v in losses.items()}

    # ------------------------------------------------------------------ batch size: measured probe
    if machine.probe and not resume_from:  # a resumed run keeps its batch size (the data order depends on it)
        longest = max(it.frames for it in items)
        by_len = sorted(items, key=lambda it: -it.frames)
        collate = Collate(machine.length_multiple)
        dmodel = model
        scaler = opt.grad_scaler(machine)

        def try_frames(frames: int) -> None:
            per = round_up(longest, machine.length_multiple)
            n = max(1, frames // per)
            ds = MelDataset(ws, cfg.dataset, by_len, feat_cfg, mean, std)
            batch = collate([ds[i % len(by_len)] for i in range(n)])
            run_micro(batch, 1.0, -1)
            model.zero_grad(set_to_none=True)

        def cleanup():
            model.zero_grad(set_to_none=True)
            if machine.device == "cuda":
                torch.cuda.empty_cache()

        fitted, _ = probe_max_frames(try_frames, machine.max_frames_per_batch, round_up(longest, machine.length_multiple),
                                     cleanup=cleanup, log=log)
        if fitted == 0:
            raise StudioError(f"Not even one of the longest clips ({longest} frames) fits in memory; "
                              "turn on gradient checkpointing, use a smaller preset, or drop very long clips.")
        measured = max(round_up(longest, machine.length_multiple), int(fitted * cfg.probe_headroom))
        measured = ddp.min_int(measured, dist, device)  # the smallest GPU's answer: every rank uses one batch size
        from utils import hardware
        rep = hardware.with_measured_batch(
            hardware.detect(), measured, f"{fitted} frames fitted in one real step; {cfg.probe_headroom:.0%} kept",
            n_processes=dist.world_size, accum=0 if cfg.grad_accumulation == "auto" else machine.grad_accumulation)
        if cfg.max_frames_per_batch == "auto":  # what fits decides how the effective batch is split, not its size
            for name in ("max_frames_per_batch", "grad_accumulation"):
                machine.set(name, rep.recommended[name].value, rep.recommended[name].reason
                            if getattr(cfg, name) == "auto" else machine.reasons[name])
            opt.set_effective_batch(machine, cfg, dist.world_size, rep.recommended)
        if machine.device == "cuda":
            torch.cuda.reset_peak_memory_stats()

    # ------------------------------------------------------------------ optimizer, DDP
    opt.compile_model(model, machine)  # after the probe: eager memory is an upper bound of compiled memory
    dmodel = ddp.wrap(model, dist)  # the same starting weights on every process
    optimizer = opt.make_optimizer(model, cfg, machine)  # AdamW, fused kernel on GPU
    scaler = opt.grad_scaler(machine)  # loss scaling for fp16 only
    params = [p for p in model.parameters() if p.requires_grad]
    ema = [p.detach().clone() for p in model.parameters()] if cfg.ema_decay > 0 else None  # averaged weights

    # ------------------------------------------------------------------ trainer state (resume)
    step, pos, split, lr_scale, bad_steps = 0, (0, 0), 1, 1.0, 0
    # steps since the last out-of-memory, and how many a halved micro-batch waits before it is tried whole again
    # (doubled at every out-of-memory: GROW_BACK_STEPS after the first, longer when memory runs out again)
    good_steps, grow_after = 0, GROW_BACK_STEPS // 2
    best = {"mcd": math.inf, "path": None}
    state = ckpt.load_trainer_state(resume_from) if resume_from else None
    if state:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scaler.load_state_dict(state["scaler"])
        if ema is not None and state.get("ema"):
            for e, s in zip(ema, state["ema"]):
                e.copy_(s)
        step, pos, split = state["step"], tuple(state["next_pos"]), state.get("split", 1)
        lr_scale, best = state.get("lr_scale", 1.0), state.get("best", best)
        if state.get("max_frames_per_batch") and cfg.max_frames_per_batch == "auto":
            machine.set("max_frames_per_batch", state["max_frames_per_batch"], "kept from the run being resumed "
                        "(the batch order depends on it)")
            machine.set("grad_accumulation", state["grad_accumulation"], "kept from the run being resumed")

    # ------------------------------------------------------------------ data loader
    sampler = FrameBatchSampler([it.frames for it in items], machine.max_frames_per_batch, cfg.seed, dist.rank,
                                dist.world_size, machine.length_multiple, start=pos)
    loader = make_loader(MelDataset(ws, cfg.dataset, items, feat_cfg, mean, std), sampler, machine, cfg.prefetch_factor)
    data_iter = iter(loader)
    val_batches = [Collate(machine.length_multiple)([MelDataset(ws, cfg.dataset, val_items, feat_cfg, mean, std)[i]
                                                     for i in range(j, min(j + 4, len(val_items)))])
                   for j in range(0, len(val_items), 4)]

    # ------------------------------------------------------------------ what is on, and why
    log(f"machine: {device}, {dist.world_size} process(es)")
    for line in machine.describe():
        log(f"  {line}")
    log(f"  {'ema':22} {cfg.ema_decay:<10} " + ("weights averaged every step, warming up as (1 + step) / (10 + "
                                                  "step) so a short run's average is not mostly its random start; "
                                                  "evaluation and export use the average" if ema is not None else "off"))
    log(f"  {'grad_clip':22} {cfg.grad_clip:<10} global norm clip (Matcha: 5)")
    log(f"  {'lr schedule':22} {machine.lr:<10} warm-up {min(cfg.warmup_steps, max(1, cfg.max_steps // 10))} steps, "
        f"cosine to {machine.lr * cfg.min_lr_ratio:.2e} at step {cfg.max_steps}")
    log(f"  {'batches per epoch':22} {sampler.batches_per_epoch():<10} (per process)")
    eval_vocoder = load_eval_vocoder(ws, cfg.eval_vocoder, device, feat_cfg) if dist.main else None
    log(f"  {'eval vocoder':22} {cfg.eval_vocoder or 'griffin-lim':<10} " + (
        "MCD and samples through this vocoder: what the Inference tab will play with it" if eval_vocoder else
        "MCD and samples through Griffin-Lim (buzzy; a vocoder lowers both): new runs use the workspace's default "
        "vocoder (vocoders/vocos-mel-24khz, fetched when online) once it is there"))
    config_extra = {"model": mcfg.to_dict(), "frontend": frontend.to_dict(), "speakers": speakers,
                    "features": feat_cfg.to_dict()}
    if dist.main:
        write_run_config(run_dir / "config.json", cfg, resolved=machine.values, reasons=machine.reasons,
                         **config_extra)

    def save(tag_step: int, with_state: bool = True) -> Path:
        """Checkpoint (rank 0): inference weights (EMA if on) + config, trainer state to resume."""
        weights = model.state_dict()
        if ema is not None:
            weights = dict(weights)
            for (name, _), e in zip(model.named_parameters(), ema):
                weights[name] = e
        trainer_state = None
        if with_state:
            trainer_state = {
                "model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(),
                "ema": ema,
                "step": tag_step, "next_pos": list(pos), "split": split, "lr_scale": lr_scale, "best": best,
                "max_frames_per_batch": machine.max_frames_per_batch, "grad_accumulation": machine.grad_accumulation,
            }
        folder = ckpt.save_checkpoint(run_dir / "checkpoints" / f"step-{tag_step}", weights,
                                      {**config_extra, "step": tag_step, "train": cfg.to_dict(),
                                       "resolved": machine.values}, trainer_state,
                                      fault_pause_s=10.0 if tag_step == cfg.fault_pause_checkpoint_step else 0.0)
        ckpt.prune(run_dir / "checkpoints", cfg.keep_checkpoints, {Path(best["path"])} if best["path"] else set())
        files.status(last_checkpoint=str(folder))
        return folder

    def evaluate(at_step: int) -> dict:
        """Validation loss, MCD of synthesised held-out clips, audio samples (rank 0, EMA weights)."""
        raw = [p.detach().clone() for p in model.parameters()] if ema is not None else None
        if ema is not None:
            for p, e in zip(model.parameters(), ema):
                p.data.copy_(e)
        _, features_fn = _dataset_api()
        out = validation_loss(model, val_batches, device, autocast, cfg.seed)
        out.update(synthesis_quality(model, val_items[: cfg.eval_clips], ws, cfg.dataset, feat_cfg, cfg.mcd,
                                     cfg.ode_steps, run_dir / "samples" / f"step-{at_step}", cfg.sample_clips,
                                     cfg.seed, features_fn, eval_vocoder))
        if raw is not None:
            for p, r in zip(model.parameters(), raw):
                p.data.copy_(r)
        return out

    # ------------------------------------------------------------------ the loop
    accum = machine.grad_accumulation
    files.status(message="training", step=step)
    log(f"training from step {step} to {cfg.max_steps}")
    window = {"t0": time.perf_counter(), "wait": 0.0, "samples": 0, "frames": 0, "steps": 0, "losses": {}}
    state_msg, message = "finished", ""
    last_saved = step if resume_from else -1
    step_times = []
    while step < cfg.max_steps:
        t_step = time.perf_counter()
        # each rank's noise and dropout are a function of (seed, rank, step): a resume, on any rank, continues
        # every rank's own stream exactly, with no generator state to save or hand from rank 0 to the others
        torch.manual_seed(cfg.seed + 1_000_003 * dist.rank + 7919 * step)
        lr = opt.lr_at(step, cfg, machine.lr) * lr_scale
        for group in optimizer.param_groups:
            group["lr"] = lr
        t_wait = time.perf_counter()
        batches = [next(data_iter) for _ in range(accum)]  # the whole step's data, kept for an OOM retry
        window["wait"] += time.perf_counter() - t_wait
        pos = (batches[-1]["pos"][0], batches[-1]["pos"][1] + 1)  # next batch to read after this step
        if split > 1 and good_steps >= grow_after:  # memory may have been a passing peak: try the larger batch
            split //= 2
            good_steps = 0
            log(f"step {step}: {grow_after} steps without running out of memory: micro-batch doubled back "
                f"(each batch now in {split} part{'s' if split > 1 else ''})")
        while True:  # retry the step with smaller micro-batches after an out-of-memory
            oom = False
            try:
                losses_sum: dict[str, torch.Tensor] = {}
                for b in batches:
                    for piece in split_batch(b, split, machine.length_multiple):
                        weight = len(piece["tokens"]) / len(b["tokens"]) / accum
                        losses = run_micro(piece, weight, step)
                        for k, v in losses.items():
                            losses_sum[k] = losses_sum.get(k, 0.0) + v * weight
            except Exception as exc:
                if not opt.is_oom(exc):
                    raise
                oom = True  # a flag, not the exception: its traceback holds the failed step's tensors
            # every rank learns whether any ran out of memory (one tiny all-reduce), so all retry together
            stuck = oom and split >= max(len(b["tokens"]) for b in batches)
            any_oom, any_stuck = ddp.any_flags([oom, stuck], dist, device)
            if not any_oom:
                break
            losses_sum = losses = piece = None  # the failed step's activations can be freed now
            optimizer.zero_grad(set_to_none=True)
            if machine.device == "cuda":
                torch.cuda.empty_cache()
            if any_stuck:
                raise StudioError(f"out of memory even with one utterance per micro-batch at step {step}; "
                                  "turn on gradient checkpointing or use a smaller preset.")
            split, good_steps, grow_after = split * 2, 0, grow_after * 2  # each relapse waits longer to grow back
            where = "" if oom else " in another process"
            log(f"out of memory{where} at step {step}: micro-batch halved (each batch now in {split} parts), "
                f"accumulation doubled to {accum * split} micro-steps per optimizer step; continuing")
        good_steps += 1
        ddp.average_gradients(params, dist)  # the step's one gradient all-reduce (see run_micro)
        scaler.unscale_(optimizer)  # true gradient values for clipping (no-op unless fp16)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip if cfg.grad_clip > 0 else float("inf"))
        finite_loss, finite_grads = torch.isfinite(torch.stack([losses_sum["loss"].float(), grad_norm.float()])).tolist()
        finite = finite_loss and finite_grads  # the step's one sync point
        if finite:
            scaler.step(optimizer)  # plain optimizer.step() unless fp16
            bad_steps = 0
        else:
            # fp16: gradients that overflow under a finite loss are the scaler finding its scale (the first steps
            # on a T4 start at 65536), not a failing run; they are skipped without counting
            calibrating = machine.precision == "fp16" and finite_loss and scaler.get_scale() >= 1.0
            bad_steps += 0 if calibrating else 1
            if machine.precision == "fp16":
                log(f"step {step}: {'gradients overflowed' if calibrating else 'non-finite loss/gradients'}, step "
                    f"skipped, loss scale lowered from {scaler.get_scale():.0f}")
            else:
                lr_scale *= 0.5
                log(f"step {step}: non-finite loss/gradients, step skipped, learning rate halved (x{lr_scale:g})")
        scaler.update()  # fp16: halves the scale after an overflow, grows it slowly otherwise
        optimizer.zero_grad(set_to_none=True)
        if finite and ema is not None:
            torch._foreach_lerp_(ema, [p.detach() for p in model.parameters()], 1.0 - opt.ema_decay_at(step, cfg))
        step += 1
        step_times.append(time.perf_counter() - t_step)
        step_times = step_times[-50:]

        # -------------------------------------------------------------- bookkeeping
        n_items = sum(len(b["tokens"]) for b in batches)
        window["samples"] += n_items * dist.world_size
        window["frames"] += int(sum(int(b["mel_lens"].sum()) for b in batches)) * dist.world_size
        window["steps"] += 1
        if finite:  # summed on the device: float() here would make the CPU wait for the GPU every step
            for k, v in losses_sum.items():
                window["losses"][k] = window["losses"].get(k, 0.0) + v
        if bad_steps >= cfg.max_bad_steps:
            state_msg = "failed"
            message = (f"stopped: {bad_steps} steps in a row had non-finite loss or gradients (step {step}). "
                       "The checkpoint holds the last good weights. Lower the learning rate, use bf16/fp32, "
                       "or check the data.")
            log(message)
            break
        if step % cfg.log_every == 0 or step == cfg.max_steps:
            elapsed = time.perf_counter() - window["t0"]
            good = max(1, window["steps"])
            row = {"step": step, "epoch": pos[0], **{k: float(v) / good for k, v in window["losses"].items()},
                   "lr": lr, "grad_norm": float(grad_norm), "samples_per_s": window["samples"] / elapsed,
                   "frames_per_s": window["frames"] / elapsed, "data_wait": window["wait"] / elapsed,
                   "loss_scale": scaler.get_scale() if scaler.is_enabled() else 1.0, "time": time.time(),
                   **_memory(machine.device)}
            files.metrics(row)
            log(f"step {step}/{cfg.max_steps} loss {row.get('loss', float('nan')):.4f} (dur {row.get('dur', 0):.3f} "
                f"prior {row.get('prior', 0):.3f} cfm {row.get('cfm', 0):.3f}) lr {lr:.2e} gnorm {row['grad_norm']:.2f} "
                f"{row['samples_per_s']:.1f} samples/s wait {row['data_wait']:.0%}")
            window = {"t0": time.perf_counter(), "wait": 0.0, "samples": 0, "frames": 0, "steps": 0, "losses": {}}
        eta = (cfg.max_steps - step) * sum(step_times) / len(step_times)
        files.progress(step=step, eta_s=round(eta, 1), epoch=pos[0])  # written by the 2 s heartbeat
        do_eval = cfg.eval_every and step % cfg.eval_every == 0
        overfit = False
        if do_eval and dist.main:
            overfit = _evaluate_and_record(evaluate, step, files, log, best, save, cfg.patience)
            last_saved = step
        if ddp.any_flag(overfit and cfg.on_overfit == "stop", dist, device):  # every rank ends after this step
            message = (f"finished early at step {step}: held-out MCD has not improved for {cfg.patience} "
                       f"evaluations; the best checkpoint ({Path(best['path']).name if best['path'] else '-'}) "
                       "is the one to export")
            log(message)
            break
        if step % cfg.checkpoint_every == 0 and step != last_saved and dist.main:
            save(step)
            last_saved = step
        if ddp.any_flag(stop(), dist, device):  # every rank stops after the same step
            state_msg, message = "stopped", f"stopped by request ({stop.reason or 'another rank'}) at step {step}"
            files.status(state="stopping", message=f"{message}: saving a checkpoint")
            log(message)
            break
        if do_eval or step % cfg.checkpoint_every == 0:
            ddp.barrier(dist)  # the other ranks wait while rank 0 evaluates / saves

    # ------------------------------------------------------------------ the end: evaluate, save
    if dist.main:
        if step > 0 and state_msg == "finished" and not (cfg.eval_every and step % cfg.eval_every == 0):
            _evaluate_and_record(evaluate, step, files, log, best, save)
            last_saved = step
        if step > 0 and step != last_saved:  # max_steps 0 (a probe-only run) saves nothing
            save(step)
        message = message or f"finished {step} steps"
        files.status(state=state_msg, step=step, eta_s=0, message=message, ended=time.time(),
                     best_checkpoint=best["path"])
    log(message)
    last = ckpt.step_folders(run_dir / "checkpoints")
    return {"state": state_msg, "step": step, "message": message, "best_checkpoint": best["path"],
            "best_mcd": best["mcd"], "last_checkpoint": str(last[-1][1]) if last else None}


# ---------------------------------------------------------------------------------- helpers
def _evaluate_and_record(evaluate, step, files, log, best, save, patience: int = 0) -> bool:
    """Evaluate, save, mark the best checkpoint. True when held-out MCD has not improved for `patience`
    evaluations: the model is learning its training clips rather than the voice (overfitting)."""
    t0 = time.perf_counter()
    metrics = evaluate(step)
    per_clip = metrics.pop("mcd_per_clip", [])
    folder = save(step)
    if metrics["mcd"] < best["mcd"]:
        best.update(mcd=metrics["mcd"], path=str(folder), since=0)
        files.status(best_checkpoint=str(folder), best_mcd=metrics["mcd"], overfitting=None)
    else:
        best["since"] = best.get("since", 0) + 1
    files.metrics({"step": step, **metrics, "eval_s": time.perf_counter() - t0, "time": time.time()})
    log(f"eval step {step}: val loss {metrics.get('val_loss', float('nan')):.4f}, MCD {metrics['mcd']:.2f} dB "
        f"({', '.join(f'{x:.2f}' for x in per_clip)}), best {best['mcd']:.2f} dB")
    if not patience or best["since"] < patience:
        return False
    note = (f"Held-out MCD has not improved for {best['since']} evaluations (best {best['mcd']:.2f} dB at "
            f"{Path(best['path']).name}): the model is learning the training clips by heart (overfitting), so more "
            "steps will not make the voice better. The best checkpoint stays marked and is what export uses.")
    files.status(overfitting=note)
    log(f"warning: {note}")
    return True


def _apply_finetune_mode(model, cfg, speakers, new_speakers, log) -> None:
    if cfg.finetune_mode == "full":
        return
    if cfg.finetune_mode == "freeze_encoder":
        for p in model.encoder.parameters():
            p.requires_grad_(False)
        log("fine-tune: text encoder frozen; duration predictor, speaker table and decoder train")
        return
    # new_speaker: only the rows of the new speakers move
    if model.spk_emb is None or not new_speakers:
        raise StudioError("finetune_mode new_speaker needs a multi-speaker checkpoint and a dataset with a speaker "
                          "the checkpoint does not know.")
    for p in model.parameters():
        p.requires_grad_(False)
    model.spk_emb.weight.requires_grad_(True)
    keep = torch.zeros(model.spk_emb.num_embeddings, 1)
    for name in new_speakers:
        keep[speakers.index(name)] = 1.0
    model.spk_emb.weight.register_hook(lambda g: g * keep.to(g.device, g.dtype))  # old speakers' rows stay
    log(f"fine-tune: only the speaker vectors of {', '.join(new_speakers)} train")


def _report_config_changes(old: dict, new: dict, log) -> None:
    ignore = {"resume", "max_steps"}
    changed = {k: (old.get(k), v) for k, v in new.items() if k in old and old.get(k) != v and k not in ignore}
    for k, (a, b) in changed.items():
        log(f"resume: setting {k} changed since the checkpoint: {a!r} -> {b!r}")
    if old.get("max_steps") != new.get("max_steps"):
        log(f"resume: max_steps {old.get('max_steps')} -> {new.get('max_steps')}")


def _memory(device: str) -> dict:
    """torch's allocator view of this process, plus NVML's (what nvidia-smi shows) and GPU utilization."""
    if device != "cuda":
        return {}
    from utils.hardware import process_gpu_usage

    g = 2 ** 30
    index = torch.cuda.current_device()
    physical = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[index:index + 1]
    nvml_index = int(physical[0]) if physical and physical[0].strip().isdigit() else index
    return {"gpu_mem_allocated_gb": torch.cuda.memory_allocated() / g,
            "gpu_mem_reserved_gb": torch.cuda.memory_reserved() / g,
            "gpu_mem_peak_gb": torch.cuda.max_memory_allocated() / g,
            **process_gpu_usage(os.getpid(), nvml_index)}
