"""The F5-TTS engine on the shared trainer: fine-tune the public pretrained base (or train a tiny random F5 for
tests and smoke runs) on a prepared Amharic dataset.

    python app.py train --engine f5 --dataset NAME --init SWivid/F5-TTS --accept-licence   # the public v1 Base
    python app.py train --engine f5 --dataset NAME --preset tiny --max-steps 20            # CPU smoke run

Everything a run needs beyond the model is the loop's and the text-mel adapter's (utils/training/acoustic.py):
frame batches, out-of-memory recovery, the non-finite guard, EMA, exact resume, torchrun, run files. What is
F5's: log-mels with its 1e-5 floor (not normalised), the text table (the base's characters plus the Amharic
symbols, utils/f5/text.py), the flow-matching loss with span infilling, and an evaluation that speaks each
held-out sentence in the voice of a training clip of the same speaker, as inference will.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from utils.audio import FeatureConfig, save_audio
from utils.events import StudioError
from utils.f5.text import F5Text
from utils.training import checkpoint as ckpt
from utils.training import optimization as opt
from utils.training.acoustic import TextMelAdapter
from utils.training.config import TrainConfig
from utils.training import loop
from utils.training.loop import Phase

F5_FEATURES = FeatureConfig(log_floor=1e-5)  # the base was trained on log(clamp(mel, 1e-5)) of the same mels
FINE_TUNE_LR = 1e-5  # community fine-tunes of v1 Base (F5-TTS issue 87): about 1e-5; 5e-6 learnt nothing (#849)
PRETRAIN_LR = 7.5e-5  # the rate v1 Base was pretrained at (F5-TTS's F5TTS_v1_Base.yaml): its fine-tune takes 1/7.5 of it
NEW_ROWS_RATE = 10.0  # the rows added for Amharic symbols start from an average and must travel: 10x the body's rate
TINY_LR = 1e-3


def train(cfg: TrainConfig, report=None) -> dict:
    """Run (or resume) an F5 run; the loop's result dict (utils.training.loop.train)."""
    return loop.train(F5Adapter(cfg, report), cfg)


def auto_rate(cfg: TrainConfig) -> tuple[float, str]:
    """(rate, why) for lr "auto": the public base's fine-tuning rate for a base of its size; a small base (the tiny
    F5, trained here) fine-tunes at its own from-zero rate scaled as the public base's fine-tune is to its
    pretraining. At 1e-5 a tiny base barely moved in 100 steps (bench/transfer.py), and 100x that is its
    from-zero rate, which it takes without harm: the rate that proves nothing about a wrecked base."""
    from utils.f5.request import _is_full_base

    if not cfg.init:
        return TINY_LR, "a random F5 trained from zero (tests and smoke runs)"
    if _is_full_base(cfg.init, cfg.workspace):
        return FINE_TUNE_LR, "fine-tuning the pretrained base: about 1e-5 (F5-TTS issue 87)"
    rate = TINY_LR * FINE_TUNE_LR / PRETRAIN_LR
    return rate, (f"fine-tuning a small base: its from-zero rate {TINY_LR:g} x 1/7.5, as the public base fine-tunes "
                  f"at 1e-5 (F5-TTS issue 87) after a pretraining at {PRETRAIN_LR:g}")


