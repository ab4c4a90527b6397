"""Vocoder GAN training on the shared loop (utils/training/loop.py): fine-tune the public Vocos (or train
from scratch) on a prepared dataset.

    python app.py train-vocoder --dataset NAME --run NAME [--init charactr/vocos-mel-24khz | FOLDER]
    python -m utils.vocoder.training --config workspace/runs/NAME/config.json   (the job service's way)

Recipe (Vocos, shared/notes/tts-model.md 2.4-2.6): random 16 384-sample crops peak-normalised to
-1..-6 dBFS, log-mel in, waveform out; multi-period + multi-resolution discriminators with hinge
loss; generator loss = adv_MPD + 0.1 adv_MRD + fm_MPD + 0.1 fm_MRD + 45 * mel L1; AdamW, betas
(0.8, 0.9), cosine decay to 0; one discriminator step then one generator step per batch. Vocos
trains in fp32; on a GPU with bf16 we run the networks' convolutions under bf16 autocast and keep
the ISTFT head, the STFTs, the mel loss and every loss sum in fp32.

The adapter gives the loop two phases per step (the discriminators' update, then the generator's), the crops
of each step (drawn from a generator seeded by (seed, rank, step index), so a resume draws the same crops), the
losses and the evaluation; the loop does the rest, as for the acoustic model: run files, stop, out-of-memory
(the micro-batch halves, the step is kept), the non-finite guard (an update whose gradients are not finite is
skipped, the learning rate halved; five such steps in a row save and stop), checkpoints (model.safetensors +
config.json: a loadable vocoder; trainer_state.pt: discriminators, optimizers, position) and torchrun (each
rank draws its own crops; gradients averaged in one flat all-reduce per phase; rank 0 evaluates and saves).
"""
from __future__ import annotations

import argparse
import math
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from utils.audio import MODEL_SAMPLE_RATE, FeatureConfig, load_audio, log_mel, save_audio
from utils.events import Event, StudioError
from utils.hardware import VOCODER_STEPS_GPU
from utils.training.gan import feature_matching_loss, frozen, hinge_discriminator_loss, hinge_generator_loss
from utils.workspace import Workspace, atomic_write_json, read_json

# (multi-period widths, multi-resolution width) per preset: Vocos/HiFi-GAN sizes, small ones for CPU smoke runs
DISCRIMINATOR_SIZES = {"mel-24khz": ((32, 128, 512, 1024, 1024), 32), "small": ((32, 128, 512, 1024, 1024), 32),
                       "tiny": ((8, 16, 32, 32, 32), 8)}


