"""The OmniVoice engine on the shared trainer: fine-tune k2-fsa's OmniVoice on a curator's clips.

    python app.py train --engine omnivoice --dataset NAME --init k2-fsa/OmniVoice --accept-licence
    python app.py train --engine omnivoice --dataset NAME --init FOLDER      # the hub's files, offline; or a run

Not the package's trainer: the studio's training loop (utils/training/loop.py) runs the step, so a fine-tune gets what
every family gets (exact resume, the batch probe and out-of-memory splits, the non-finite guard and the fp16/bf16
-> fp32 fallback, the EMA scored beside the raw weights, run files, stop requests, torchrun). What is OmniVoice's:
the codec's tokens of the dataset, extracted once (tokens.py); the package's own sample processor and padding
(data.py), whose masking the family wraps and never rewrites; the package model's forward, whose loss is the
codebook-weighted cross-entropy of the masked tokens; the published recipe (about.py: AdamW at 1e-5, weight decay
0.01, 1 % warm-up then cosine, clipping at 1.0, 8192 positions a GPU a step); and an evaluation that speaks
held-out sentences in the voice of the run's reference clip, as its voices will. Checkpoints are voice folders:
model.safetensors (OmniVoice's state_dict as it is), a config.json that names the base and the clip's transcript,
and prompt.wav, so a checkpoint speaks and exports like a voice made from a clip.
"""
from __future__ import annotations

import itertools
import math
import os
from pathlib import Path

import numpy as np
import torch

from utils.events import StudioError
from utils.omnivoice.base import full_size
from utils.omnivoice.about import (BATCH_AUDIO_TOKENS, CLIP_NORM, DENOISE, DROP_CONDITION, FINE_TUNE_LR, LANGUAGE,
                                   LICENCE, MASK_SHARE, PROMPT_SHARE, SAMPLE_RATE, WARMUP_SHARE)
from utils.training import loop
from utils.training import optimization as opt
from utils.training.config import AUTO, TrainConfig, write_run_config
from utils.training.loop import LoopSettings, Phase
from utils.training.position import DataPosition
from utils.workspace import Workspace, read_json

CPU_BATCH_TOKENS = 1024    # positions a step on a CPU: a few clips, a step in seconds (bench/omnivoice_step.py)
RECIPE_BETAS = (0.9, 0.999)  # the package's AdamW (torch's defaults)
NOT_FOR_OMNIVOICE = ("fp8", "length_multiple", "effective_batch")


def train(cfg: TrainConfig, report=None) -> dict:
    """Run (or resume) an OmniVoice fine-tune; the loop's result dict (utils.training.loop.train)."""
    return loop.train(OmniVoiceAdapter(cfg, report), cfg)


