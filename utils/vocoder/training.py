"""Vocoder GAN training: fine-tune the public Vocos (or train from scratch) on a prepared dataset.

    python app.py train-vocoder --dataset NAME --run NAME [--init charactr/vocos-mel-24khz | FOLDER]
    python -m utils.vocoder.training --config workspace/runs/NAME/config.json   (the job service's way)

Recipe (Vocos, shared/notes/tts-model.md 2.4-2.6): random 16 384-sample crops peak-normalised to
-1..-6 dBFS, log-mel in, waveform out; multi-period + multi-resolution discriminators with hinge
loss; generator loss = adv_MPD + 0.1 adv_MRD + fm_MPD + 0.1 fm_MRD + 45 * mel L1; AdamW, betas
(0.8, 0.9), cosine decay to 0; one discriminator step then one generator step per batch. Vocos
trains in fp32; on a GPU with bf16 we run the networks' convolutions under bf16 autocast and keep
the ISTFT head, the STFTs, the mel loss and every loss sum in fp32.

The run folder gets config.json, status.json, train.log, metrics.jsonl, samples/step-N/*.wav and
checkpoints/step-N/ (model.safetensors + config.json: a loadable vocoder; trainer_state.pt: the
discriminators and optimizers, for resuming). STOP file or SIGTERM: finish the step, save, exit.
Out of memory: the step is dropped and the batch halved (in every process). An update whose gradients
are not finite is skipped and the learning rate halved; five such steps in a row save and stop.

Several GPUs: launched by torchrun (the job service does it for "use every GPU"), each rank draws its own
crops and the gradients are averaged in one flat all-reduce per network and step (no DDP wrapper: the
discriminators run four times per step, which DDP's one-forward-one-backward bookkeeping does not
expect); rank 0 evaluates, logs and saves.
"""
from __future__ import annotations

import argparse
import io
import math
import re
import shutil
import signal
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from utils.audio import MODEL_SAMPLE_RATE, FeatureConfig, load_audio, log_mel, save_audio
from utils.events import Event, StudioError
from utils.workspace import Workspace, append_jsonl, atomic_write_bytes, atomic_write_json, read_json, read_jsonl

_STEP_DIR = re.compile(r"^step-(\d+)$")
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
    max_steps: int = 20_000           # generator updates (each paired with one discriminator update)
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
    save_every: int = 500
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
        d = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
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
    folder = ws.dataset_dir(name)
    manifest = folder / "manifest.jsonl"
    if not manifest.exists():
        raise StudioError(f"Dataset {name} has no manifest.jsonl in {folder}: prepare it first.")
    rows = []
    for i, row in enumerate(read_jsonl(manifest), 1):
        if row.get("excluded") or not row.get("audio"):
            continue
        path = (folder / row["audio"]).resolve()
        if not path.is_relative_to(folder.resolve()):
            raise StudioError(f"{manifest} line {i}: audio path {row['audio']!r} points outside the dataset.")
        if not path.exists():
            raise StudioError(f"{manifest} line {i}: audio file {row['audio']} is missing. Prepare the dataset again.")
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
# Losses take fp32 copies: under bf16 autocast the discriminators' outputs and features are bf16, whose 8-bit
# mantissa would round the sums of many small terms.
def discriminator_loss(real: list, fake: list):
    """Hinge loss, averaged over sub-discriminators."""
    import torch

    total = 0.0
    for r, f in zip(real, fake):
        total = total + torch.relu(1 - r.float()).mean() + torch.relu(1 + f.float()).mean()
    return total / len(real)


def generator_adv_loss(fake: list):
    import torch

    return sum(torch.relu(1 - f.float()).mean() for f in fake) / len(fake)


def feature_matching_loss(real_feats: list, fake_feats: list):
    total = 0.0
    for rs, fs in zip(real_feats, fake_feats):
        total = total + sum((r.detach().float() - f.float()).abs().mean() for r, f in zip(rs, fs))
    return total / len(real_feats)


def autocast_for(device: str, precision: str):
    """A factory of autocast contexts for the networks' matmuls and convolutions (the ISTFT head opts out)."""
    import torch

    return lambda: torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=precision == "bf16")