@dataclass
class VocoderTrainConfig:
    dataset: str                      # prepared dataset under workspace/datasets
    run: str                          # run folder under workspace/runs
    preset: str = "mel-24khz"         # generator size when training from scratch (models.vocoder.PRESETS)
    init: str | None = None           # public Vocos folder/file/hub id, or one of our vocoder folders
    resume: str | None = None         # "auto": continue from the run's newest checkpoint
    max_steps: int = VOCODER_STEPS_GPU  # generator updates (each paired with one discriminator update)
    max_minutes: float = 0.0          # a time limit on each start: ends as finished (evaluated, saved); 0: none
    batch_size: int = 16              # Vocos: 16 x 16 384 samples
    segment: int = 16_384             # samples per crop (0.68 s, 65 mel frames)
    lr: float | None = None           # None: 5e-4 from scratch, 1e-4 when fine-tuning (see reasons)
    betas: tuple[float, float] = (0.8, 0.9)
    weight_decay: float = 0.01        # torch AdamW default, as Vocos
    mel_weight: float = 45.0
    mrd_weight: float = 0.1           # weight of the multi-resolution terms (Vocos mel config)
    mpd_channels: tuple[int, ...] | None = None  # None: from the preset (DISCRIMINATOR_SIZES)
    mrd_channels: int | None = None   # None: from the preset
    log_every: int = 10
    eval_every: int = 500
    checkpoint_every: int = 500       # steps between checkpoints (the acoustic TrainConfig's name too)
    keep_checkpoints: int = 3         # newest N kept, plus the best by validation MCD
    val_clips: int = 4                # validation clips scored with the log-mel proxy
    mcd_clips: int = 2                # of those, clips also scored with the WORLD MCD (slower)
    cache_seconds: float = 3600.0     # decoded training audio kept in memory
    seed: int = 4444
    device: str = "auto"
    precision: str = "auto"           # auto: bf16 autocast on a GPU that has it, else fp32; or "bf16" / "fp32"
    max_bad_steps: int = 5            # updates in a row with non-finite gradients before the run stops
    reasons: dict = field(default_factory=dict)
    fault_oom_above_batch: int = 0    # TEST HOOK: steps with more crops than this raise out-of-memory
    fault_oom_ranks: list = field(default_factory=list)  # TEST HOOK: only these ranks (all if empty)
    fault_nan_steps: list = field(default_factory=list)  # TEST HOOK: the generator's loss is NaN at these steps

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "VocoderTrainConfig":
        """From a vocoder run's config.json (its settings under "train", as an acoustic run's; at the top, beside
        "kind" and "workspace", in a run written before) or a dict of settings. A name it does not know is refused,
        as TrainConfig refuses one; `save_every`, the older name of checkpoint_every, is read as it."""
        d = {k: v for k, v in (d.get("train") or d).items() if k not in ("kind", "workspace")}
        if "save_every" in d:
            d.setdefault("checkpoint_every", d.pop("save_every"))
        if unknown := sorted(set(d) - set(cls.__dataclass_fields__)):
            raise StudioError(f"unknown vocoder training settings: {', '.join(unknown)}")
        for key in ("betas", "mpd_channels"):
            if d.get(key) is not None:
                d[key] = tuple(d[key])
        return cls(**d)


# ------------------------------------------------------------------------------------ data
class ClipSampler:
    """Random fixed-length crops of a dataset's training clips, peak-normalised to -1..-6 dBFS."""

    def __init__(self, paths: list[Path], segment: int, rng: np.random.Generator, cache_seconds: float):
        self.paths, self.segment, self.rng = paths, segment, rng
        self.cache: dict[Path, np.ndarray] = {}
        self.cache_budget = int(cache_seconds * MODEL_SAMPLE_RATE)

    def clip(self, path: Path) -> np.ndarray:
        if path in self.cache:
            return self.cache[path]
        wave, _ = load_audio(path, MODEL_SAMPLE_RATE)
        if sum(len(w) for w in self.cache.values()) + len(wave) <= self.cache_budget:
            self.cache[path] = wave
        return wave

    def crop(self, wave: np.ndarray) -> np.ndarray:
        if len(wave) < self.segment:  # short clips are repeated, as Vocos does
            wave = np.tile(wave, math.ceil(self.segment / max(1, len(wave))))
        start = int(self.rng.integers(0, len(wave) - self.segment + 1))
        x = wave[start:start + self.segment]
        peak = float(np.abs(x).max())
        gain_db = self.rng.uniform(-6.0, -1.0)
        return (x / peak * 10 ** (gain_db / 20)).astype(np.float32) if peak > 1e-4 else x.astype(np.float32)

    def batch(self, n: int) -> np.ndarray:
        picks = self.rng.integers(0, len(self.paths), size=n)
        return np.stack([self.crop(self.clip(self.paths[i])) for i in picks])


def dataset_clips(ws: Workspace, name: str) -> tuple[list[dict], list[dict]]:
    """(train rows, val rows) of a prepared dataset, excluded rows left out, audio paths resolved."""
    from utils.datasets.manifest import load_manifest

    folder = ws.dataset_dir(name)
    rows = []
    for row in load_manifest(ws, name):
        if row.get("excluded") or not row.get("audio"):
            continue
        path = (folder / row["audio"]).resolve()
        if not path.is_relative_to(folder.resolve()):
            raise StudioError(f"Dataset {name} row {row['id']}: audio path {row['audio']!r} points outside the dataset.")
        if not path.exists():
            raise StudioError(f"Dataset {name} row {row['id']}: audio file {row['audio']} is missing. "
                              "Prepare the dataset again.")
        rows.append({**row, "path": path})
    if not rows:
        raise StudioError(f"Dataset {name} has no usable clips (all excluded or none listed).")
    train = [r for r in rows if r.get("split", "train") != "val"]
    val = [r for r in rows if r.get("split") == "val"]
    if not train:
        train = val
    if not val:  # a tiny dataset without a val split still gets a (training) clip to listen to
        val = train[:1]
    return train, val


