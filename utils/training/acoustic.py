"""The Matcha acoustic model on the training engine (utils/training/engine.py).

    python -m utils.training --config workspace/runs/RUN/config.json            # one process
    torchrun --standalone --nproc_per_node=2 -m utils.training --config ...      # data parallel (nccl / gloo)
    python app.py train --dataset NAME --run RUN --preset tiny --max-steps 200   # CLI, same code

The adapter says what is the acoustic model's own: the dataset's rows and symbols, the speakers, the model
(from a preset, or grown from a checkpoint to fine-tune), its fine-tuning mode, the frame-budget batches and
their data position, one micro-batch's losses (duration, prior, flow matching), the evaluation (validation
loss, MCD of synthesised held-out clips through the evaluation vocoder, samples) and each checkpoint's
config.json (sizes, symbol table, speakers, features). Stop: SIGTERM, SIGINT or a file runs/RUN/STOP.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

from models.matcha import MatchaConfig, MatchaTTS
from utils.audio import FeatureConfig
from utils.events import StudioError
from utils.training import checkpoint as ckpt
from utils.training import ddp
from utils.training import optimization as opt
from utils.training.batching import Collate, FrameBatchSampler, batch_to_device, make_loader, round_up, split_batch
from utils.training.config import TrainConfig, write_run_config
from utils.training.data import VAL_LOSS_CLIPS, MelDataset, mel_stats, prepare_items, spread, training_rows
from utils.training.engine import Engine, LoopSettings, Phase, drain
from utils.training.evaluate import load_eval_vocoder, synthesis_quality, validation_loss
from utils.training.faults import with_faults
from utils.training.loader import ResilientLoader
from utils.workspace import Workspace


def train(cfg: TrainConfig, report=None) -> dict:
    """Run (or resume) training; returns {"state", "step", "last_checkpoint", "best_checkpoint", "message"}."""
    adapter = with_faults(MatchaAdapter(cfg, report), cfg.fault_oom_above_frames, cfg.fault_oom_ranks,
                          cfg.fault_nan_steps, cfg.fault_pause_checkpoint_step,
                          measure=lambda b: b["mels"].shape[0] * b["mels"].shape[-1])
    return drain(Engine(adapter).run())


class TextMelAdapter:
    """What every text -> mel model shares on the engine: the dataset's rows, symbols and speakers, the clips'
    frame counts and log-mels, batches of at most N padded frames and their data position, the batch probe. The
    model's own parts (`build`, `losses`, `evaluate`, its config files) are in the subclasses."""
    kind = "acoustic"
    unit = "utterance"
    oom_advice = "turn on gradient checkpointing or use a smaller preset."
    inference = "model"

    def __init__(self, cfg: TrainConfig, report=None, feat_cfg: FeatureConfig | None = None):
        self.cfg = cfg
        self.ws = Workspace.open(cfg.workspace)
        self.run_dir = self.ws.run_dir(cfg.run)
        self.machine = opt.resolve(cfg, report, world_size=int(os.environ.get("WORLD_SIZE", "1")),
                                   plan=self.memory_plan(cfg))
        self.settings = LoopSettings.of_train_config(cfg, self.machine.ema_decay)
        self.feat_cfg = feat_cfg or FeatureConfig()
        self.pos = (0, 0)  # (epoch, batch index) of the next batch to read

    def _build_data(self, base: dict | None, log) -> None:
        cfg, ws = self.cfg, self.ws
        train_rows, val_rows = training_rows(ws, cfg.dataset)
        self.frontend = self.make_frontend(base, train_rows + val_rows)
        speakers = list(base.get("speakers", [])) if base else []
        names = sorted({r.get("speaker", "default") for r in train_rows + val_rows})
        if base and base.get("model", {}).get("n_speakers") == 1 and not self.ctx.resume_from:
            # a single-speaker checkpoint has no speaker table: its one voice is adapted to this speaker
            if len(names) > 1:
                raise StudioError(f"{cfg.init} is a single-speaker model; fine-tune it on one speaker "
                                  f"(this dataset has {len(names)}: {', '.join(names[:5])}).")
            speakers = names
        self.speakers = speakers + [n for n in names if n not in speakers]
        self.items = prepare_items(ws, cfg.dataset, train_rows, self.frontend, self.speakers, self.feat_cfg, log)
        self.val_items = prepare_items(ws, cfg.dataset, val_rows, self.frontend, self.speakers, self.feat_cfg, log)
        if not self.items:
            raise StudioError(f"Dataset {cfg.dataset!r}: no training row could be used (see the log).")
        if not self.val_items:
            log("data: no held-out (val) rows: evaluation uses the first training clips (this measures fit, not "
                "generalisation)")
            self.val_items = self.items[: max(1, cfg.eval_clips)]
        self.mean, self.std = self.mel_normalisation(base)
        log(f"data: {len(self.items)} training / {len(self.val_items)} held-out clips, {len(self.speakers)} "
            f"speaker(s), {len(self.frontend.symbols)} symbols ({self.frontend.kind}), mel mean {self.mean:.3f} "
            f"std {self.std:.3f}")

    # ------------------------------------------------------------------------------ batch probe
    def probe_unit(self) -> int:
        return round_up(max(it.frames for it in self.items), self.machine.length_multiple)

    def probe_batch(self, frames: int) -> dict:
        """As many of the longest clips as `frames` allows (at least one)."""
        by_len = sorted(self.items, key=lambda it: -it.frames)
        n = max(1, frames // self.probe_unit())
        ds = MelDataset(self.ws, self.cfg.dataset, by_len, self.feat_cfg, self.mean, self.std)
        return Collate(self.machine.length_multiple)([ds[i % len(by_len)] for i in range(n)])

    def apply_probe(self, fitted: int, longest: int) -> None:
        """What fits decides how the effective batch is split into micro-batches, never its size."""
        from utils import hardware

        cfg, m, ctx = self.cfg, self.machine, self.ctx
        if fitted == 0:
            raise StudioError(f"Not even one of the longest clips ({longest} frames) fits in memory; "
                              "turn on gradient checkpointing, use a smaller preset, or drop very long clips.")
        measured = max(longest, int(fitted * cfg.probe_headroom))
        measured = ddp.min_int(measured, ctx.dist, ctx.device)  # the smallest GPU's answer: one batch size
        rep = hardware.with_measured_batch(
            hardware.detect(), measured, f"{fitted} frames fitted in one real step; {cfg.probe_headroom:.0%} kept",
            n_processes=ctx.dist.world_size, accum=0 if cfg.grad_accumulation == "auto" else m.grad_accumulation)
        if cfg.max_frames_per_batch == "auto":
            for name in ("max_frames_per_batch", "grad_accumulation"):
                m.set(name, rep.recommended[name].value, rep.recommended[name].reason
                      if getattr(cfg, name) == "auto" else m.reasons[name])
            opt.set_effective_batch(m, cfg, ctx.dist.world_size, rep.recommended)

    # ------------------------------------------------------------------------------ data
    def start_data(self, step: int) -> None:
        cfg, m, dist = self.cfg, self.machine, self.ctx.dist
        self.sampler = FrameBatchSampler([it.frames for it in self.items], m.max_frames_per_batch, cfg.seed,
                                         dist.rank, dist.world_size, m.length_multiple, start=self.pos)
        dataset = MelDataset(self.ws, cfg.dataset, self.items, self.feat_cfg, self.mean, self.std)
        mels = m.max_frames_per_batch * self.feat_cfg.n_mels * 4  # fp32: each batch's bytes in shared memory
        self.data = ResilientLoader(lambda sampler, workers: make_loader(dataset, sampler, m, cfg.prefetch_factor,
                                                                         workers),
                                    self.sampler, m.num_workers, self.ctx.log, mels, cfg.prefetch_factor)
        # the held-out loss on at most VAL_LOSS_CLIPS of them, loaded once: every held-out clip of a 200 h set split
        # at 5 % (~11k) would be ~1 GB of mels read before the first step, and thousands of forward passes an eval
        val = MelDataset(self.ws, cfg.dataset, spread(self.val_items, VAL_LOSS_CLIPS), self.feat_cfg, self.mean,
                         self.std)
        self.val_batches = [Collate(m.length_multiple)([val[i] for i in range(j, min(j + 4, len(val)))])
                            for j in range(0, len(val), 4)]

    def next_batch(self) -> dict:
        batch = next(self.data)
        self.pos = (batch["pos"][0], batch["pos"][1] + 1)  # the next batch to read
        return batch

    def size(self, batch: dict) -> int:
        return len(batch["tokens"])

    def split(self, batch: dict, parts: int) -> list[dict]:
        return split_batch(batch, parts, self.machine.length_multiple)

    def counts(self, batch: dict) -> dict:
        return {"samples": len(batch["tokens"]), "frames": int(batch["mel_lens"].sum())}

    def progress(self) -> dict:
        return {"epoch": self.pos[0]}

    def write_run_config(self) -> None:
        write_run_config(self.run_dir / "config.json", self.cfg, resolved=self.machine.values,
                         reasons=self.machine.reasons, **self._config_extra())

    def checkpoint_config(self, step: int) -> dict:
        """config.json of a checkpoint: the model's own part (`_config_extra`) + the run's settings."""
        return {**self._config_extra(), "step": step, "train": self.cfg.to_dict(), "resolved": self.machine.values}

    def schedule_lines(self) -> list[str]:
        """The schedule as this run will make it, in optimizer updates: warm-up (never over a tenth of the run,
        whatever the GPU count: the updates are counted, not the processes), decay, passes over the data and the
        evaluations."""
        cfg, m, s = self.cfg, self.machine, self.settings
        warmup = opt.warmup_updates(cfg)
        per_pass = self.sampler.batches_per_epoch() // max(1, m.grad_accumulation)
        early = f"at steps {', '.join(map(str, s.early_evals))}, then " if s.early_evals else ""
        return [f"{'lr schedule':22} {m.lr:<10} warm-up {warmup} updates (at most a tenth of the run), cosine to "
                f"{m.lr * cfg.min_lr_ratio:.2e} at update {cfg.max_steps}",
                f"{'passes over the data':22} {cfg.max_steps / max(1, per_pass):<10.1f} {per_pass} updates a pass "
                f"({len(self.items)} clips, {m.effective_batch} frames an update)",
                f"{'evaluations':22} {s.eval_every or 'end':<10} {early}every {s.eval_every or cfg.max_steps} "
                "updates: held-out MCD (and CER with a recognizer) of the averaged and the raw weights, samples"]

    # ------------------------------------------------------------------------------ trainer state
    def state_dict(self) -> dict:
        m = self.machine
        return {"next_pos": list(self.pos), "max_frames_per_batch": m.max_frames_per_batch,
                "grad_accumulation": m.grad_accumulation}

    def load_state_dict(self, state: dict) -> None:
        self.pos = tuple(state.get("next_pos", (0, 0)))
        if state.get("max_frames_per_batch") and self.cfg.max_frames_per_batch == "auto":
            self.machine.set("max_frames_per_batch", state["max_frames_per_batch"], "kept from the run being "
                             "resumed (the batch order depends on it)")
            self.machine.set("grad_accumulation", state["grad_accumulation"], "kept from the run being resumed")


class MatchaAdapter(TextMelAdapter):
    """The Matcha acoustic model: symbols from utils.text, mels normalised by the dataset's mean and std."""

    @staticmethod
    def memory_plan(cfg: TrainConfig):
        from models.matcha import FRAME_MEMORY
        from utils.hardware import MemoryPlan

        return MemoryPlan(f"Matcha {cfg.preset}", 0.0, FRAME_MEMORY.get(cfg.preset, 1.0))

    # ------------------------------------------------------------------------------ build
    def build(self, ctx) -> None:
        cfg, log = self.cfg, ctx.log
        self.ctx = ctx
        init_cfg = ckpt.read_config(cfg.init) if cfg.init else None
        base = ckpt.read_config(ctx.resume_from) if ctx.resume_from else init_cfg
        if ctx.resume_from:
            log(f"resume: continuing from {ctx.resume_from}")
            _report_config_changes(base.get("train", {}), cfg.to_dict(), log)
        elif cfg.init:
            log(f"fine-tune: starting from {cfg.init} (mode {cfg.finetune_mode})")
            if base.get("features") and FeatureConfig.from_dict(base["features"]) != self.feat_cfg:
                raise StudioError(f"{cfg.init} was trained on other mel features; it cannot be fine-tuned on these.")
        self._build_data(base, log)
        self._build_model(base, init_cfg, ctx)
        self.modules = {"model": self.model}
        optimizer = opt.make_optimizer(self.model, cfg, self.machine)  # AdamW, fused kernel on GPU
        self.optimizers = {"model": optimizer}
        self.phases = [Phase("model", optimizer, [p for p in self.model.parameters() if p.requires_grad],
                             cfg.grad_clip)]
        self.eval_vocoder = (load_eval_vocoder(self.ws, cfg.eval_vocoder, ctx.device, self.feat_cfg)
                             if ctx.dist.main else None)

    def make_frontend(self, base: dict | None, rows: list[dict]):
        from utils.training.frontend import Frontend

        return Frontend.create(self.cfg.frontend, rows, base.get("frontend") if base else None)

    def mel_normalisation(self, base: dict | None) -> tuple[float, float]:
        if base and "mel_mean" in base.get("model", {}):
            return base["model"]["mel_mean"], base["model"]["mel_std"]
        return mel_stats(self.ws, self.cfg.dataset, self.items, self.feat_cfg)

    def _build_model(self, base: dict | None, init_cfg: dict | None, ctx) -> None:
        cfg, m = self.cfg, self.machine
        if base:
            self.mcfg = MatchaConfig.from_dict(base["model"])
            model = MatchaTTS(self.mcfg)
            model.load_state_dict(ckpt.load_weights(ctx.resume_from or cfg.init))
            model.grow_tables(len(self.frontend.symbols), len(self.speakers))  # new symbols / speakers get rows
        else:
            self.mcfg = MatchaConfig.preset_config(cfg.preset, n_symbols=len(self.frontend.symbols),
                                                   n_speakers=len(self.speakers), n_feats=self.feat_cfg.n_mels,
                                                   mel_mean=self.mean, mel_std=self.std, add_blank=m.blanks)
            model = MatchaTTS(self.mcfg)
        if base and self.mcfg.add_blank != m.blanks:
            m.set("blanks", self.mcfg.add_blank, "kept from the checkpoint: its text encoder learned with"
                  + ("" if self.mcfg.add_blank else "out") + " blanks")
        if init_cfg is not None:  # fine-tuning (also when resuming a fine-tuning run): the speakers the init lacked
            added = [s for s in self.speakers if s not in init_cfg.get("speakers", [])]
            _apply_finetune_mode(model, cfg, self.speakers, added, ctx.log)
        self.model = model.to(ctx.device)
        opt.apply_model_settings(self.model, m, compile=False)  # attention kernel, checkpointing (compile: later)
        n_params = sum(p.numel() for p in model.parameters())
        n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
        ctx.log(f"model: {self.mcfg.preset} Matcha-TTS, {n_params / 1e6:.2f}M parameters ({n_train / 1e6:.2f}M trained)")

    def compile_targets(self) -> list:
        """Compiled in place: state_dict keys stay clean, MAS (numpy) stays eager."""
        return [self.model.encoder, self.model.decoder.estimator]

    def lr_at(self, step: int) -> float:
        return opt.lr_at(step, self.cfg, self.machine.lr)

    def losses(self, batch: dict, phase: str, step: int) -> dict:
        """Duration, prior and flow-matching losses of one micro-batch ("loss" is their sum)."""
        b = batch_to_device(batch, self.ctx.device, non_blocking=self.machine.pin_memory)
        with self.ctx.autocast():
            return self.model(b["tokens"], b["token_lens"], b["mels"], b["mel_lens"], b["speakers"])

    # ------------------------------------------------------------------------------ evaluation, files
    def evaluate(self, step: int, samples: Path) -> dict:
        """Validation loss, MCD of synthesised held-out clips, audio samples (rank 0; the engine swaps in EMA)."""
        from utils.datasets.features import features

        cfg = self.cfg
        out = validation_loss(self.model, self.val_batches, self.ctx.device, self.ctx.autocast(), cfg.seed)
        out.update(synthesis_quality(self.model, self.val_items[: cfg.eval_clips], self.ws, cfg.dataset, self.feat_cfg,
                                     cfg.mcd, cfg.ode_steps, samples, cfg.sample_clips, cfg.seed, features,
                                     self.eval_vocoder))
        return out

    def score(self, metrics: dict) -> float:
        return metrics["mcd"]

    def describe(self) -> list[str]:
        cfg, m = self.cfg, self.machine
        vocoder = ("MCD and samples through this vocoder: what the Inference tab will play with it" if self.eval_vocoder
                   else "MCD and samples through Griffin-Lim (buzzy; a vocoder lowers both): new runs use the "
                   "workspace's default vocoder (vocoders/vocos-mel-24khz, fetched when online) once it is there")
        return [*m.describe(),
                f"{'grad_clip':22} {cfg.grad_clip:<10} global norm clip (Matcha: 5)",
                *self.schedule_lines(),
                f"{'eval vocoder':22} {cfg.eval_vocoder or 'griffin-lim':<10} {vocoder}"]

    def _config_extra(self) -> dict:
        return {"model": self.mcfg.to_dict(), "frontend": self.frontend.to_dict(), "speakers": self.speakers,
                "features": self.feat_cfg.to_dict()}

    def upgrade_state(self, state: dict, folder: Path) -> dict:
        """Checkpoints written before the shared engine kept the model's and optimizer's state at the top level."""
        if "modules" in state:
            return state
        return {**state, "modules": {"model": state["model"]}, "optimizers": {"model": state["optimizer"]},
                "adapter": {k: state[k] for k in ("next_pos", "max_frames_per_batch", "grad_accumulation")
                            if k in state}}


# ---------------------------------------------------------------------------------- helpers
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