class PeerOutOfMemory(Exception):
    """Another process ran out of memory in this step: every process drops the step and halves its batch."""


class GradientSync:
    """What happens between a backward and its optimizer step: the processes agree that none ran out of memory
    (one tiny all-reduce: a process that did meets the others here, see `failed`), average their gradients,
    and measure the gradient norm. The norm is of the averaged gradients, so every process takes the same
    skip-or-step decision when it is not finite."""

    def __init__(self, d=None, device: str = "cpu"):
        self.d, self.device = d, device

    def __call__(self, params: list) -> "torch.Tensor":
        import torch

        from utils.training import ddp

        if self.d is not None and self.d.enabled:
            if ddp.any_flag(False, self.d, self.device):
                raise PeerOutOfMemory()
            ddp.average_gradients(params, self.d)
        return torch.nn.utils.clip_grad_norm_(params, float("inf"))  # measured, not clipped

    def failed(self) -> None:
        """Called by a process that ran out of memory: it joins the agreement its peers are waiting in."""
        from utils.training import ddp

        if self.d is not None and self.d.enabled:
            ddp.any_flag(True, self.d, self.device)


def gan_step(gen, mpd, mrd, opt_g, opt_d, y, features: FeatureConfig, mel_weight: float, mrd_weight: float,
             amp, sync: GradientSync | None = None, poison: bool = False) -> dict:
    """One discriminator update, then one generator update, on the real crops `y` [B, S]; the losses as
    tensors. An update whose gradients are not finite is skipped (its weights and optimizer state untouched);
    `skipped` counts them (0, 1 or 2). Checking costs one wait for the GPU per update, the price of never
    writing NaN into the weights. `poison` makes the generator's loss NaN (the NaN guard's test)."""
    import torch

    sync = sync or GradientSync()
    mel = log_mel(y, features)                                 # [B, n_mels, S/hop + 1], fp32
    with amp():
        y_hat = gen(mel)                                       # [B, S], fp32 (the ISTFT head)
        real_p, _ = mpd(y)                                     # discriminators on the detached output
        fake_p, _ = mpd(y_hat.detach())
        real_r, _ = mrd(y)
        fake_r, _ = mrd(y_hat.detach())
    loss_d = discriminator_loss(real_p, fake_p) + mrd_weight * discriminator_loss(real_r, fake_r)
    opt_d.zero_grad(set_to_none=True)
    loss_d.backward()
    grad_norm_d = sync([p for net in (mpd, mrd) for p in net.parameters()])
    skipped = 0
    if torch.isfinite(grad_norm_d):
        opt_d.step()
    else:
        skipped += 1

    with amp():                                                # generator: adversarial + feature matching + mel L1
        _, feat_real_p = mpd(y)
        fake_p, feat_fake_p = mpd(y_hat)
        _, feat_real_r = mrd(y)
        fake_r, feat_fake_r = mrd(y_hat)
    loss_mel = (log_mel(y_hat, features) - mel).abs().mean()   # fp32, outside autocast
    loss_adv = generator_adv_loss(fake_p) + mrd_weight * generator_adv_loss(fake_r)
    loss_fm = feature_matching_loss(feat_real_p, feat_fake_p) + mrd_weight * feature_matching_loss(feat_real_r, feat_fake_r)
    loss_g = loss_adv + loss_fm + mel_weight * loss_mel
    if poison:
        loss_g = loss_g * float("nan")
    opt_g.zero_grad(set_to_none=True)
    loss_g.backward()
    grad_norm = sync(list(gen.parameters()))
    if torch.isfinite(grad_norm):
        opt_g.step()
    else:
        skipped += 1
    return {"loss_d": loss_d.detach(), "loss_g": loss_g.detach(), "loss_mel": loss_mel.detach(),
            "loss_adv": loss_adv.detach(), "loss_fm": loss_fm.detach(), "grad_norm_g": grad_norm.detach(),
            "grad_norm_d": grad_norm_d.detach(), "skipped": skipped}