# ---------------------------------------------------------------------------------- losses
def discriminator_losses(gen, mpd, mrd, y, features: FeatureConfig, mrd_weight: float, amp) -> tuple[dict, tuple]:
    """The discriminators' hinge loss on real crops `y` [B, S] and the generator's output for them; returns
    (losses, (mel, y_hat)): the generator's phase reuses its output instead of running the generator again."""
    mel = log_mel(y, features)                                 # [B, n_mels, S/hop + 1], fp32
    with amp():
        y_hat = gen(mel)                                       # [B, S], fp32 (the ISTFT head)
        real_p, _ = mpd(y)                                     # discriminators on the detached output
        fake_p, _ = mpd(y_hat.detach())
        real_r, _ = mrd(y)
        fake_r, _ = mrd(y_hat.detach())
    loss_d = hinge_discriminator_loss(real_p, fake_p) + mrd_weight * hinge_discriminator_loss(real_r, fake_r)
    return {"loss": loss_d, "loss_d": loss_d}, (mel, y_hat)


def generator_losses(mpd, mrd, y, mel, y_hat, features: FeatureConfig, mel_weight: float, mrd_weight: float,
                     amp) -> dict:
    """Adversarial + feature matching + mel L1 (the mel loss in fp32, outside autocast)."""
    with amp():
        _, feat_real_p = mpd(y)
        fake_p, feat_fake_p = mpd(y_hat)
        _, feat_real_r = mrd(y)
        fake_r, feat_fake_r = mrd(y_hat)
    loss_mel = (log_mel(y_hat, features) - mel).abs().mean()
    loss_adv = hinge_generator_loss(fake_p) + mrd_weight * hinge_generator_loss(fake_r)
    loss_fm = feature_matching_loss(feat_real_p, feat_fake_p) + mrd_weight * feature_matching_loss(feat_real_r, feat_fake_r)
    loss_g = loss_adv + loss_fm + mel_weight * loss_mel
    return {"loss": loss_g, "loss_g": loss_g, "loss_mel": loss_mel, "loss_adv": loss_adv, "loss_fm": loss_fm}


def cosine_lr(base: float, step: int, total: int) -> float:
    return base * 0.5 * (1 + math.cos(math.pi * min(step, total) / max(1, total)))


# ----------------------------------------------------------------------------------- train
def train_vocoder(ws: Workspace, cfg: VocoderTrainConfig, stop: threading.Event | None = None) -> Iterator[Event]:
    """Train and yield progress events; the last one carries the newest checkpoint folder."""
    from utils.training.loop import TrainingLoop
    from utils.training.faults import with_faults

    adapter = with_faults(VocoderAdapter(ws, cfg, stop), cfg.fault_oom_above_batch, cfg.fault_oom_ranks,
                          [s - 1 for s in cfg.fault_nan_steps], measure=len, nan_phase="generator")
    result = yield from TrainingLoop(adapter, echo=False).run()
    if result["state"] == "failed":
        raise StudioError(result["message"])
    folder = Path(result["last_checkpoint"])
    done = Event("vocoder", result["step"], cfg.max_steps,
                 f"{result['state']} at step {result['step']}; checkpoint {folder.relative_to(ws.root)}")
    done.result = folder
    yield done