class F5Adapter(TextMelAdapter):
    kind = "f5"
    oom_advice = "turn on gradient checkpointing or lower max_frames_per_batch."
    state_newest_only = True  # ~5.4 GB of trainer state per checkpoint: only the newest keeps it (it resumes)

    @staticmethod
    def memory_plan(cfg: TrainConfig):
        """The full-size base holds ~7 GB whatever the batch; a tiny random F5 next to nothing."""
        from utils.f5.request import _is_full_base, memory_plan

        return memory_plan(bool(cfg.init) and _is_full_base(cfg.init, cfg.workspace), cfg.preset)

    def __init__(self, cfg: TrainConfig, report=None):
        super().__init__(cfg, report, F5_FEATURES)
        m = self.machine
        if cfg.lr == "auto":
            m.set_family_lr(*auto_rate(cfg))
        if m.precision == "fp16":  # a card without bf16 (T4, V100)
            m.set("precision", "fp16", f"{m.reasons['precision']} F5 fine-tunes in fp16 have gone NaN after an epoch "
                  "or two (F5-TTS issue 341): if this run's loss scale collapses it goes on in fp32 by itself, from "
                  "its last good weights (slower), and says so in the log")
        if cfg.init and m.device == "cpu":
            m.set("device", "cpu", "no GPU: the 337 M-parameter base learns from ~60 mel frames a second on a 2-core "
                                   "CPU, so a useful fine-tune would take weeks; it runs, to check the "
                                   "set-up, but use a GPU (Colab's T4 or better)")

    # ------------------------------------------------------------------------------ build
    def make_frontend(self, base: dict | None, rows: list[dict]) -> F5Text:
        asked = self.cfg.family_options.frontend  # auto, phoneme or char (F5's OPTIONS)
        kind = "phoneme" if asked == "auto" else asked
        note = ""
        if base and base.get("text"):
            text = F5Text.from_dict(base["text"])
            if not self.ctx.resume_from:  # continuing a fine-tune: its table, trained already, is this run's base
                text.base_size = len(text.symbols)
                note = (f"text: the fine-tune's table of {len(text.symbols)} symbols ({text.kind}) is kept as it is"
                        + (f"; --frontend {kind} does not apply: a checkpoint's own table wins"
                           if asked not in ("auto", text.kind) else ""))
        elif base and base.get("vocab_file"):
            text = F5Text.from_vocab_file(base["vocab_file"], kind)
            note = self._ethiopic_vocabulary(text)
        else:
            text = F5Text(kind=kind)
        self.added = text.grow(rows)
        self.frontend_note = note + (f"; {len(self.added)} symbol(s) added for this dataset" if note else "")
        return text

    def _ethiopic_vocabulary(self, text: F5Text) -> str:
        """A base whose vocabulary has Ethiopic characters (one fine-tuned for Amharic already) is read with
        characters: the syllables it covers keep their trained rows instead of new ones. Returns the log's note."""
        from utils.text.ethiopic import is_ethiopic

        ethiopic = [s for s in text.symbols if len(s) == 1 and is_ethiopic(s)]
        if not ethiopic:
            return ""
        if self.cfg.family_options.frontend == "phoneme":
            return (f"text: the base's vocab.txt has {len(ethiopic)} Ethiopic characters, but --frontend phoneme was "
                    "asked for: reading phonemes (leave --frontend at auto, or pass char, to use those rows)")
        text.kind = "char"
        return (f"text: the base's vocab.txt has {len(ethiopic)} Ethiopic characters: reading characters (char "
                "frontend), and the characters it covers keep their pretrained rows")

    def mel_normalisation(self, base: dict | None) -> tuple[float, float]:
        return 0.0, 1.0  # F5 models raw log-mels

    def build(self, ctx) -> None:
        from utils.f5 import base as bases

        cfg, self.ctx = self.cfg, ctx
        if ctx.resume_from:
            ctx.log(f"resume: continuing from {ctx.resume_from}")
            base = ckpt.read_config(ctx.resume_from)
        elif cfg.init:
            hub = bases.HubBase.parse(cfg.init) if bases.looks_like_hub_id(cfg.init, self.ws.root) else None
            if hub is not None:
                ctx.log(f"downloading {hub.what} ({f'about {bases.SIZE_MB} MB, ' if hub.is_default else ''}once; "
                        f"licence accepted: {cfg.licence_accepted})")
                cfg.init = str(bases.fetch_for_run(self.ws, cfg.init, bool(cfg.licence_accepted), ctx.dist, ctx.log,
                                                   cfg.licence_accepted or ""))
            base = bases.describe_base(cfg.init, hub)
            if base.get("text"):
                ctx.log(f"fine-tune: continuing from the F5 fine-tune {cfg.init} (licence: "
                        f"{base['licence'] or 'none, a tiny F5 trained from zero'})")
            else:
                ctx.log(f"fine-tune: starting from the pretrained F5-TTS base {cfg.init} ({base['licence']})")
        else:
            base = None
        # the base's licence (a fine-tune's own: that of the base it came from), kept by every checkpoint
        self.licence = (base or {}).get("licence") or cfg.licence_accepted
        self._build_data(base, ctx.log)
        if self.frontend_note:
            ctx.log(self.frontend_note)
        self.model = bases.build_model(base, cfg.preset, ctx.resume_from, self.frontend, self.added, ctx.log)
        self.model.to(ctx.device)
        self.mcfg = self.model.cfg
        # attention kernel, recomputation of blocks, FP8 (compile: the loop, after its probe), as for Matcha
        opt.apply_model_settings(self.model, self.machine)
        self.modules = {"model": self.model}
        optimizer = opt.make_optimizer(self.model, cfg, self.machine)
        self._new_rows_learn_faster(optimizer, base)
        self.optimizers = {"model": optimizer}
        self.phases = [Phase("model", optimizer, [p for p in self.model.parameters() if p.requires_grad], 1.0)]
        self.eval_vocoder = None
        if ctx.dist.main:
            from utils.training.evaluate import load_eval_vocoder

            self.eval_vocoder = load_eval_vocoder(self.ws, cfg.eval_vocoder, ctx.device, self.feat_cfg)
        self.prompt = self.chosen_prompt()
        n = sum(p.numel() for p in self.model.parameters())
        ctx.log(f"model: F5-TTS {n / 1e6:.2f}M parameters, {len(self.frontend.symbols)} text symbols "
                f"({len(self.added)} added for this dataset, {self.frontend.kind})")

    def _new_rows_learn_faster(self, optimizer, base: dict | None) -> None:
        """The text rows added for Amharic (a pretrained base's table grown by `utils.f5.text`) learn NEW_ROWS_RATE
        times faster than the pretrained body, which fine-tuning moves gently; their rate is in the log."""
        first = self.frontend.base_size + 1  # row 0 is the filler
        n_new = len(self.frontend.symbols) + 1 - first
        if base is None or n_new <= 0:
            self.machine.set("new_rows_lr", 0.0, "no rows added to a pretrained table: every row learns at lr")
            return
        opt.faster_rows(optimizer, self.model.transformer.text_embed.text_embed.weight, first, NEW_ROWS_RATE)
        self.machine.set("new_rows_lr", self.machine.lr * NEW_ROWS_RATE,
                         f"the {n_new} rows added for Amharic symbols learn {NEW_ROWS_RATE:g}x faster than the "
                         f"pretrained body ({self.machine.lr:.1e}): they start from an average of similar sounds and "
                         "have further to go")

    def compiled_parts(self) -> list:
        return [self.model.transformer]

    # ------------------------------------------------------------------------------ the step
    def lr_at(self, step: int) -> float:
        return opt.lr_at(step, self.cfg, self.machine.lr)

    def losses(self, batch: dict, phase: str, step: int) -> dict:
        """The flow-matching loss on the masked span of each clip (the model draws span, time and noise)."""
        text, mels, lens = self._model_inputs(batch)
        with self.ctx.autocast():
            return {"loss": self.model(mels, text, lens)["loss"]}

    def _model_inputs(self, batch: dict):
        device = self.ctx.device
        tokens = batch["tokens"].clone()
        positions = torch.arange(tokens.shape[1])[None, :]
        tokens[positions >= batch["token_lens"][:, None]] = -1  # F5's text padding
        mels = batch["mels"].transpose(1, 2)  # [B, T, n_mels]
        return tokens.to(device), mels.to(device), batch["mel_lens"].to(device)

    # ------------------------------------------------------------------------------ evaluation
    def evaluate(self, step: int, samples: Path) -> dict:
        """Validation loss, and each held-out sentence spoken in the voice of a training clip of its speaker (the
        prompt), its MCD against the recording, samples, and the recognizer's CER on them (as for Matcha)."""
        from utils.datasets.features import features
        from utils.training.evaluate import distortion, intelligibility, spoken_text, vocode

        cfg, model = self.cfg, self.model
        was_training = model.training
        model.eval()
        torch.manual_seed(cfg.seed)  # the same masks and noise at every evaluation: comparable losses
        with torch.no_grad():
            losses = [float(self.losses(b, "model", -1)["loss"]) for b in self.val_batches]
        scores, waves = [], []
        for i, item in enumerate(self.val_items[: cfg.eval_clips]):
            prompt = self.prompt_for(item)
            mel = self.speak(prompt, item, seed=cfg.seed + i)
            target = features(self.ws, cfg.dataset, item.row, self.feat_cfg)
            wave = vocode(mel, self.feat_cfg, self.eval_vocoder)
            scores.append(distortion("logmel", None, None, target, wave, self.feat_cfg.sample_rate, mel.cpu()))
            waves.append(wave)
            if i < cfg.sample_clips:
                save_audio(samples / f"{item.row['id']}.wav", wave, self.feat_cfg.sample_rate)
        model.train(was_training)
        texts = [spoken_text(it.row) for it in self.val_items[: cfg.eval_clips]]
        return {"val_loss": float(np.mean(losses)), "mcd": float(np.mean(scores)), "mcd_per_clip": scores,
                **intelligibility(self.ws, waves, self.feat_cfg.sample_rate, texts, str(self.ctx.device),
                                   (cfg.dataset, [it.row for it in self.val_items[: cfg.eval_clips]]))}

    def chosen_prompt(self):
        """The voice's reference clip: the row the curator named (--prompt ID), else `pick_prompt`'s. A clip that
        falls short of a good reference is used all the same, with a warning in the run log and in the voice's
        config (the prompt's "warning") that names it and why."""
        fps = self.feat_cfg.sample_rate / self.feat_cfg.hop_length
        if self.cfg.family_options.prompt:
            chosen = self._named_prompt()
            why, note = prompt_problems(chosen.row, chosen.frames / fps), "It is the clip named with --prompt"
        else:
            chosen, why = pick_prompt(self.items, fps)
            note = "No training clip is 5-10 s long without flags; this is the one closest to 6 s"
        self.prompt_warning = (f"the voice's reference clip {chosen.row.get('id')}: {'; '.join(why)}. {note}. F5 "
                               "copies its reference's sound: name a clean 5-10 s clip with --prompt ID (the Training "
                               "tab's reference clip box).") if why else ""
        if why:
            self.ctx.log(f"warning: {self.prompt_warning}", "warning")
        return chosen

    def _named_prompt(self):
        named = self.cfg.family_options.prompt
        for it in self.items + self.val_items:
            if it.row.get("id") == named:
                return it
        raise StudioError(f"--prompt {named}: no usable row with that id in dataset {self.cfg.dataset} (excluded rows "
                          "and rows without audio cannot be the voice's reference clip).")

    def prompt_for(self, item):
        """A training clip of the item's speaker for evaluation (`pick_prompt`'s choice among them)."""
        same = [it for it in self.items if it.speaker == item.speaker and it is not item] or self.items
        return pick_prompt(same, self.feat_cfg.sample_rate / self.feat_cfg.hop_length)[0]

    def speak(self, prompt, item, seed: int) -> torch.Tensor:
        """The item's text in the prompt's voice, as long as the recording (so MCD compares like with like)."""
        from utils.datasets.features import features

        cond = torch.from_numpy(features(self.ws, self.cfg.dataset, prompt.row, self.feat_cfg)).T[None]
        text = torch.tensor([prompt.tokens + item.tokens])
        out = self.model.sample(cond.to(self.ctx.device), text.to(self.ctx.device), prompt.frames + item.frames,
                                steps=self.cfg.ode_steps, seed=seed)
        return out[0, prompt.frames:].T.float()  # [n_mels, frames] of the new part

    def score(self, metrics: dict) -> float:
        return metrics["mcd"]

    # ------------------------------------------------------------------------------ files
    def describe(self) -> list[str]:
        m = self.machine
        return [*m.describe(),
                f"{'text':22} {self.frontend.kind:<10} see utils/f5/text.py: phonemes keep gemination",
                *self.schedule_lines(),
                f"{'mcd':22} {'logmel':<10} log-mel MCD of each held-out sentence spoken from a training prompt"]

    def _config_extra(self) -> dict:
        p = self.prompt.row
        return {"model": self.mcfg.to_dict(), "text": self.frontend.to_dict(),
                "speakers": self.speakers, "features": self.feat_cfg.to_dict(),
                "licence": self.licence,
                "prompt": {"id": p.get("id"), "text": p.get("text", ""), "tokens": self.prompt.tokens,
                           "frames": self.prompt.frames, "warning": self.prompt_warning}}

    def extra_weights(self) -> dict:
        """The voice's reference clip (log-mel [frames, n_mels]) travels in model.safetensors as "prompt.mel", so an
        exported voice speaks without the dataset."""
        from utils.datasets.features import features

        mel = features(self.ws, self.cfg.dataset, self.prompt.row, self.feat_cfg)
        return {"prompt.mel": torch.from_numpy(mel).T.contiguous()}

    def upgrade_state(self, state: dict, folder: Path) -> dict:
        from utils.f5.base import grow_trainer_state

        return grow_trainer_state(state, self.model, self.optimizers["model"])