def cosine_lr(base: float, step: int, total: int) -> float:
    return base * 0.5 * (1 + math.cos(math.pi * min(step, total) / max(1, total)))


# ------------------------------------------------------------------------------ checkpoints
def checkpoint_dirs(run_dir: Path) -> list[tuple[int, Path]]:
    folder = run_dir / "checkpoints"
    if not folder.exists():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir()
             if p.is_dir() and (m := _STEP_DIR.match(p.name)) and (p / "model.safetensors").exists()]
    return sorted(found)


def _save_checkpoint(run_dir: Path, step: int, gen, mpd, mrd, opt_g, opt_d, cfg: VocoderTrainConfig,
                     features: FeatureConfig, best: dict) -> Path:
    import torch

    from utils.vocoder import save_vocoder

    folder = run_dir / "checkpoints" / f"step-{step}"
    state = {"step": step, "mpd": mpd.state_dict(), "mrd": mrd.state_dict(), "opt_g": opt_g.state_dict(),
             "opt_d": opt_d.state_dict(), "best_mcd": best.get("value"), "best_step": best.get("step")}
    buf = io.BytesIO()
    torch.save(state, buf)
    # trainer_state first, model last: a folder with model.safetensors is a complete checkpoint.
    atomic_write_bytes(folder / "trainer_state.pt", buf.getvalue())
    save_vocoder(gen, folder, features, step=step, run=cfg.run, dataset=cfg.dataset)
    keep = {best.get("step")} | {s for s, _ in checkpoint_dirs(run_dir)[-cfg.keep_checkpoints:]}
    for s, d in checkpoint_dirs(run_dir):
        if s not in keep:
            shutil.rmtree(d, ignore_errors=True)
    return folder


