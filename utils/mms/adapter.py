"""The MMS-TTS engine on the shared trainer: fine-tune Meta's Amharic VITS voice on a curator's clips.

    python app.py train --engine mms --dataset NAME --init facebook/mms-tts-amh --accept-licence
    python app.py train --engine mms --dataset NAME --init FOLDER       # the same files, offline

A GAN on the loop like the vocoder (utils/vocoder/training.py): two phases a step, the discriminator's update
then the generator's. The discriminator's phase runs the generator's training forward (models/vits_training.py:
text encoder, posterior encoder, flow, alignment search, duration predictor, decoder on a 0.5 s window of each
clip) and keeps it; the generator's phase scores that window again with the updated discriminator and adds the
mel, KL, duration, adversarial and feature-matching terms with the published recipe's weights (about.py). The
loop does the rest: exact resume, out-of-memory recovery (the batch splits into fewer clips), the non-finite
guard and the fp16/bf16-to-fp32 fallback, torchrun, the EMA of the generator (scored beside the raw weights),
evaluations (held-out MCD of whole sentences spoken from text, and CER with a recognizer) and checkpoints whose
model.safetensors is transformers' VitsModel itself.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from utils.audio import save_audio
from utils.events import StudioError
from utils.mms.about import (BETAS, CLIPS_PER_STEP, CPU_CLIPS_PER_STEP, EPS, FINE_TUNE_LR, LOSS_WEIGHTS,
                             NEEDS_BASE, SAMPLE_RATE, SEGMENT_FRAMES)
from utils.mms.data import FEATURES
from utils.training import gan
from utils.training import optimization as opt
from utils.training.config import TrainConfig, write_run_config
from utils.training import loop
from utils.training.loop import LoopSettings, Phase
from utils.training.position import DataPosition
from utils.workspace import Workspace

# The batch guess's plan (utils.hardware.MemoryPlan); the batch itself is set in clips (_build_data), so it only
# informs the shared resolution. FIXED_GB: generator + discriminators (83 M parameters) in fp32 with gradients,
# AdamW's two moments and the EMA. FRAME_FACTOR: an estimate (a clip's fixed 0.5 s decoder window and discriminators
# dominate, ~400 MiB a clip on the CPU: bench/mms_step.py); not measured on a GPU yet.
FIXED_GB = 1.6
FRAME_FACTOR = 2.0
NOT_FOR_MMS = ("attention", "grad_checkpointing", "fp8", "length_multiple", "effective_batch")


def train(cfg: TrainConfig, report=None) -> dict:
    """Run (or resume) an MMS fine-tune; the loop's result dict (utils.training.loop.train)."""
    return loop.train(MmsAdapter(cfg, report), cfg, nan_phase="generator")