class OmniVoiceAdapter(DataPosition):
    kind = "omnivoice"
    unit = "clip"
    inference = "model"
    oom_advice = "lower max_frames_per_batch (fewer positions a micro-batch), or drop the longest clips."
    state_newest_only = True  # ~9.8 GB of trainer state a checkpoint (expectations.checkpoint_gb): the newest only

    @staticmethod
    def memory_plan(cfg: TrainConfig):
        """The full base holds its weights, gradients, AdamW's moments and the EMA whatever the batch
        (expectations.py); a tiny random one next to nothing. A frame here is one position of the sequence."""
        from utils.hardware import BYTES_PER_FRAME_BASE, MemoryPlan
        from utils.omnivoice.expectations import ACTIVATION_GB_PER_1K_TOKENS, GIB, TRAIN_FIXED_GB

        if not full_size(cfg.init, cfg.workspace):
            return MemoryPlan("OmniVoice tiny", 0.0, 0.01)
        per_position = ACTIVATION_GB_PER_1K_TOKENS * GIB / 1000
        return MemoryPlan("OmniVoice", TRAIN_FIXED_GB, per_position / BYTES_PER_FRAME_BASE)

    def __init__(self, cfg: TrainConfig, report=None):
        self.cfg = cfg
        self.ws = Workspace.open(cfg.workspace)
        self.run_dir = self.ws.run_dir(cfg.run)
        self.machine = self._machine(report)
        self.settings = LoopSettings.of_train_config(cfg, self.machine.ema_decay)
        self.pos = (0, 0)  # (pass, batch index) of the next batch

    def _machine(self, report) -> opt.Machine:
        """The shared resolution (device, precision and its fallback, TF32, loader, EMA), then OmniVoice's recipe."""
        cfg = self.cfg
        m = opt.resolve(cfg, report, world_size=int(os.environ.get("WORLD_SIZE", "1")), plan=self.memory_plan(cfg))
        for name in NOT_FOR_OMNIVOICE:
            m.values.pop(name, None)
            m.reasons.pop(name, None)
        if cfg.lr == AUTO:
            m.set_family_lr(FINE_TUNE_LR, "the published fine-tuning recipe's (OmniVoice's examples/finetune)")
        betas = RECIPE_BETAS if (cfg.beta1, cfg.beta2) == (0.9, 0.99) else (cfg.beta1, cfg.beta2)
        m.set("betas", betas, "the recipe's AdamW (torch's defaults)" if betas == RECIPE_BETAS else "set by the user")
        m.set("attention", "sdpa", "transformers' SDPA, PyTorch picking the kernel: the package's own flex_attention "
                                   "needs bf16 and fails on some cards (an L4's shared memory)")
        m.set("compile", False, "the package's model runs eager: every clip length would be a new graph")
        if cfg.max_frames_per_batch == AUTO:
            gpu = m.device == "cuda"
            m.set("max_frames_per_batch", BATCH_AUDIO_TOKENS if gpu else CPU_BATCH_TOKENS,
                  "the recipe's 8192 positions (text and audio tokens) a GPU a step" if gpu else
                  "a few clips a step on a CPU: seconds a step, not minutes")
        if cfg.grad_accumulation == AUTO:
            m.set("grad_accumulation", 1, "every batch updates the weights, as the recipe (the probe may split it)")
        if m.precision == "fp16":  # a card without bf16 (T4, V100)
            m.set("precision", "fp16", f"{m.reasons['precision']} If its loss scale collapses, the run goes on in "
                  "fp32 by itself from its last good weights (slower) and says so in the log")
        if m.device == "cpu" and full_size(cfg.init, cfg.workspace):
            m.set("device", "cpu", "no GPU: the 613 M-parameter base takes seconds to minutes a step here; it runs, "
                                   "to check the set-up, but fine-tune on a GPU (16 GiB at the edge, 24 GiB or more "
                                   "comfortably)")
        return m

    # ------------------------------------------------------------------------------ build
    def build(self, ctx) -> None:
        from utils.omnivoice.base import attach_speech, load_codec, load_package_model

        cfg, self.ctx = self.cfg, ctx
        self.base, weights = self._start(ctx)
        self.model = load_package_model(self.base, ctx.device, weights=weights, for_training=True).train()
        if self.machine.grad_checkpointing:  # recompute each layer in backward: less memory, ~30 % slower
            self.model.llm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        # the codec encodes the dataset once (rank 0) and speaks the evaluations; never trained or saved
        self.codec = load_codec(self.base, ctx.device) if ctx.dist.main else None
        if self.codec is not None:
            attach_speech(self.model, self.base, ctx.device, self.codec)
        self._build_data(ctx)
        m = self.machine
        kind = {"fused": True} if m.fused_adamw else {"foreach": True}
        params = [p for p in self.model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=m.lr, betas=m.betas, weight_decay=cfg.weight_decay, **kind)
        self.modules, self.optimizers = {"model": self.model}, {"model": optimizer}
        self.phases = [Phase("model", optimizer, params, CLIP_NORM)]
        ctx.log(f"model: OmniVoice {sum(p.numel() for p in params) / 1e6:.1f} M parameters from {self.base}")

    def _start(self, ctx) -> tuple[Path, dict | None]:
        """(the base folder, a fine-tune's weights to put over it or None): a resumed run's base, a fine-tune of
        this studio continued (a checkpoint or voice folder), else the base itself (downloaded by one process)."""
        from utils.omnivoice.base import base_folder, base_of
        from utils.training import checkpoint as ckpt
        from utils.training import ddp

        cfg = self.cfg
        if ctx.resume_from:
            ctx.log(f"resume: continuing from {ctx.resume_from}")
            return base_of(ctx.resume_from, ckpt.read_config(ctx.resume_from)), None  # the loop loads its state
        folder = Path(cfg.init) if Path(cfg.init).is_absolute() else self.ws.root / cfg.init
        config = read_json(folder / "config.json", {}) if cfg.init else {}
        if (config or {}).get("engine") == "omnivoice" and "prompt" in config:
            ctx.log(f"fine-tune: continuing the OmniVoice fine-tune {cfg.init}")
            own = config["model"].get("weights") == "own"
            return base_of(folder, config), ckpt.load_weights(folder) if own else None
        if ctx.dist.main:
            base = base_folder(self.ws, cfg.init, bool(cfg.licence_accepted), ctx.log)
        ddp.barrier(ctx.dist)  # the others find what rank 0 downloaded
        if not ctx.dist.main:
            base = base_folder(self.ws, cfg.init, bool(cfg.licence_accepted), ctx.log)
        ctx.log(f"fine-tune: starting from the OmniVoice base {base} ({LICENCE})")
        return base, None

    def _build_data(self, ctx) -> None:
        from utils.omnivoice.data import make_processor, pick_prompt, prepare_items
        from utils.omnivoice.speech import read_prompt
        from utils.omnivoice.tokens import codec_key, extract
        from utils.training import ddp
        from utils.training.data import held_out_or_fit, training_rows

        cfg, log = self.cfg, ctx.log
        train_rows, val_rows = training_rows(self.ws, cfg.dataset)
        key = codec_key(self.base)
        paths = extract(self.ws, cfg.dataset, train_rows + val_rows, self.codec, key, ctx.device, log)
        ddp.barrier(ctx.dist)  # rank 0 encoded; the others read what it wrote
        if not ctx.dist.main:
            paths = extract(self.ws, cfg.dataset, train_rows + val_rows, None, key, ctx.device, log)
        tokenizer = self.model.text_tokenizer
        self.items = prepare_items(train_rows, paths, tokenizer, log)
        self.val_items = prepare_items(val_rows, paths, tokenizer, log)
        self.val_items = held_out_or_fit(cfg.dataset, self.items, self.val_items, cfg.eval_clips, log)
        self.processor = make_processor(tokenizer, self.model.config)
        row = cfg.family_options.prompt
        self.prompt, self.prompt_warning = pick_prompt(self.items + self.val_items if row else self.items, row)
        if self.prompt_warning:
            log(f"warning: {self.prompt_warning}", "warning")
        from utils.datasets.features import audio_path

        self.prompt_wave, _ = read_prompt(Path(audio_path(self.ws, cfg.dataset, self.prompt.row)), self.prompt.text)
        self._evaluation_voices(log)
        minutes = sum(it.seconds for it in self.items) / 60
        log(f"data: {len(self.items)} training / {len(self.val_items)} held-out clips ({minutes:.1f} min); the voice's "
            f"reference clip: {self.prompt.row.get('id')} ({self.prompt.seconds:.1f} s)")

    def _evaluation_voices(self, log) -> None:
        """Each evaluated speaker's reference clip and its sound (data.speaker_prompts), said in the log when the
        held-out rows have more than one speaker."""
        from utils.datasets.features import audio_path
        from utils.omnivoice.data import speaker_prompts
        from utils.omnivoice.speech import read_prompt

        evaluated = self.val_items[: self.cfg.eval_clips]
        self.eval_prompts, missing = speaker_prompts(self.items, evaluated, self.prompt)
        self.eval_waves = {id(self.prompt): self.prompt_wave}
        for it in self.eval_prompts.values():
            if id(it) not in self.eval_waves:
                path = Path(audio_path(self.ws, self.cfg.dataset, it.row))
                self.eval_waves[id(it)] = read_prompt(path, it.text)[0]
        if len(self.eval_prompts) > 1 or missing:
            said = ", ".join(f"{name or 'unnamed'}: {it.row.get('id')}" for name, it in self.eval_prompts.items())
            log(f"evaluation: each held-out sentence is spoken in its own speaker's voice ({said})"
                + (f"; no 3-20 s training clip of {', '.join(missing)}: theirs in {self.prompt.row.get('id')}'s voice"
                   if missing else ""))

    # ------------------------------------------------------------------------------ batch probe
    def data_counts(self) -> tuple[int, int]:  # a resume says when these changed (DataPosition)
        return len(self.items), len(self.val_items)

    def probe_unit(self) -> int:
        return max(it.length for it in self.items)

    def probe_batch(self, frames: int) -> dict:
        """As many of the longest clips as `frames` allows, never more than the recipe's budget (at least one)."""
        from utils.omnivoice.data import TokenDataset, collate

        longest = sorted(range(len(self.items)), key=lambda i: -self.items[i].length)
        n = max(1, min(frames, self.machine.max_frames_per_batch) // self.probe_unit())
        dataset = TokenDataset(self.items, self.processor, self.cfg.seed)
        return collate([dataset[longest[i % len(longest)]] for i in range(n)])

    def probe_ceiling(self) -> int:
        """The budget before the headroom the probe keeps: probe_batch never goes past the budget, so a larger try
        would run the same step again (four real steps of the full base on a GPU, for nothing)."""
        return math.ceil(self.machine.max_frames_per_batch / self.cfg.probe_headroom)

    def apply_probe(self, fitted: int, longest: int) -> None:
        """Less than the budget fits: the budget is reached in several micro-batches (the update is the recipe's)."""
        cfg, m = self.cfg, self.machine
        if fitted == 0:
            raise StudioError(f"Not even the longest clip ({longest} positions) fits in memory beside the model: turn "
                              "on gradient checkpointing, drop the longest clips, or use a larger GPU.")
        micro = max(longest, int(fitted * cfg.probe_headroom))  # `fitted`: the smallest GPU's (the loop's)
        budget = m.max_frames_per_batch
        if micro >= budget or cfg.max_frames_per_batch != AUTO:
            return
        accum = math.ceil(budget / micro) if cfg.grad_accumulation == AUTO else m.grad_accumulation
        m.set("max_frames_per_batch", micro, f"{fitted} positions fitted in one real step, {cfg.probe_headroom:.0%} "
                                             "kept")
        m.set("grad_accumulation", accum, f"{accum} micro-batches a step: the recipe's {budget} positions an update")

    # ------------------------------------------------------------------------------ data
    def start_data(self, step: int) -> None:
        from utils.omnivoice.data import TokenDataset, collate
        from utils.training.batching import FrameBatchSampler, make_loader
        from utils.training.data import VAL_LOSS_CLIPS, spread
        from utils.training.loader import ResilientLoader

        cfg, m, dist = self.cfg, self.machine, self.ctx.dist
        self.sampler = FrameBatchSampler([it.length for it in self.items], m.max_frames_per_batch, cfg.seed,
                                         dist.rank, dist.world_size, length_multiple=1, start=self.pos)
        dataset = TokenDataset(self.items, self.processor, cfg.seed)
        batch_bytes = m.max_frames_per_batch * 8 * 8 * 2  # input ids and labels, int64, 8 codebooks
        self.data = ResilientLoader(lambda sampler, workers: make_loader(dataset, sampler, m, cfg.prefetch_factor,
                                                                         workers, collate),
                                    self.sampler, m.num_workers, self.ctx.log, batch_bytes, cfg.prefetch_factor)
        val = TokenDataset(spread(self.val_items, VAL_LOSS_CLIPS), self.processor, cfg.seed)
        self.val_batches = [collate([val[i] for i in range(j, min(j + 4, len(val)))]) for j in range(0, len(val), 4)]

    def size(self, batch: dict) -> int:
        return len(batch["samples"])

    def padded_frames(self, batch: dict) -> int:
        return len(batch["samples"]) * max(s["length"] for s in batch["samples"])

    def split(self, batch: dict, parts: int) -> list[dict]:
        from utils.omnivoice.data import split

        return split(batch, parts)

    def counts(self, batch: dict) -> dict:
        return {"samples": len(batch["samples"]), "frames": sum(s["audio_frames"] for s in batch["samples"])}

    def progress(self) -> dict:
        return {"epoch": self.pos[0]}

    # ------------------------------------------------------------------------------ the step
    def lr_at(self, step: int) -> float:
        """The recipe's schedule: linear warm-up over 1 % of the run, then cosine to 0 (transformers' cosine with
        warm-up, as the package's trainer; the first update already moves: (step + 1) / warm-up)."""
        peak, warmup = self.machine.lr, self.warmup()
        if step < warmup:
            return peak * (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, self.cfg.max_steps - warmup))
        return peak * 0.5 * (1.0 + math.cos(math.pi * progress))

    def warmup(self) -> int:
        return max(1, math.ceil(self.cfg.max_steps * WARMUP_SHARE))

    def losses(self, batch: dict, phase: str, step: int) -> dict:
        """The package model's loss: cross-entropy of the masked audio tokens, each codebook weighted (8,8,6,6,4,4,2,2)."""
        from utils.omnivoice.data import padded

        b = padded(batch, self.processor, self.ctx.device)
        with self.ctx.autocast():
            out = self.model(input_ids=b["input_ids"], audio_mask=b["audio_mask"], labels=b["labels"],
                             attention_mask=b["attention_mask"], position_ids=b["position_ids"])
        return {"loss": out.loss}

    # ------------------------------------------------------------------------------ evaluation
    def evaluate(self, step: int, samples: Path) -> dict:
        """The held-out loss (the same masks every time), and each held-out sentence spoken in the voice of the
        run's reference clip, as long as its recording: its MCD against the recording (the project's WORLD
        definition), samples, and the recognizer's CER when the workspace has one."""
        from utils.audio import load_audio, save_audio
        from utils.datasets.features import audio_path
        from utils.evaluation import mcd
        from utils.training.evaluate import intelligibility, spoken_text

        cfg, model = self.cfg, self.model
        items = self.val_items[: cfg.eval_clips]
        model.eval()
        try:
            with torch.no_grad():
                losses = [float(self.losses(b, "model", -1)["loss"]) for b in self.val_batches]
            from utils.omnivoice.data import speaker

            voices = [self.eval_prompts.get(speaker(it), self.prompt) for it in items]
            waves = self.speak([it.text for it in items], [it.seconds for it in items], cfg.seed, voices)
        finally:
            model.train()  # the package's generate leaves the model in eval mode
        scores = []
        for i, (item, wave) in enumerate(zip(items, waves)):
            recording, _ = load_audio(audio_path(self.ws, cfg.dataset, item.row), SAMPLE_RATE)
            scores.append(float(mcd(recording, SAMPLE_RATE, wave, SAMPLE_RATE)))
            if i < cfg.sample_clips:
                save_audio(samples / f"{item.row['id']}.wav", wave, SAMPLE_RATE)
        return {"val_loss": float(np.mean(losses)) if losses else float("nan"), "mcd": float(np.mean(scores)),
                "mcd_per_clip": scores,
                **intelligibility(self.ws, waves, SAMPLE_RATE, [spoken_text(it.row) for it in items],
                                  str(self.ctx.device), (cfg.dataset, [it.row for it in items]))}

    def speak(self, texts: list[str], seconds: list[float], seed: int,
              voices: list | None = None) -> list[np.ndarray]:
        """`texts` each in the voice of its reference clip (`voices`, Items; default the run's), each `seconds` long
        (the package's generate, cfg.ode_steps decoding steps), with its own random stream: the training's is
        untouched."""
        from utils.omnivoice.speech import clone_prompt

        voices = voices or [self.prompt] * len(texts)
        cuda = [torch.device(self.ctx.device).index or 0] if str(self.ctx.device).startswith("cuda") else []
        with torch.random.fork_rng(devices=cuda):
            torch.manual_seed(seed)
            made = {id(it): clone_prompt(self.model, self.eval_waves[id(it)], it.text) for it in voices}
            waves = self.model.generate(text=texts, language=[LANGUAGE] * len(texts),
                                        voice_clone_prompt=[made[id(it)] for it in voices], duration=seconds,
                                        num_step=max(1, int(self.cfg.ode_steps)), denoise=DENOISE)
        return [np.asarray(w, np.float32).reshape(-1) for w in waves]

    def score(self, metrics: dict) -> float:
        return metrics["mcd"]

    # ------------------------------------------------------------------------------ files
    def describe(self) -> list[str]:
        cfg, m, s = self.cfg, self.machine, self.settings
        per_pass = self.sampler.batches_per_epoch() // max(1, m.grad_accumulation)
        return [*m.describe(),
                f"{'text':22} {'as written':<10} the normalised Ethiopic letters through the base's own tokenizer",
                f"{'masking':22} {'recipe':<10} prompt share {PROMPT_SHARE}, masked share {MASK_SHARE}, no text and "
                f"no prompt {DROP_CONDITION:.0%} of the time (the package's sample processor)",
                f"{'lr schedule':22} {m.lr:<10} warm-up {self.warmup()} updates ({WARMUP_SHARE:.0%}), cosine to 0 at "
                f"update {cfg.max_steps}; AdamW weight decay {cfg.weight_decay:g}, clipping at {CLIP_NORM:g}",
                f"{'passes over the data':22} {cfg.max_steps / max(1, per_pass):<10.1f} {per_pass} updates a pass "
                f"({len(self.items)} clips)",
                f"{'evaluations':22} {s.eval_every or 'end':<10} held-out MCD (WORLD) of sentences spoken in the "
                f"voice of {', '.join(str(it.row.get('id')) for it in self.eval_prompts.values())} (each held-out "
                "speaker's own; and CER with a recognizer), averaged and raw weights"]

    def _voice_config(self) -> dict:
        """The voice folder's config.json (speech.voice_config) of this run's weights and reference clip."""
        from utils.omnivoice.speech import voice_config

        config = voice_config(self.base, self.prompt.text, weights="own", source=str(self.prompt.row.get("id")),
                              root=self.ws.root)
        config["prompt"].update(id=self.prompt.row.get("id"), warning=self.prompt_warning)
        return config

    def write_run_config(self) -> None:
        write_run_config(self.run_dir / "config.json", self.cfg, resolved=self.machine.values,
                         reasons=self.machine.reasons, **self._voice_config())

    def checkpoint_config(self, step: int) -> dict:
        return {**self._voice_config(), "step": step, "train": self.cfg.to_dict(), "resolved": self.machine.values}

    def save_checkpoint(self, folder: Path, weights: dict, config: dict, trainer_state: dict | None = None) -> Path:
        """The loop's checkpoint files and the reference clip (prompt.wav), in one atomic folder: every checkpoint
        speaks and exports as a voice (speech.load_omnivoice, export's VOICE_FILES)."""
        from utils.audio import wav_bytes
        from utils.omnivoice.speech import PROMPT_AUDIO
        from utils.training import checkpoint as ckpt

        clip = [(PROMPT_AUDIO, wav_bytes(self.prompt_wave, SAMPLE_RATE))]
        return ckpt.write_atomically(folder, itertools.chain(ckpt.checkpoint_files(weights, config, trainer_state),
                                                             clip))

    # ------------------------------------------------------------------------------ trainer state
    def upgrade_state(self, state: dict, folder: Path) -> dict:
        return state