# ----------------------------------------------------------------------------------- train
def train_vocoder(ws: Workspace, cfg: VocoderTrainConfig, stop: threading.Event | None = None) -> Iterator[Event]:
    """Train and yield progress events; the last one carries the newest checkpoint folder."""
    import torch

    from models.discriminators import MultiPeriodDiscriminator, MultiResolutionDiscriminator
    from models.vocoder import PRESETS, Vocoder
    from utils.evaluation import logmel_mcd, mcd
    from utils import jobs
    from utils.training import ddp
    from utils.training.optimization import is_oom
    from utils.vocoder import load_vocoder

    if cfg.preset not in PRESETS:
        raise StudioError(f"Unknown vocoder preset {cfg.preset!r}; choose one of {', '.join(PRESETS)}.")
    train_rows, val_rows = dataset_clips(ws, cfg.dataset)
    device = cfg.device if cfg.device != "auto" else _auto_device()
    d = ddp.setup(device)  # world size 1 unless launched by torchrun

    # ---- run folder, config, log: rank 0 writes them
    run_dir = ws.run_dir(cfg.run)
    run_dir.mkdir(parents=True, exist_ok=True)
    features = FeatureConfig()
    log_path = run_dir / "train.log"

    def log(message: str, level: str = "info", done: int = 0) -> Event:
        if d.main:
            with open(log_path, "a", encoding="utf-8") as f:
                f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}\n")
        return Event("train-vocoder", done, cfg.max_steps, message, level)

    def update_status(run_dir: Path, **fields) -> None:
        if d.main:
            jobs.update_status(run_dir, **fields)

    resume_from = checkpoint_dirs(run_dir)[-1][1] if cfg.resume == "auto" and checkpoint_dirs(run_dir) else None
    if cfg.lr is None:
        cfg.lr = 1e-4 if (cfg.init or resume_from) else 5e-4
        cfg.reasons["lr"] = ("1e-4: fine-tuning a trained generator against fresh discriminators; a lower rate "
                             "keeps it from drifting" if cfg.init else "5e-4: the Vocos recipe from scratch")
    if cfg.mpd_channels is None or cfg.mrd_channels is None:
        mpd_default, mrd_default = DISCRIMINATOR_SIZES[cfg.preset]
        cfg.mpd_channels = tuple(cfg.mpd_channels or mpd_default)
        cfg.mrd_channels = cfg.mrd_channels or mrd_default
        cfg.reasons["discriminators"] = f"sizes of the {cfg.preset} preset"
    cfg.reasons.setdefault("device", f"{device}: {'the GPU' if device == 'cuda' else 'no GPU found'}")
    cfg.precision, cfg.reasons["precision"] = _precision(cfg.precision, device)
    if device == "cuda":
        fast = _gpu_speedups()
        cfg.reasons["tf32"], cfg.reasons["cudnn_benchmark"] = fast
    if d.enabled:
        cfg.reasons["processes"] = (f"{d.world_size} ({'GPUs' if device == 'cuda' else 'CPU processes'}), "
                                    f"{cfg.batch_size} crops each: {cfg.batch_size * d.world_size} per step")
    if d.main:
        atomic_write_json(run_dir / "config.json", {"kind": "vocoder", "workspace": str(ws.root), **cfg.to_dict()})
    update_status(run_dir, state="running", kind="vocoder", step=0, max_steps=cfg.max_steps,
                  heartbeat=time.time(), started=time.time())

    torch.manual_seed(cfg.seed)
    # ---- models
    start_step, best = 0, {"value": None, "step": None}
    if resume_from is not None:
        gen = load_vocoder(resume_from)
        yield log(f"resuming from {resume_from.relative_to(ws.root)}")
    elif cfg.init:
        gen = load_vocoder(cfg.init)
        yield log(f"fine-tuning from {cfg.init}")
    else:
        gen = Vocoder(PRESETS[cfg.preset])
        yield log(f"training from scratch, preset {cfg.preset}")
    if gen.cfg.n_mels != features.n_mels or gen.cfg.hop_length != features.hop_length:
        raise StudioError(f"The vocoder expects {gen.cfg.n_mels} mels at hop {gen.cfg.hop_length}; this app's "
                          f"features are {features.n_mels} mels at hop {features.hop_length}.")
    gen = gen.to(device).train()
    mpd = MultiPeriodDiscriminator(channels=cfg.mpd_channels).to(device)
    mrd = MultiResolutionDiscriminator(channels=cfg.mrd_channels).to(device)
    opt_g = torch.optim.AdamW(gen.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    opt_d = torch.optim.AdamW(list(mpd.parameters()) + list(mrd.parameters()), lr=cfg.lr, betas=cfg.betas,
                              weight_decay=cfg.weight_decay)
    if resume_from is not None and (resume_from / "trainer_state.pt").exists():
        from utils.training.checkpoint import load_trainer_state  # refuses pickles that would run code

        state = load_trainer_state(resume_from)
        mpd.load_state_dict(state["mpd"])
        mrd.load_state_dict(state["mrd"])
        opt_g.load_state_dict(state["opt_g"])
        opt_d.load_state_dict(state["opt_d"])
        start_step, best = int(state["step"]), {"value": state.get("best_mcd"), "step": state.get("best_step")}
    for net in (gen, mpd, mrd):  # every rank starts from rank 0's weights
        ddp.broadcast_parameters(net, d)
    rng = np.random.default_rng([cfg.seed, start_step, d.rank])  # own crops per rank; a resumed run draws new ones
    sampler = ClipSampler([r["path"] for r in train_rows], cfg.segment, rng, cfg.cache_seconds)
    val_waves = [(r["id"], load_audio(r["path"], MODEL_SAMPLE_RATE)[0][: 10 * MODEL_SAMPLE_RATE])
                 for r in val_rows[: cfg.val_clips]]
    n_params = sum(p.numel() for p in gen.parameters())
    yield log(f"{len(train_rows)} training clips, {len(val_rows)} validation; generator {n_params / 1e6:.2f} M "
              f"parameters; device {device}; lr {cfg.lr:g}; steps {start_step} -> {cfg.max_steps}")
    for name, reason in cfg.reasons.items():  # every setting that was decided for this run, and why
        yield log(f"  {name:16} {reason}")

    stop = stop or threading.Event()
    g_params, d_params = list(gen.parameters()), list(mpd.parameters()) + list(mrd.parameters())
    amp = autocast_for(device, cfg.precision)

    def evaluate(step: int) -> dict:
        gen.eval()
        mel_l1, proxy, world = [], [], []
        out_dir = run_dir / "samples" / f"step-{step}"
        with torch.no_grad():  # not inference_mode: cached mel transforms must stay usable by autograd
            for i, (clip_id, wave) in enumerate(val_waves):
                mel = log_mel(torch.from_numpy(wave).to(device), features)
                with amp():
                    fake = gen(mel.unsqueeze(0))[0]
                fake_mel = log_mel(fake, features)
                n = min(mel.shape[-1], fake_mel.shape[-1])
                mel_l1.append(float((mel[:, :n] - fake_mel[:, :n]).abs().mean()))
                proxy.append(logmel_mcd(mel, fake_mel))
                fake_np = fake.float().cpu().numpy()
                if i < cfg.mcd_clips:
                    world.append(mcd(wave, MODEL_SAMPLE_RATE, fake_np, MODEL_SAMPLE_RATE))
                save_audio(out_dir / f"{clip_id}.wav", fake_np, MODEL_SAMPLE_RATE)
        gen.train()
        result = {"val_mel_l1": float(np.mean(mel_l1)), "val_logmel_mcd": float(np.mean(proxy))}
        if world:
            result["val_mcd"] = float(np.mean(world))
        return result

    def save(step: int) -> None:
        """Rank 0 writes the checkpoint; the other ranks wait for it."""
        nonlocal ckpt
        if d.main:
            _save_checkpoint(run_dir, step, gen, mpd, mrd, opt_g, opt_d, cfg, features, best)
        ddp.barrier(d)
        ckpt = run_dir / "checkpoints" / f"step-{step}"

    def eval_and_save(step: int) -> Iterator[Event]:
        """Rank 0 scores; then the checkpoint (the best one marked)."""
        if d.enabled:  # averaged gradients and one seed keep the ranks identical; a drift would be a bug: say so
            checksum = float(sum(p.detach().double().sum() for p in g_params + d_params))
            if not ddp.same_on_all_ranks(checksum, d, device):
                raise StudioError(f"The {d.world_size} processes' weights differ at step {step}: stopping rather "
                                  "than saving a mix. Please report this with the run's train.log.")
            yield log(f"weights identical on all {d.world_size} processes at step {step}", done=step)
        if d.main:
            metrics = {"step": step, **evaluate(step)}
            score = metrics.get("val_mcd", metrics["val_logmel_mcd"])  # the best checkpoint has the lowest MCD
            if best["value"] is None or score < best["value"]:
                best.update(value=score, step=step)
            append_jsonl(run_dir / "metrics.jsonl", metrics)
        save(step)
        if d.main:
            update_status(run_dir, best_checkpoint=str(run_dir / "checkpoints" / f"step-{best['step']}"))
            yield log(f"eval {_fmt(metrics)}; saved {ckpt.relative_to(ws.root)}", done=step)

    sync = GradientSync(d, device)

    def halve_batch(step: int, exc: BaseException) -> Event:
        """After an out-of-memory in any process: drop the step, halve every process's batch, go on."""
        if not isinstance(exc, PeerOutOfMemory):
            sync.failed()  # the other processes are waiting to agree on this step
        for opt in (opt_g, opt_d):
            opt.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.empty_cache()
        if cfg.batch_size == 1:
            raise StudioError(f"out of memory with one crop per step at step {step}: use a shorter segment "
                              f"(now {cfg.segment} samples), a smaller preset, or another GPU.") from exc
        cfg.batch_size //= 2
        update_status(run_dir, batch_size=cfg.batch_size)
        where = " in another process" if isinstance(exc, PeerOutOfMemory) else ""
        return log(f"out of memory{where} at step {step}: batch halved to {cfg.batch_size} crops per process; "
                   "continuing", "warning", done=step)

    # ---- loop
    step, t_last, samples_since = start_step, time.time(), 0
    lr_scale, bad_steps, failure = 1.0, 0, None
    beat = t_last
    ckpt = resume_from
    if start_step == 0 and cfg.eval_every and d.main:
        metrics = {"step": 0, **evaluate(0)}
        append_jsonl(run_dir / "metrics.jsonl", metrics)
        yield log("before training: " + _fmt(metrics))
    try:
        try:
            while step < cfg.max_steps and not ddp.any_flag(stop.is_set() or (run_dir / "STOP").exists(), d, device):
                lr = cosine_lr(cfg.lr, step, cfg.max_steps) * lr_scale
                for group in opt_g.param_groups + opt_d.param_groups:
                    group["lr"] = lr
                y = torch.from_numpy(sampler.batch(cfg.batch_size)).to(device)      # [B, S]
                try:
                    if cfg.batch_size > (cfg.fault_oom_above_batch or cfg.batch_size) and \
                            (not cfg.fault_oom_ranks or d.rank in cfg.fault_oom_ranks):
                        raise torch.OutOfMemoryError(f"CUDA out of memory (fault injection: {cfg.batch_size} crops)")
                    out = gan_step(gen, mpd, mrd, opt_g, opt_d, y, features, cfg.mel_weight, cfg.mrd_weight, amp,
                                   sync, poison=step + 1 in cfg.fault_nan_steps)
                except Exception as exc:  # out of memory here or in a peer: retry smaller
                    if not (isinstance(exc, PeerOutOfMemory) or is_oom(exc)):
                        raise
                    yield halve_batch(step, exc)
                    continue
                step += 1
                if out["skipped"]:
                    bad_steps += 1
                    lr_scale *= 0.5
                    yield log(f"step {step}: non-finite gradients in {out['skipped']} of the 2 updates, skipped "
                              f"(weights untouched); learning rate halved (x{lr_scale:g})", "warning", done=step)
                    if bad_steps >= cfg.max_bad_steps:  # the weights are still good: saved below, then stop
                        failure = (f"stopped: {bad_steps} steps in a row had non-finite gradients (step {step}); "
                                   "the skipped updates never touched the weights, so the checkpoint saved now is "
                                   "good. Resume with a lower learning rate, use fp32, or check the dataset's audio.")
                        break
                    continue
                bad_steps = 0
                samples_since += cfg.batch_size * d.world_size
                if time.time() - beat > 10:  # alive between log lines too (a CPU step can take many seconds)
                    beat = time.time()
                    update_status(run_dir, step=step, heartbeat=beat)

                if step % cfg.log_every == 0 or step == cfg.max_steps:
                    now = time.time()
                    rate = samples_since / max(now - t_last, 1e-9)
                    losses = {k: float(v) for k, v in out.items() if k != "skipped"}
                    metrics = {"step": step, **losses, "lr": lr, "samples_per_s": rate,
                               "audio_s_per_s": rate * cfg.segment / MODEL_SAMPLE_RATE, **_memory(device)}
                    if d.main:
                        append_jsonl(run_dir / "metrics.jsonl", metrics)
                    eta = (cfg.max_steps - step) * cfg.batch_size * d.world_size / max(rate, 1e-9)
                    update_status(run_dir, step=step, heartbeat=now, eta_s=eta)
                    t_last, samples_since = now, 0
                    yield log(_fmt(metrics), done=step)
                if cfg.eval_every and step % cfg.eval_every == 0 and step < cfg.max_steps:
                    yield from eval_and_save(step)
                elif cfg.save_every and step % cfg.save_every == 0 and step < cfg.max_steps:
                    save(step)
                    yield log(f"saved {ckpt.relative_to(ws.root)}", done=step)
        except KeyboardInterrupt:  # Ctrl-C in the CLI: keep the work, as a Stop does
            yield log(f"interrupted at step {step}: saving a checkpoint", "warning", done=step)
        # the end, a stop request, or the last step: always leave a checkpoint of where we are
        if step > start_step or ckpt is None:
            yield from eval_and_save(step)
        if failure:
            raise StudioError(failure)
    except GeneratorExit:  # the caller stopped listening (e.g. the UI request ended): not a failure
        update_status(run_dir, state="stopped", step=step, ended=time.time(), message="stopped by its caller")
        raise
    except BaseException as exc:
        update_status(run_dir, state="failed", ended=time.time(), message=f"{type(exc).__name__}: {exc}"[:500])
        with open(log_path, "a", encoding="utf-8") as f:  # any rank: the one that failed says why
            rank = f" (rank {d.rank})" if d.enabled else ""
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} failed{rank}: {type(exc).__name__}: {exc}\n")
        raise
    finally:
        ddp.cleanup(d)
    stopped = step < cfg.max_steps
    update_status(run_dir, state="stopped" if stopped else "finished", step=step, ended=time.time())
    done = log(f"{'stopped' if stopped else 'finished'} at step {step}; checkpoint {ckpt.relative_to(ws.root)}",
               done=step)
    done.result = ckpt
    yield done