class MmsAdapter(DataPosition):
    kind = "mms"
    unit = "clip"
    inference = "generator"
    oom_advice = "lower max_frames_per_batch (fewer clips a step) or drop the longest clips."
    state_newest_only = True  # ~1.2 GB of trainer state a checkpoint: only the newest keeps it (it resumes)
    KEPT = ("max_frames_per_batch",)  # resumed with its batch; every batch updates the weights (no accumulation)

    @staticmethod
    def memory_plan(cfg: TrainConfig):
        from utils.hardware import MemoryPlan

        return MemoryPlan("MMS-TTS (VITS)", FIXED_GB, FRAME_FACTOR)

    def __init__(self, cfg: TrainConfig, report=None):
        self.cfg = cfg
        self.ws = Workspace.open(cfg.workspace)
        self.run_dir = self.ws.run_dir(cfg.run)
        self.machine = self._machine(report)
        self.settings = LoopSettings.of_train_config(cfg, self.machine.ema_decay)
        self.pos = (0, 0)  # (pass, batch index) of the next batch
        self.cached = None

    def _machine(self, report) -> opt.Machine:
        """The shared resolution (device, precision and its fallback, TF32, loader, EMA), then what is MMS's own."""
        cfg = self.cfg
        m = opt.resolve(cfg, report, world_size=int(os.environ.get("WORLD_SIZE", "1")), plan=self.memory_plan(cfg))
        for name in NOT_FOR_MMS:
            m.values.pop(name, None)
            m.reasons.pop(name, None)
        rate = FINE_TUNE_LR if cfg.lr == "auto" else float(cfg.lr)
        m.set_family_lr(rate, "the published fine-tuning recipe's (finetune-hf-vits), constant: VITS decays it "
              "by 0.999875 a pass over the data, under 1 % in a fine-tune" if cfg.lr == "auto" else "set by the user")
        betas = BETAS if (cfg.beta1, cfg.beta2) == (0.9, 0.99) else (cfg.beta1, cfg.beta2)
        m.set("betas", betas, "VITS's AdamW betas (0.8, 0.99)" if betas == BETAS else "set by the user")
        m.set("compile", False, "the GAN runs eager (as the vocoder): VITS's flows and alignment change shape each step")
        m.set("probe", False, "the batch is set in clips (a fixed 0.5 s decoder window each), and an out-of-memory "
                              "splits it")
        if cfg.grad_accumulation == "auto":
            m.set("grad_accumulation", 1, "every batch updates the weights, as the recipe")
        if m.precision != "fp32":
            kl = (", and in fp16 the networks the KL term reaches too (text encoder, posterior encoder, flow: their "
                  "gradients overflow fp16)" if m.precision == "fp16" else "")
            m.set("precision", m.precision, f"{m.reasons['precision']} The alignment search, the duration "
                  f"predictor's flows, the spectrograms and every loss stay fp32{kl}; a run whose mixed precision "
                  "keeps failing goes on in fp32 from its last good weights")
        return m

    # ------------------------------------------------------------------------------ build
    def build(self, ctx) -> None:
        from utils.mms import base as bases
        from utils.text import load_user_dict
        from utils.training import checkpoint as ckpt

        cfg, self.ctx = self.cfg, ctx
        if ctx.resume_from:
            ctx.log(f"resume: continuing from {ctx.resume_from}")
            start = bases.describe_base(ctx.resume_from)
        else:
            if not cfg.init:
                raise StudioError(NEEDS_BASE)
            if bases.is_hub_id(cfg.init):
                ctx.log(f"downloading the MMS-TTS Amharic base (once; licence accepted: {cfg.licence_accepted})")
                cfg.init = str(bases.fetch_for_run(self.ws, bool(cfg.licence_accepted), ctx.dist, ctx.log))
            start = bases.describe_base(cfg.init)
            ctx.log(f"fine-tune: starting from {'the MMS fine-tune' if start['finetune'] else 'the MMS-TTS base'} "
                    f"{cfg.init} ({start['licence']})")
        self.licence, self.text = start["licence"], start["text"]
        self._build_data(ctx.log, load_user_dict(self.ws))
        self.gen = bases.build_generator(start).to(ctx.device).train()
        if ctx.resume_from:  # the loop loads the saved discriminator into one of the saved sizes
            from models.vits_discriminator import VitsDiscriminator

            self.disc = VitsDiscriminator(**ckpt.read_config(ctx.resume_from)["discriminator_sizes"])
        else:
            self.disc = bases.build_discriminator(start, ctx.log)
        self.disc.to(ctx.device).train()
        self._check_mas(ctx)
        m, fused = self.machine, {"fused": True} if self.machine.fused_adamw else {"foreach": True}
        opt_g = torch.optim.AdamW(self.gen.parameters(), m.lr, m.betas, EPS, cfg.weight_decay, **fused)
        opt_d = torch.optim.AdamW(self.disc.parameters(), m.lr, m.betas, EPS, cfg.weight_decay, **fused)
        self.modules = {"generator": self.gen, "discriminator": self.disc}
        self.optimizers = {"generator": opt_g, "discriminator": opt_d}
        self.phases = [Phase("discriminator", opt_d, list(self.disc.parameters())),
                       Phase("generator", opt_g, list(self.gen.parameters()))]
        n_g, n_d = (sum(p.numel() for p in mod.parameters()) / 1e6 for mod in (self.gen, self.disc))
        ctx.log(f"model: VITS generator {n_g:.1f} M parameters, discriminators {n_d:.1f} M; {SAMPLE_RATE // 1000} kHz")

    def _build_data(self, log, user_dict: dict) -> None:
        from utils.mms.data import prepare_clips
        from utils.training.data import held_out_or_fit, training_rows

        cfg, m = self.cfg, self.machine
        train_rows, val_rows = training_rows(self.ws, cfg.dataset)
        speakers = sorted({r.get("speaker", "default") for r in train_rows + val_rows})
        if len(speakers) > 1:
            raise StudioError(f"The MMS engine adapts Meta's one voice to one speaker; dataset {cfg.dataset} has "
                              f"{len(speakers)} ({', '.join(speakers[:5])}): exclude the others' clips on the Dataset "
                              "tab, or train them with the Matcha engine (one voice, many speakers).")
        self.speakers = speakers
        self.clips = prepare_clips(self.ws, cfg.dataset, train_rows, self.text, user_dict, log)
        self.val_clips = prepare_clips(self.ws, cfg.dataset, val_rows, self.text, user_dict, log)
        self.val_clips = held_out_or_fit(cfg.dataset, self.clips, self.val_clips, cfg.eval_clips, log)
        if cfg.max_frames_per_batch == "auto":
            median = int(np.median([c.frames for c in self.clips]))
            clips = CLIPS_PER_STEP if m.device == "cuda" else CPU_CLIPS_PER_STEP
            m.set("max_frames_per_batch", clips * median,
                  f"about {clips} clips of the median length ({median} frames) a step: "
                  + ("finetune-hf-vits's batch of 16" if m.device == "cuda" else
                     f"on a CPU a step of {clips} clips takes seconds, not minutes"))
        log(f"data: {len(self.clips)} training / {len(self.val_clips)} held-out clips of one speaker "
            f"({speakers[0]}), read through uroman; {len(self.text.vocab)} letters in the base's vocabulary")

    def data_counts(self) -> tuple[int, int]:  # a resume says when these changed (DataPosition)
        return len(self.clips), len(self.val_clips)

    def _check_mas(self, ctx) -> None:
        """The alignment search's kernel, trusted on the GPU only after it agrees with the reference (as Matcha's)."""
        from models.alignment import mas_disagreement

        m = self.machine
        if m.mas == "triton" and (why := mas_disagreement("triton", m.device)):
            m.set("mas", "cython", f"the Triton kernel did not match the reference on this GPU ({why}): Cython kernel")

    def compile_targets(self) -> list:
        return []

    # ------------------------------------------------------------------------------ data
    def start_data(self, step: int) -> None:
        from utils.mms.data import ClipDataset, batch_bytes, loader
        from utils.training.batching import FrameBatchSampler
        from utils.training.loader import ResilientLoader

        cfg, m, dist = self.cfg, self.machine, self.ctx.dist
        self.sampler = FrameBatchSampler([c.frames for c in self.clips], m.max_frames_per_batch, cfg.seed, dist.rank,
                                         dist.world_size, length_multiple=1, start=self.pos)
        clips = ClipDataset(self.clips)
        self.data = ResilientLoader(lambda sampler, workers: loader(clips, sampler, m, cfg.prefetch_factor, workers),
                                    self.sampler, m.num_workers, self.ctx.log, batch_bytes(m.max_frames_per_batch),
                                    cfg.prefetch_factor)
        self.val_data = ClipDataset(self.val_clips)

    def size(self, batch: dict) -> int:
        return len(batch["ids"])

    def padded_frames(self, batch: dict) -> int:
        return int(batch["spec_lens"].max()) * len(batch["spec_lens"])

    def split(self, batch: dict, parts: int) -> list[dict]:
        from utils.mms.data import split

        return split(batch, parts)

    def counts(self, batch: dict) -> dict:
        return {"samples": len(batch["ids"]), "frames": int(batch["spec_lens"].sum())}

    def progress(self) -> dict:
        return {"epoch": self.pos[0]}

    # ------------------------------------------------------------------------------ the step
    def lr_at(self, step: int) -> float:
        return self.machine.lr

    def losses(self, batch: dict, phase: str, step: int) -> dict:
        key = (batch["ids"].data_ptr(), tuple(batch["ids"].shape))
        if phase == "discriminator":
            forward, real = self._forward(batch)
            self.cached = (key, forward, real)
            return self._discriminator_losses(forward, real)
        cached, self.cached = self.cached, None
        forward, real = cached[1:] if cached is not None and cached[0] == key else self._forward(batch)
        return self._generator_losses(forward, real, batch)

    def _forward(self, batch: dict):
        """The generator's training forward and the real audio under its windows."""
        from models.alignment import sequence_mask
        from models.vits_training import training_forward, windows

        device, hop = self.ctx.device, FEATURES.hop_length
        ids, spec = batch["ids"].to(device, non_blocking=True), batch["spec"].to(device, non_blocking=True)
        id_mask = sequence_mask(batch["id_lens"], ids.shape[1]).to(device)
        spec_mask = sequence_mask(batch["spec_lens"], spec.shape[-1]).to(device)
        forward = training_forward(self.gen, ids, id_mask, spec, spec_mask, SEGMENT_FRAMES, self.machine.mas,
                                   self.ctx.autocast)
        real = windows(batch["wave"].to(device, non_blocking=True), forward.starts * hop, SEGMENT_FRAMES * hop)
        return forward, real

    def _discriminator_losses(self, forward, real) -> dict:
        with self.ctx.autocast():
            real_logits, _ = self.disc(real)
            fake_logits, _ = self.disc(forward.wave.detach())
        loss_d = gan.least_squares_discriminator_loss(real_logits, fake_logits)
        return {"loss": LOSS_WEIGHTS["discriminator"] * loss_d, "loss_d": loss_d}

    def _generator_losses(self, forward, real, batch: dict) -> dict:
        from models.vits_training import windows
        from utils.mms.features import log_mel, spectrogram

        with gan.frozen(self.disc), self.ctx.autocast():  # the generator's loss reaches no discriminator weight
            _, real_features = self.disc(real)
            fake_logits, fake_features = self.disc(forward.wave)
        real_mel = windows(log_mel(batch["spec"].to(self.ctx.device), FEATURES), forward.starts, SEGMENT_FRAMES)
        loss_mel = (log_mel(spectrogram(forward.wave, FEATURES), FEATURES) - real_mel).abs().mean()
        loss_adv = gan.least_squares_generator_loss(fake_logits)
        loss_fm = gan.vits_feature_matching(real_features, fake_features)
        w = LOSS_WEIGHTS
        loss_g = (w["mel"] * loss_mel + w["kl"] * forward.kl + w["duration"] * forward.duration
                  + w["adversarial"] * loss_adv + w["feature_matching"] * loss_fm)
        return {"loss": loss_g, "loss_g": loss_g, "loss_mel": loss_mel, "loss_kl": forward.kl,
                "loss_dur": forward.duration, "loss_adv": loss_adv, "loss_fm": loss_fm}

    def forget_step(self) -> None:
        """A step ran out of memory: let go of the generator's output and its graph before the CUDA cache empties."""
        self.cached = None

    # ------------------------------------------------------------------------------ evaluation
    def evaluate(self, step: int, samples: Path) -> dict:
        """Each held-out sentence spoken from its text (the noise of inference, a fixed seed), its MCD against the
        recording (the project's WORLD definition), samples, and the recognizer's CER when there is one."""
        from utils.evaluation import mcd
        from utils.mms.speech import speak_ids
        from utils.training.evaluate import intelligibility, spoken_text

        cfg, scores, waves = self.cfg, [], []
        clips = self.val_clips[: cfg.eval_clips]
        self.gen.eval()
        for i, clip in enumerate(clips):
            wave = speak_ids(self.gen, [clip.ids], seed=cfg.seed + i)[0].cpu().numpy()
            scores.append(mcd(self.val_data.wave(i).numpy(), SAMPLE_RATE, wave, SAMPLE_RATE))
            waves.append(wave)
            if i < cfg.sample_clips:
                save_audio(samples / f"{clip.row['id']}.wav", wave, SAMPLE_RATE)
        self.gen.train()
        texts = [spoken_text(c.row) for c in clips]
        return {"mcd": float(np.mean(scores)), "mcd_per_clip": scores,
                **intelligibility(self.ws, waves, SAMPLE_RATE, texts, str(self.ctx.device),
                                   (cfg.dataset, [c.row for c in clips]))}

    def score(self, metrics: dict) -> float:
        return metrics["mcd"]

    # ------------------------------------------------------------------------------ files
    def describe(self) -> list[str]:
        cfg, w = self.cfg, LOSS_WEIGHTS
        return [*self.machine.describe(),
                f"{'text':22} {'uroman':<10} the studio's normaliser, then uroman's letters (as Meta's base reads)",
                f"{'loss weights':22} {'recipe':<10} mel {w['mel']:g}, KL {w['kl']:g}, duration {w['duration']:g}, "
                f"adversarial {w['adversarial']:g} (discriminator {w['discriminator']:g}), feature matching "
                f"{w['feature_matching']:g} (finetune-hf-vits)",
                f"{'decoder window':22} {SEGMENT_FRAMES * FEATURES.hop_length:<10} samples of each clip a step (VITS)",
                f"{'evaluations':22} {self.settings.eval_every or 'end':<10} held-out MCD (WORLD) of whole sentences "
                f"spoken from text (and CER with a recognizer), averaged and raw weights; steps -> {cfg.max_steps}"]

    def _config_extra(self) -> dict:
        from models.vits_discriminator import sizes_of

        return {"engine": self.cfg.engine, "model": self.gen.config.to_dict(), "text": self.text.to_dict(),
                "speakers": self.speakers, "features": FEATURES.to_dict(), "licence": self.licence,
                "discriminator_sizes": sizes_of(self.disc.state_dict())}

    def write_run_config(self) -> None:
        write_run_config(self.run_dir / "config.json", self.cfg, resolved=self.machine.values,
                         reasons=self.machine.reasons, **self._config_extra())

    def checkpoint_config(self, step: int) -> dict:
        return {**self._config_extra(), "step": step, "train": self.cfg.to_dict(), "resolved": self.machine.values}

    # ------------------------------------------------------------------------------ trainer state
    def upgrade_state(self, state: dict, folder: Path) -> dict:
        return state