class VocoderAdapter:
    """The Vocos GAN for the loop: generator + multi-period and multi-resolution discriminators, two phases."""
    kind = "vocoder"
    unit = "crop"
    inference = "generator"

    def __init__(self, ws: Workspace, cfg: VocoderTrainConfig, stop: threading.Event | None = None):
        from models.vocoder import PRESETS
        from utils.training import checkpoint as ckpt
        from utils.training import optimization as opt
        from utils.training.loop import LoopSettings

        if cfg.preset not in PRESETS:
            raise StudioError(f"Unknown vocoder preset {cfg.preset!r}; choose one of {', '.join(PRESETS)}.")
        self.ws, self.cfg, self.stop_event = ws, cfg, stop
        self.train_rows, self.val_rows = dataset_clips(ws, cfg.dataset)
        self.run_dir = ws.run_dir(cfg.run)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.features = FeatureConfig()
        self.machine = opt.resolve_gan(cfg.device, cfg.precision)
        cfg.precision = self.machine.precision
        resuming = cfg.resume == "auto" and ckpt.latest_resumable(self.run_dir / "checkpoints") is not None
        self.oom_advice = (f"use a shorter segment (now {cfg.segment} samples), a smaller preset, or another GPU.")
        self._decide(resuming)
        self.settings = LoopSettings(
            max_steps=cfg.max_steps, seed=cfg.seed, resume=cfg.resume or "none", log_every=cfg.log_every,
            eval_every=cfg.eval_every, checkpoint_every=cfg.checkpoint_every, keep_checkpoints=cfg.keep_checkpoints,
            max_bad_steps=cfg.max_bad_steps, eval_at_start=bool(cfg.eval_every), save_untrained=True,
            max_seconds=max(0.0, float(cfg.max_minutes or 0)) * 60)
        self.drawn = 0  # batches of crops drawn so far (each batch's crops are seeded by its index)

    def _decide(self, resuming: bool) -> None:
        """The automatic settings and their reasons (logged at the start and kept in config.json)."""
        cfg, m = self.cfg, self.machine
        if cfg.lr is None:
            cfg.lr = 1e-4 if (cfg.init or resuming) else 5e-4
            cfg.reasons["lr"] = ("1e-4: fine-tuning a trained generator against fresh discriminators; a lower rate "
                                 "keeps it from drifting" if cfg.init else "5e-4: the Vocos recipe from scratch")
        if cfg.mpd_channels is None or cfg.mrd_channels is None:
            mpd_default, mrd_default = DISCRIMINATOR_SIZES[cfg.preset]
            cfg.mpd_channels = tuple(cfg.mpd_channels or mpd_default)
            cfg.mrd_channels = cfg.mrd_channels or mrd_default
            cfg.reasons["discriminators"] = f"sizes of the {cfg.preset} preset"
        cfg.reasons.setdefault("device", f"{m.device}: {m.reasons['device']}")
        cfg.reasons["precision"] = m.reasons["precision"]
        if m.device == "cuda":
            cfg.reasons["tf32"], cfg.reasons["cudnn_benchmark"] = m.reasons["tf32"], m.reasons["cudnn_benchmark"]
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world > 1:
            cfg.reasons["processes"] = (f"{world} ({'GPUs' if m.device == 'cuda' else 'CPU processes'}), "
                                        f"{cfg.batch_size} crops each: {cfg.batch_size * world} per step")

    # ------------------------------------------------------------------------------ build
    def build(self, ctx) -> None:
        import torch

        from models.discriminators import MultiPeriodDiscriminator, MultiResolutionDiscriminator
        from models.vocoder import PRESETS, Vocoder
        from utils.training.loop import Phase
        from utils.vocoder import load_vocoder

        cfg, self.ctx = self.cfg, ctx
        if ctx.resume_from is not None:
            gen = load_vocoder(ctx.resume_from)
            ctx.log(f"resume: continuing from {ctx.resume_from.relative_to(self.ws.root)}")
        elif cfg.init:
            gen = load_vocoder(cfg.init)
            ctx.log(f"fine-tuning from {cfg.init}")
        else:
            gen = Vocoder(PRESETS[cfg.preset])
            ctx.log(f"training from scratch, preset {cfg.preset}")
        if gen.cfg.n_mels != self.features.n_mels or gen.cfg.hop_length != self.features.hop_length:
            raise StudioError(f"The vocoder expects {gen.cfg.n_mels} mels at hop {gen.cfg.hop_length}; this app's "
                              f"features are {self.features.n_mels} mels at hop {self.features.hop_length}.")
        self.gen = gen.to(ctx.device).train()
        self.mpd = MultiPeriodDiscriminator(channels=cfg.mpd_channels).to(ctx.device)
        self.mrd = MultiResolutionDiscriminator(channels=cfg.mrd_channels).to(ctx.device)
        self.modules = {"generator": self.gen, "mpd": self.mpd, "mrd": self.mrd}
        d_params = list(self.mpd.parameters()) + list(self.mrd.parameters())
        opt_g = torch.optim.AdamW(self.gen.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
        opt_d = torch.optim.AdamW(d_params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
        self.optimizers = {"generator": opt_g, "discriminator": opt_d}
        self.phases = [Phase("discriminator", opt_d, d_params), Phase("generator", opt_g, list(self.gen.parameters()))]
        self.cached = None  # the last micro-batch's generator output and graph, from the discriminators' phase

    def compile_targets(self) -> list:
        return []

    # ------------------------------------------------------------------------------ data
    def start_data(self, step: int) -> None:
        cfg = self.cfg
        self.sampler = ClipSampler([r["path"] for r in self.train_rows], cfg.segment, np.random.default_rng(),
                                   cfg.cache_seconds)
        self.val_waves = [(r["id"], load_audio(r["path"], MODEL_SAMPLE_RATE)[0][: 10 * MODEL_SAMPLE_RATE])
                          for r in self.val_rows[: cfg.val_clips]]

    def next_batch(self):
        import torch

        self.sampler.rng = np.random.default_rng([self.cfg.seed, self.ctx.dist.rank, self.drawn])
        self.drawn += 1
        return torch.from_numpy(self.sampler.batch(self.cfg.batch_size))  # [B, S]

    def size(self, y) -> int:
        return len(y)

    def split(self, y, parts: int) -> list:
        import torch

        return [piece for piece in torch.tensor_split(y, parts) if len(piece)]

    def counts(self, y) -> dict:
        return {"samples": len(y), "audio_s": len(y) * self.cfg.segment / MODEL_SAMPLE_RATE}

    def progress(self) -> dict:
        return {}

    # ------------------------------------------------------------------------------ the step
    def lr_at(self, step: int) -> float:
        return cosine_lr(self.cfg.lr, step, self.cfg.max_steps)

    def losses(self, y, phase: str, step: int) -> dict:
        cfg, key = self.cfg, (y.data_ptr(), tuple(y.shape))
        real = y.to(self.ctx.device, non_blocking=True)
        if phase == "discriminator":
            losses, (mel, y_hat) = discriminator_losses(self.gen, self.mpd, self.mrd, real, self.features,
                                                        cfg.mrd_weight, self.ctx.autocast)
            self.cached = (key, mel, y_hat)
            return losses
        cached, self.cached = self.cached, None
        if cached is not None and cached[0] == key:  # one micro-batch (the usual case): no second pass
            _, mel, y_hat = cached
        else:  # the step was split after an out-of-memory: the earlier micro-batches' outputs were not kept
            mel = log_mel(real, self.features)
            with self.ctx.autocast():
                y_hat = self.gen(mel)
        with frozen(self.mpd, self.mrd):
            return generator_losses(self.mpd, self.mrd, real, mel, y_hat, self.features, cfg.mel_weight,
                                    cfg.mrd_weight, self.ctx.autocast)

    def forget_step(self) -> None:
        """A step ran out of memory: let go of the generator's output and its graph before the loop empties the
        CUDA cache (the retry computes them again)."""
        self.cached = None

    # ------------------------------------------------------------------------------ evaluation, files
    def evaluate(self, step: int, samples: Path) -> dict:
        """Log-mel L1 and the log-mel MCD proxy on the validation clips, the WORLD MCD on the first few, samples."""
        import torch

        from utils.evaluation import logmel_mcd, mcd

        self.gen.eval()
        mel_l1, proxy, world = [], [], []
        with torch.no_grad():  # not inference_mode: cached mel transforms must stay usable by autograd
            for i, (clip_id, wave) in enumerate(self.val_waves):
                mel = log_mel(torch.from_numpy(wave).to(self.ctx.device), self.features)
                with self.ctx.autocast():
                    fake = self.gen(mel.unsqueeze(0))[0]
                fake_mel = log_mel(fake, self.features)
                n = min(mel.shape[-1], fake_mel.shape[-1])
                mel_l1.append(float((mel[:, :n] - fake_mel[:, :n]).abs().mean()))
                proxy.append(logmel_mcd(mel, fake_mel))
                fake_np = fake.float().cpu().numpy()
                if i < self.cfg.mcd_clips:
                    world.append(mcd(wave, MODEL_SAMPLE_RATE, fake_np, MODEL_SAMPLE_RATE))
                save_audio(samples / f"{clip_id}.wav", fake_np, MODEL_SAMPLE_RATE)
        self.gen.train()
        result = {"val_mel_l1": float(np.mean(mel_l1)), "val_logmel_mcd": float(np.mean(proxy))}
        if world:
            result["val_mcd"] = float(np.mean(world))
        return result

    def score(self, metrics: dict) -> float:
        """The best checkpoint has the lowest MCD (WORLD where measured, else the log-mel proxy)."""
        return metrics.get("val_mcd", metrics["val_logmel_mcd"])

    def describe(self) -> list[str]:
        cfg = self.cfg
        n_params = sum(p.numel() for p in self.gen.parameters())
        return [f"{len(self.train_rows)} training clips, {len(self.val_rows)} validation; generator "
                f"{n_params / 1e6:.2f} M parameters; lr {cfg.lr:g}; steps -> {cfg.max_steps}",
                *(f"{name:16} {reason}" for name, reason in cfg.reasons.items())]

    def write_run_config(self) -> None:
        write_vocoder_config(self.ws, self.cfg)

    def checkpoint_config(self, step: int) -> dict:
        from utils.vocoder import vocoder_config_dict

        return vocoder_config_dict(self.gen, self.features, step=step, run=self.cfg.run, dataset=self.cfg.dataset)

    # ------------------------------------------------------------------------------ trainer state
    def state_dict(self) -> dict:
        return {"drawn": self.drawn}

    def load_state_dict(self, state: dict) -> None:
        self.drawn = int(state.get("drawn", 0))

    def upgrade_state(self, state: dict, folder: Path) -> dict:
        """The vocoder trainer before the shared loop saved the discriminators and optimizers at the top level
        (the generator is the checkpoint's model.safetensors, loaded in `build`)."""
        if "modules" in state:
            return state
        best = {"mcd": state["best_mcd"] if state.get("best_mcd") is not None else math.inf,
                "path": str(folder.parent / f"step-{state['best_step']}") if state.get("best_step") is not None else None}
        return {"step": state["step"], "modules": {"mpd": state["mpd"], "mrd": state["mrd"]},
                "optimizers": {"generator": state["opt_g"], "discriminator": state["opt_d"]}, "best": best,
                "adapter": {"drawn": state["step"]}}


# --------------------------------------------------------------------- job-service entry
def prepare_vocoder_run(ws: Workspace, cfg: VocoderTrainConfig) -> Path:
    """Write runs/<run>/config.json for `utils.jobs.start(..., trainer_module="utils.vocoder.training")`."""
    return write_vocoder_config(ws, cfg)


def write_vocoder_config(ws: Workspace, cfg: VocoderTrainConfig) -> Path:
    """runs/<run>/config.json of a vocoder run, laid out as an acoustic run's: its settings under "train"."""
    path = ws.run_dir(cfg.run) / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, {"kind": "vocoder", "workspace": str(ws.root), "train": cfg.to_dict()})
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="train a vocoder from runs/<run>/config.json")
    parser.add_argument("--config", required=True)
    args = parser.parse_args(argv)
    doc = read_json(Path(args.config)) or {}
    ws = Workspace.open(doc.get("workspace") or Path(args.config).resolve().parents[2])
    cfg = VocoderTrainConfig.from_dict(doc)
    try:  # Stop in the UI sends SIGTERM: the loop's handler finishes the step and saves
        for _ in train_vocoder(ws, cfg):
            pass  # every event is already in train.log
    except StudioError as exc:
        print(f"error: {exc}", flush=True)
        return 2
    return 0


if __name__ == "__main__":
    from utils.training.__main__ import leave

    leave(main())