def _fmt(metrics: dict) -> str:
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())


def _memory(device: str) -> dict:
    import torch

    if device != "cuda":
        return {}
    return {"gpu_mem_allocated_gb": torch.cuda.memory_allocated() / 2**30,
            "gpu_mem_reserved_gb": torch.cuda.memory_reserved() / 2**30,
            "gpu_mem_peak_gb": torch.cuda.max_memory_allocated() / 2**30}


def _precision(asked: str, device: str) -> tuple[str, str]:
    """(precision, reason). bf16 keeps fp32's exponent range, so the GAN needs no loss scaling; fp16 is not
    offered: the generator's log-magnitudes and the discriminators' feature maps overflow it."""
    import torch

    if asked not in ("auto", "bf16", "fp32"):
        raise StudioError(f"Vocoder precision {asked!r} is not one of auto, bf16, fp32.")
    if asked == "fp32":
        return "fp32", "fp32: set by the user"
    gpu_bf16 = device == "cuda" and torch.cuda.is_bf16_supported()
    if asked == "bf16" and device == "cuda" and not gpu_bf16:
        raise StudioError("bf16 was asked for but this GPU has no bf16 support; use fp32 or auto.")
    if asked == "bf16" or gpu_bf16:
        return "bf16", ("bf16 autocast for the backbone's and discriminators' matmuls and convolutions; the ISTFT "
                        "head, STFTs, mel loss and loss sums stay fp32" + ("" if gpu_bf16 else " (set by the user)"))
    return "fp32", ("fp32: no GPU here; bf16 autocast would be slower on this CPU" if device != "cuda"
                    else "fp32: this GPU has no bf16")


