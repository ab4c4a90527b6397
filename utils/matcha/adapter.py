"""The Matcha acoustic model on the training loop (utils/training/loop.py), from zero or fine-tuned.

    python -m utils.training --config workspace/runs/RUN/config.json            # one process
    torchrun --standalone --nproc_per_node=2 -m utils.training --config ...      # data parallel (nccl / gloo)
    python app.py train --dataset NAME --run RUN --preset tiny --max-steps 200   # CLI, same code

Matcha's own, beside what every text -> mel model shares (utils/training/acoustic.py): the model (from a preset, or
grown from a checkpoint to fine-tune), its fine-tuning mode, one micro-batch's losses (duration, prior, flow
matching), the evaluation (validation loss, MCD of synthesised held-out clips through the evaluation vocoder,
samples) and each checkpoint's config.json (sizes, symbol table, speakers, features). Stop: SIGTERM, SIGINT or a
file runs/RUN/STOP.
"""
from __future__ import annotations

from pathlib import Path

import torch

from models.matcha import MatchaConfig, MatchaTTS
from utils.audio import FeatureConfig
from utils.events import StudioError
from utils.matcha import settings
from utils.training import checkpoint as ckpt
from utils.training import optimization as opt
from utils.training.acoustic import TextMelAdapter
from utils.training.batching import batch_to_device
from utils.training.config import TrainConfig
from utils.training.data import mel_stats
from utils.training import loop
from utils.training.loop import Phase
from utils.training.evaluate import load_eval_vocoder, synthesis_quality, validation_loss


def train(cfg: TrainConfig, report=None) -> dict:
    """Run (or resume) a Matcha run; the loop's result dict (utils.training.loop.train)."""
    return loop.train(MatchaAdapter(cfg, report), cfg)


class MatchaAdapter(TextMelAdapter):
    """The Matcha acoustic model: symbols from utils.text, mels normalised by the dataset's mean and std."""

    @staticmethod
    def memory_plan(cfg: TrainConfig):
        from models.matcha import FRAME_MEMORY
        from utils.hardware import MemoryPlan

        return MemoryPlan(f"Matcha {cfg.preset}", 0.0, FRAME_MEMORY.get(cfg.preset, 1.0))

    @property
    def aligner(self) -> bool:
        """Only the text encoder and its duration predictor learn (option parts=aligner: the transcript check's)."""
        return self.cfg.family_options.parts == "aligner"

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
            log(f"fine-tune: starting from {cfg.init} (mode {cfg.family_options.finetune_mode})")
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

        return Frontend.create(self.cfg.family_options.frontend, rows, base.get("frontend") if base else None)

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
        if self.aligner:  # nothing of the decoder is computed or trained (several GPUs: no unused parameter waited on)
            model.decoder.requires_grad_(False)
            ctx.log("parts: aligner: the text encoder and its duration predictor learn; the decoder is skipped")
        self.model = model.to(ctx.device)
        opt.apply_model_settings(self.model, m)  # attention kernel, checkpointing (compile: later, the loop)
        n_params = sum(p.numel() for p in model.parameters())
        n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
        ctx.log(f"model: {self.mcfg.preset} Matcha-TTS, {n_params / 1e6:.2f}M parameters ({n_train / 1e6:.2f}M trained)")

    def compiled_parts(self) -> list:
        return settings.compile_targets(self.model)

    def lr_at(self, step: int) -> float:
        return opt.lr_at(step, self.cfg, self.machine.lr)

    def losses(self, batch: dict, phase: str, step: int) -> dict:
        """Duration, prior and flow-matching losses of one micro-batch ("loss" is their sum)."""
        b = batch_to_device(batch, self.ctx.device, non_blocking=self.machine.pin_memory)
        with self.ctx.autocast():
            return self.model(b["tokens"], b["token_lens"], b["mels"], b["mel_lens"], b["speakers"],
                              decoder=not self.aligner)

    # ------------------------------------------------------------------------------ evaluation, files
    def evaluate(self, step: int, samples: Path) -> dict:
        """Validation loss, MCD of synthesised held-out clips, audio samples (rank 0; the loop swaps in EMA)."""
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
        """Checkpoints written before the shared loop kept the model's and optimizer's state at the top level."""
        if "modules" in state:
            return state
        return {**state, "modules": {"model": state["model"]}, "optimizers": {"model": state["optimizer"]},
                "adapter": {k: state[k] for k in ("next_pos", "max_frames_per_batch", "grad_accumulation")
                            if k in state}}


# ---------------------------------------------------------------------------------- helpers
def _apply_finetune_mode(model, cfg, speakers, new_speakers, log) -> None:
    mode = cfg.family_options.finetune_mode
    if mode == "full":
        return
    if mode == "freeze_encoder":
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
    """What the curator changed between the checkpoint's run and this one (a family's own settings by name too,
    nested under "options" or, in an older config, at the top)."""
    ignore = {"resume", "max_steps"}
    old, new = ({**{k: v for k, v in d.items() if k != "options"}, **(d.get("options") or {})} for d in (old, new))
    changed = {k: (old.get(k), v) for k, v in new.items() if k in old and old.get(k) != v and k not in ignore}
    for k, (a, b) in changed.items():
        log(f"resume: setting {k} changed since the checkpoint: {a!r} -> {b!r}")
    if old.get("max_steps") != new.get("max_steps"):
        log(f"resume: max_steps {old.get('max_steps')} -> {new.get('max_steps')}")
