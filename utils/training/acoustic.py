"""What every text -> mel model shares on the training loop (utils/training/loop.py): Matcha
(utils/matcha/adapter.py) and F5-TTS (utils/f5/adapter.py) subclass TextMelAdapter.

It holds the dataset's rows and symbols, the speakers, the frame-budget batches and their data position (what the
batch probe measures and resumes), the held-out clips, the schedule's lines and each checkpoint's config.json; the
family adds its model, its losses and its evaluation.
"""
from __future__ import annotations

import os

from utils.audio import FeatureConfig
from utils.events import StudioError
from utils.training import checkpoint as ckpt
from utils.training import compile_pays
from utils.training import optimization as opt
from utils.training.batching import Collate, FrameBatchSampler, make_loader, round_up, split_batch
from utils.training.config import AUTO, TrainConfig, write_run_config
from utils.training.data import (VAL_LOSS_CLIPS, MelDataset, held_out_or_fit, prepare_items, spread,
                                  training_rows)
from utils.training.loop import LoopSettings
from utils.training.loader import ResilientLoader
from utils.training.position import DataPosition
from utils.training.shapes import ShapePlan
from utils.voice_folders import step_of
from utils.workspace import Workspace


class TextMelAdapter(DataPosition):
    """What every text -> mel model shares on the loop: the dataset's rows, symbols and speakers, the clips'
    frame counts and log-mels, batches of at most N padded frames and their data position, the batch probe. The
    model's own parts (`build`, `losses`, `evaluate`, its config files) are in the subclasses."""
    kind = "acoustic"
    unit = "utterance"
    oom_advice = "turn on gradient checkpointing or use a smaller preset."
    inference = "model"
    # the clips' padding too: a short trial resumed with more steps would turn compile on, pad to 64 frames instead of 4
    # and regroup the epoch it is in
    KEPT = DataPosition.KEPT + ("length_multiple",)

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
        self.val_items = held_out_or_fit(cfg.dataset, self.items, self.val_items, cfg.eval_clips, log)
        self.mean, self.std = self.mel_normalisation(base)
        log(f"data: {len(self.items)} training / {len(self.val_items)} held-out clips, {len(self.speakers)} "
            f"speaker(s), {len(self.frontend.symbols)} symbols ({self.frontend.kind}), mel mean {self.mean:.3f} "
            f"std {self.std:.3f}")

    def data_counts(self) -> tuple[int, int]:
        return len(self.items), len(self.val_items)

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
        measured = max(longest, int(fitted * cfg.probe_headroom))  # `fitted`: the smallest GPU's (the loop's)
        rep = hardware.with_measured_batch(
            hardware.detect(), measured, f"{fitted} frames fitted in one real step; {cfg.probe_headroom:.0%} kept",
            n_processes=ctx.dist.world_size, accum=0 if cfg.grad_accumulation == "auto" else m.grad_accumulation)
        if cfg.max_frames_per_batch == "auto":
            for name in ("max_frames_per_batch", "grad_accumulation"):
                m.set(name, rep.recommended[name].value, rep.recommended[name].reason
                      if getattr(cfg, name) == "auto" else m.reasons[name])
            opt.set_effective_batch(m, cfg, ctx.dist.world_size, rep.recommended)

    # ------------------------------------------------------------------------------ data
    def shape_plan(self, planned: bool | None = None) -> ShapePlan | None:
        """A compiled run's few batch shapes (utils/training/shapes.py), from its clips and micro-batch; None eager:
        frame-filled batches pad least, and eager code runs any shape as fast. `planned`: whether the batches are
        planned whatever compile says (a resumed run keeps its own batches, see `load_state_dict`)."""
        m = self.machine
        if not (m.values.get("compile") if planned is None else planned):
            return None
        if getattr(self, "plan", None) is None or self.plan_for != m.max_frames_per_batch:
            self.plan = ShapePlan.fit([it.frames for it in self.items], [len(it.tokens) for it in self.items],
                                      m.max_frames_per_batch, m.length_multiple)
            self.plan_for = m.max_frames_per_batch
        return self.plan

    def compile_targets(self) -> list:
        """The model's parts to compile (its family's `compiled_parts`), once "auto" is settled with this run's own
        numbers: its batch shapes and its measured micro-batch (utils/training/compile_pays.py). A run that compiles
        keeps Inductor's kernels in the workspace, for a resume or a new session of the same shapes."""
        cfg, m = self.cfg, self.machine
        parts = self.compiled_parts()
        if cfg.compile == AUTO and m.compile and m.report is not None and m.report.gpus:
            for name, value in self.resumed_sizes().items():  # `load_state_dict` sets the same, later
                m.set(name, value, "kept from the run being resumed (the batch order depends on it)")
            on, why = opt.compile_verdict(cfg, m, m.report, self.memory_plan(cfg), len(self.shape_plan()) * len(parts),
                                          self.resumed_step())
            m.set("compile", on, why)
            if not on and cfg.length_multiple == AUTO:
                m.set("length_multiple", *opt.EAGER_LENGTH)
        if not m.compile:
            return []
        self.kernels_warm = compile_pays.warm(self.ws.root)
        compile_pays.keep_kernels_in(self.ws.root)
        return parts

    def resumed_step(self) -> int:
        """The step a resume goes on from (0 for a new run): a run resumed near its end has few steps left to win a
        compile back (the loop settles compile before it loads the checkpoint)."""
        return step_of(ckpt.resume_point(self.cfg.resume, self.run_dir / "checkpoints")) or 0

    def resumed_sizes(self) -> dict:
        """The batch sizes of the run being resumed that the curator left "auto" (its checkpoint's resolved
        settings): the loop settles compile before it loads the checkpoint, and a resume skips the probe, so the
        verdict would weigh the machine's first guess (40,000 frames on an H100) instead of the run's own batch."""
        folder = ckpt.resume_point(self.cfg.resume, self.run_dir / "checkpoints")
        try:
            resolved = (ckpt.read_config(folder).get("resolved") or {}) if folder else {}
        except (StudioError, ValueError):  # an unreadable config: the loop's own load says what is wrong
            resolved = {}
        return {name: resolved[name] for name in self.KEPT if resolved.get(name) and getattr(self.cfg, name) == AUTO}

    def graphs_built(self, graphs: int, seconds: float) -> None:
        """What a step that built `graphs` graphs took, for the next run's decision on this machine."""
        for _ in range(graphs):
            compile_pays.remember(self.ws.root, compile_pays.machine_key(self.machine.report), seconds / graphs,
                                  self.kernels_warm)

    def batch_shapes(self) -> int | None:
        plan = self.shape_plan()
        return len(plan) if plan else None

    def state_dict(self) -> dict:
        kept = {"fixed_shapes": self.fixed_shapes} if hasattr(self, "fixed_shapes") else {}  # once its data started
        return {**super().state_dict(), **kept}

    def load_state_dict(self, state: dict) -> None:
        """Also whether the run's batches were planned (a compiled run's) or filled up to the frame budget: "auto"
        decides compile again at a resume, with more steps or a compile time measured since, and the other kind of
        batches would regroup the epoch the run is in. The run keeps its own; a compile on frame-filled batches
        builds more graphs (its budget runs the rest eager), which costs speed, not the run's data order."""
        super().load_state_dict(state)
        if "fixed_shapes" in state:
            self.kept_fixed_shapes = bool(state["fixed_shapes"])
            if self.kept_fixed_shapes != bool(self.machine.values.get("compile")):
                kind = "planned shapes" if self.kept_fixed_shapes else "batches filled up to the frame budget"
                self.ctx.log(f"resume: the batches stay the run's own ({kind}), so that the data order is the same; "
                             f"compile is {'on' if self.machine.values.get('compile') else 'off'} now")

    def start_data(self, step: int) -> None:
        cfg, m, dist = self.cfg, self.machine, self.ctx.dist
        plan = self.shape_plan(getattr(self, "kept_fixed_shapes", None))
        self.fixed_shapes = plan is not None
        self.sampler = FrameBatchSampler([it.frames for it in self.items], m.max_frames_per_batch, cfg.seed,
                                         dist.rank, dist.world_size, m.length_multiple, start=self.pos, plan=plan)
        if plan:
            self.ctx.log(f"batches: {len(plan)} shapes (clips x frames: {plan.describe()}), so that the compiled "
                         "model builds few graphs")
        dataset = MelDataset(self.ws, cfg.dataset, self.items, self.feat_cfg, self.mean, self.std)
        mels = m.max_frames_per_batch * self.feat_cfg.n_mels * 4  # fp32: each batch's bytes in shared memory
        collate = Collate(m.length_multiple, plan=plan)
        self.data = ResilientLoader(lambda sampler, workers: make_loader(dataset, sampler, m, cfg.prefetch_factor,
                                                                         workers, collate),
                                    self.sampler, m.num_workers, self.ctx.log, mels, cfg.prefetch_factor)
        # the held-out loss on at most VAL_LOSS_CLIPS of them, loaded once: every held-out clip of a 200 h set split
        # at 5 % (~11k) would be ~1 GB of mels read before the first step, and thousands of forward passes an eval
        val = MelDataset(self.ws, cfg.dataset, spread(self.val_items, VAL_LOSS_CLIPS), self.feat_cfg, self.mean,
                         self.std)
        self.val_batches = [Collate(m.length_multiple)([val[i] for i in range(j, min(j + 4, len(val)))])
                            for j in range(0, len(val), 4)]

    def size(self, batch: dict) -> int:
        return batch.get("rows", len(batch["tokens"]))  # a split piece topped up to its shape counts its own clips

    def padded_frames(self, batch: dict) -> int:
        return batch["mels"].shape[0] * batch["mels"].shape[-1]

    def split(self, batch: dict, parts: int) -> list[dict]:
        return split_batch(batch, parts, self.machine.length_multiple, fixed=getattr(self, "fixed_shapes", False))

    def counts(self, batch: dict) -> dict:
        return {"samples": len(batch["tokens"]), "frames": int(batch["mel_lens"].sum())}

    def progress(self) -> dict:
        return {"epoch": self.pos[0]}

    def write_run_config(self) -> None:
        write_run_config(self.run_dir / "config.json", self.cfg, resolved=self.machine.values,
                         reasons=self.machine.reasons, **self._family_config())

    def checkpoint_config(self, step: int) -> dict:
        """config.json of a checkpoint: its family and the model's own part + the run's settings."""
        return {**self._family_config(), "step": step, "train": self.cfg.to_dict(), "resolved": self.machine.values}

    def _family_config(self) -> dict:
        """The family's name (families.of reads it back: a voice speaks and exports through its own family, also
        one built on another's adapter), then the model's own part (`_config_extra`)."""
        return {"engine": self.cfg.engine, **self._config_extra()}

    def schedule_lines(self) -> list[str]:
        """The schedule as this run will make it, in optimizer updates: warm-up (never over a tenth of the run,
        whatever the GPU count: the updates are counted, not the processes), decay, passes over the data and the
        evaluations."""
        cfg, m, s = self.cfg, self.machine, self.settings
        warmup = opt.warmup_updates(cfg)
        per_pass = self.sampler.batches_per_epoch() // max(1, m.grad_accumulation)
        early = f"at steps {', '.join(map(str, s.early_evals))}, then " if s.early_evals else ""
        evaluations = (f"{s.eval_every or 'end':<10} {early}every {s.eval_every or cfg.max_steps} updates: held-out "
                       "MCD (and CER with a recognizer) of the averaged and the raw weights, samples"
                       if s.eval_at_end else f"{'none':<10} this run is not evaluated (evaluate: false)")
        return [f"{'lr schedule':22} {m.lr:<10} warm-up {warmup} updates (at most a tenth of the run), cosine to "
                f"{m.lr * cfg.min_lr_ratio:.2e} at update {cfg.max_steps}",
                f"{'passes over the data':22} {cfg.max_steps / max(1, per_pass):<10.1f} {per_pass} updates a pass "
                f"({len(self.items)} clips, {m.effective_batch} frames an update)",
                f"{'evaluations':22} {evaluations}"]

    # ------------------------------------------------------------------------------ trainer state