def _gpu_speedups() -> tuple[str, str]:
    """TF32 matmuls/convolutions (fp32 range, 10-bit mantissa: harmless for a GAN vocoder) on Ampere and newer,
    and cuDNN autotuning, which pays off because every batch has the same shape (fixed-length crops)."""
    import torch

    torch.backends.cudnn.benchmark = True
    if torch.cuda.get_device_capability() < (8, 0):
        return "off: this GPU has no TF32 tensor cores", "on: every batch is the same crop shape"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    return "on: fp32 matmuls and convolutions on tensor cores (Ampere+)", "on: every batch is the same crop shape"


def _auto_device() -> str:
    try:
        from utils.hardware import device

        return device()
    except Exception:  # the hardware probe must never stop a training run
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"


# --------------------------------------------------------------------- job-service entry
def prepare_vocoder_run(ws: Workspace, cfg: VocoderTrainConfig) -> Path:
    """Write runs/<run>/config.json for `utils.jobs.start(..., trainer_module="utils.vocoder.training")`."""
    path = ws.run_dir(cfg.run) / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, {"kind": "vocoder", "workspace": str(ws.root), **cfg.to_dict()})
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="train a vocoder from runs/<run>/config.json")
    parser.add_argument("--config", required=True)
    args = parser.parse_args(argv)
    doc = read_json(Path(args.config)) or {}
    ws = Workspace.open(doc.get("workspace") or Path(args.config).resolve().parents[2])
    cfg = VocoderTrainConfig.from_dict(doc)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())  # Stop in the UI: finish the step, save
    try:
        for _ in train_vocoder(ws, cfg, stop):
            pass  # every event is already in train.log
    except StudioError as exc:
        print(f"error: {exc}", flush=True)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