# ---------------------------------------------------------------------------------- the reference clip
PROMPT_SECONDS = (5.0, 10.0)  # F5 prompts work best at 5-10 s: shorter gives the model too little of the voice,
PROMPT_TARGET_S = 6.0         # longer leaves less of its context to the text


def pick_prompt(items: list, frames_per_s: float):
    """(item, why it falls short: [] when it does not): the clip closest to 6 s among those of 5-10 s that no
    check flagged and no music was removed from, else the closest of all. F5 copies its reference's sound,
    clipping, noise and separation artefacts included."""
    def seconds(it) -> float:
        return it.frames / frames_per_s

    clean = [it for it in items if not prompt_problems(it.row, seconds(it))]
    best = min(clean or items, key=lambda it: abs(seconds(it) - PROMPT_TARGET_S))
    return best, prompt_problems(best.row, seconds(best))


def prompt_problems(row: dict, seconds: float) -> list[str]:
    """Why a clip makes a poor reference, in the Dataset tab's words for its flags."""
    from utils.datasets.config import FLAG_HELP

    low, high = PROMPT_SECONDS
    why = [] if low <= seconds <= high else [f"{seconds:.1f} s long ({low:.0f}-{high:.0f} s works best)"]
    why += [f"flagged {flag}: {FLAG_HELP.get(flag, flag)}" for flag in row.get("flags") or []]
    if (row.get("music") or {}).get("separated"):
        why.append("music was removed from it (separation leaves artefacts)")
    return why
