"""Matcha-TTS-style acoustic model: text encoder + duration predictor + MAS + flow-matching decoder.

    model = MatchaTTS(MatchaConfig.preset_config("tiny", n_symbols=60, n_speakers=3))
    losses = model(tokens, token_lens, mels, mel_lens, speakers)      # training: dict of scalar losses
    out = model.synthesise(tokens, speaker=0, n_steps=10)              # out["mel"]: [1, n_feats, T] log-mel

Mels inside the model are normalised, (logmel - mel_mean) / mel_std; `synthesise` returns the
denormalised log-mel the vocoder expects. Sizes live in `MatchaConfig` and nowhere else.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn as nn

from models.alignment import durations_to_path, maximum_path, sequence_mask
from models.attention import set_attention_backend
from models.decoder import LENGTH_MULTIPLE, Decoder
from models.duration import DurationPredictor
from models.flow_matching import FlowMatching
from models.precision import activation_dtype
from models.text_encoder import TextEncoder

PRESETS = {
    # trains on 2 CPU cores in minutes (tests)
    # (the decoder stays wider than the 100 mel channels: a narrower one cannot carry x_t through
    # to remove the noise, and learns only the mean)
    "tiny": dict(enc_channels=64, enc_layers=2, enc_heads=2, enc_ffn=128, dp_channels=64, spk_dim=16,
                 dec_channels=(128, 128), dec_blocks=1, dec_mid=1, dec_heads=2, dec_head_dim=32),
    "small": dict(enc_channels=128, enc_layers=4, enc_heads=2, enc_ffn=512, dp_channels=192, spk_dim=32,
                  dec_channels=(192, 192), dec_blocks=1, dec_mid=2, dec_heads=2, dec_head_dim=48),
    # the published Matcha-TTS sizes (~18.9M parameters at 100 mels, one speaker)
    "base": dict(enc_channels=192, enc_layers=6, enc_heads=2, enc_ffn=768, dp_channels=256, spk_dim=64,
                 dec_channels=(256, 256), dec_blocks=1, dec_mid=2, dec_heads=2, dec_head_dim=64),
}
# training activation memory a mel frame, relative to `base` (mixed precision, no recomputation): the batch guess's
# starting point before the trainer's probe measures it
# the most frames one symbol is given at synthesis before the speed's scaling (~1.1 s at 24 kHz, hop 256: no sound or
# pause lasts longer): a duration predictor wrecked by a learning rate 100x too high (exp of a log-duration of ~100)
# asked for millions of frames, and an evaluation took all the RAM, then minutes of attention over thousands of
# frames a symbol, instead of scoring badly (found by bench/transfer.py's sabotage)
MAX_SYMBOL_FRAMES = 100
FRAME_MEMORY = {"tiny": 0.1, "small": 0.45, "base": 1.0}


@dataclass
class MatchaConfig:
    n_symbols: int
    n_speakers: int = 1
    n_feats: int = 100
    enc_channels: int = 192
    enc_layers: int = 6
    enc_heads: int = 2
    enc_ffn: int = 768
    enc_kernel: int = 3
    enc_dropout: float = 0.1
    dp_channels: int = 256
    dp_dropout: float = 0.1
    spk_dim: int = 64  # used only when n_speakers > 1
    dec_channels: tuple[int, ...] = (256, 256)
    dec_blocks: int = 1
    dec_mid: int = 2
    dec_heads: int = 2
    dec_head_dim: int = 64
    dec_dropout: float = 0.05
    sigma_min: float = 1e-4
    mel_mean: float = 0.0  # normalisation of the log-mel (set from the training data)
    mel_std: float = 1.0
    preset: str = "base"
    # a blank symbol (id 0, the padding id, as in Matcha-TTS and VITS) between every two symbols and at both
    # ends: the aligner can give transitions and pauses frames of their own. False in checkpoints made before
    # the setting existed, so they load and speak as they were trained.
    add_blank: bool = False

    @classmethod
    def preset_config(cls, name: str, **overrides) -> "MatchaConfig":
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
        return cls(**{**PRESETS[name], "preset": name, **overrides})

    def to_dict(self) -> dict:
        d = asdict(self)
        d["dec_channels"] = list(self.dec_channels)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "MatchaConfig":
        known = {f.name for f in fields(cls)}
        d = {k: v for k, v in d.items() if k in known}
        if "dec_channels" in d:
            d["dec_channels"] = tuple(d["dec_channels"])
        return cls(**d)


def intersperse_blanks(tokens: torch.Tensor) -> torch.Tensor:
    """[B, N] ids -> [B, 2N + 1]: blank (0) s1 blank s2 ... sN blank. A row of length n becomes 2n + 1; what
    follows stays 0 (padding). Tensor ops only, so the ONNX graph does the same."""
    blank = torch.zeros_like(tokens)
    pairs = torch.stack([blank, tokens], dim=-1).reshape(tokens.shape[0], -1)  # [B, 2N]
    return torch.cat([pairs, blank[:, :1]], dim=1)


def fold_blank_durations(durations: torch.Tensor) -> torch.Tensor:
    """Frames per interspersed token [2n + 1] -> frames per symbol [n]: each symbol takes the blank after it,
    the first symbol also the leading blank (the total is kept)."""
    folded = durations[1::2] + durations[2::2]
    folded[0] += durations[0]
    return folded


def fix_len(t: int, multiple: int = LENGTH_MULTIPLE) -> int:
    return int(math.ceil(t / multiple) * multiple)


class MatchaTTS(nn.Module):
    def __init__(self, cfg: MatchaConfig):
        super().__init__()
        self.cfg = cfg
        spk_dim = cfg.spk_dim if cfg.n_speakers > 1 else 0
        self.spk_emb = nn.Embedding(cfg.n_speakers, cfg.spk_dim) if spk_dim else None
        self.encoder = TextEncoder(cfg.n_symbols, cfg.enc_channels, cfg.enc_layers, cfg.enc_heads, cfg.enc_ffn,
                                   cfg.enc_kernel, cfg.enc_dropout, spk_dim, cfg.n_feats)
        self.duration = DurationPredictor(self.encoder.width, cfg.dp_channels, dropout=cfg.dp_dropout)
        self.decoder = FlowMatching(
            Decoder(2 * cfg.n_feats + spk_dim, cfg.n_feats, tuple(cfg.dec_channels), cfg.dec_blocks, cfg.dec_mid,
                    cfg.dec_heads, cfg.dec_head_dim, cfg.dec_dropout), cfg.sigma_min)
        self.mas_implementation = "auto"

    # ------------------------------------------------------------------ switches the trainer sets
    def set_grad_checkpointing(self, on: bool) -> None:
        """Recompute each encoder layer and each decoder U-Net level in the backward pass."""
        self.encoder.grad_checkpointing = on
        self.decoder.estimator.grad_checkpointing = on

    def set_attention_backend(self, backend: str) -> int:
        return set_attention_backend(self, backend)

    masks_attention = True  # padded batches hide their padding keys: FlashAttention (no masks) runs only unpadded

    # ----------------------------------------------------------------------------------- shared
    def _speaker(self, speakers: torch.Tensor | None, batch: int, device) -> torch.Tensor | None:
        if self.spk_emb is None:
            return None
        if speakers is None:
            speakers = torch.zeros(batch, dtype=torch.long, device=device)
        return self.spk_emb(speakers)  # [B, S]

    def encode(self, tokens, token_lens, speakers=None):
        """tokens [B, N], token_lens [B] -> mu [B, F, N], log-durations [B, 1, N], token mask [B, 1, N], spk.
        The lengths may be on the CPU (the trainer keeps them there): the padding check then reads them
        without waiting for the GPU."""
        if self.cfg.add_blank:
            tokens, token_lens = intersperse_blanks(tokens), 2 * token_lens + 1
        padded = tokens.shape[1] != int(token_lens.min())
        token_lens = token_lens.to(tokens.device, non_blocking=True)
        x_mask = sequence_mask(token_lens, tokens.shape[1])  # [B, N] bool
        spk = self._speaker(speakers, tokens.shape[0], tokens.device)
        key_mask = x_mask if padded else None
        mask = x_mask[:, None].to(activation_dtype(tokens.device.type, self.encoder.emb.weight.dtype))
        mu, hidden = self.encoder(tokens, mask, spk, key_mask)
        logw = self.duration(hidden.detach(), mask)  # stop-gradient: the duration loss does not train the encoder
        return mu, logw, mask, spk

    # --------------------------------------------------------------------------------- training
    def forward(self, tokens, token_lens, mels, mel_lens, speakers=None, decoder: bool = True) -> dict[str, torch.Tensor]:
        """tokens [B, N]; mels [B, F, T] normalised log-mel with T a multiple of LENGTH_MULTIPLE;
        lengths [B] (on the CPU or the device, see `encode`) -> {"dur", "prior", "cfm", "loss"} scalar tensors.
        `decoder` False: the flow decoder is skipped (no "cfm"), for an aligner, whose alignment is the encoder's alone:
        the tiny model's step is ~9x faster without it on a CPU."""
        padded = mels.shape[-1] != int(mel_lens.min())
        mel_lens = mel_lens.to(mels.device, non_blocking=True)
        mu, logw, x_mask, spk = self.encode(tokens, token_lens, speakers)
        y_mask = sequence_mask(mel_lens, mels.shape[-1])[:, None].to(mu.dtype)  # [B, 1, T]
        with torch.autocast(mels.device.type, enabled=False), torch.no_grad():
            # log N(y_t; mu_n, I) up to a constant, in float32: [B, N, T]
            mu32, y32 = mu.float(), mels.float()
            log_p = (-0.5 * (y32 ** 2).sum(1)[:, None, :] + torch.einsum("bfn,bft->bnt", mu32, y32)
                     - 0.5 * (mu32 ** 2).sum(1)[:, :, None])
            attn_mask = x_mask.float().transpose(1, 2) * y_mask.float()  # [B, N, T]
            path = maximum_path(log_p, attn_mask, self.mas_implementation)  # [B, N, T], no gradient
        durations = path.sum(-1)[:, None]  # [B, 1, N]
        log_target = torch.log(1e-8 + durations) * x_mask
        dur_loss = ((logw.float() - log_target) ** 2).sum() / x_mask.sum()
        mu_y = torch.einsum("bfn,bnt->bft", mu, path.to(mu.dtype))  # [B, F, T]: gradient through mu, not the path
        prior = (0.5 * ((mels.float() - mu_y.float()) ** 2 + math.log(2 * math.pi)) * y_mask).sum() / (
            y_mask.sum() * self.cfg.n_feats)
        if not decoder:
            return {"dur": dur_loss, "prior": prior, "loss": dur_loss + prior}
        cfm = self.decoder.loss(mels, y_mask, mu_y, spk, padded)
        return {"dur": dur_loss, "prior": prior, "cfm": cfm, "loss": dur_loss + prior + cfm}

    # ------------------------------------------------------------------------- per-clip alignment
    @torch.no_grad()
    def align(self, tokens, mels, speaker: int = 0) -> dict[str, torch.Tensor]:
        """One utterance, nothing reduced: how well its text explains its audio (the transcript checker).

        tokens [N] ids; mels [F, T] normalised log-mel (any T >= tokens). Returns, with N' = 2N + 1 when the
        model uses blanks: "durations" [N'] MAS frames per token, "predicted" [N'] the duration predictor's
        frames, "dur_err" [N'] (log predicted - log MAS)^2, "frame_nll" [T] the prior loss of each frame
        under its aligned token, "token_of_frame" [T] the token each frame was given, "blank" [N'] bool."""
        tokens = torch.as_tensor(tokens, dtype=torch.long, device=mels.device)[None]
        lens = torch.tensor([tokens.shape[1]])
        mu, logw, x_mask, _ = self.encode(tokens, lens, torch.tensor([speaker], device=mels.device))
        mu, y = mu[0].float(), mels.float()  # [F, N'], [F, T]
        log_p = (-0.5 * (y ** 2).sum(0)[None, :] + mu.T @ y - 0.5 * (mu ** 2).sum(0)[:, None])  # [N', T]
        path = maximum_path(log_p[None], torch.ones_like(log_p)[None], self.mas_implementation)[0]
        durations = path.sum(-1)
        mu_y = mu @ path  # [F, T]
        frame_nll = (0.5 * ((y - mu_y) ** 2 + math.log(2 * math.pi))).mean(0)
        logw = logw[0, 0].float()
        blank = torch.zeros_like(durations, dtype=torch.bool)
        if self.cfg.add_blank:
            blank[0::2] = True
        return {"durations": durations, "predicted": torch.exp(logw), "dur_err": (logw - torch.log(durations)) ** 2,
                "frame_nll": frame_nll, "token_of_frame": path.argmax(0), "blank": blank}

    # -------------------------------------------------------------------------------- inference
    @torch.no_grad()
    def synthesise(self, tokens, speaker: int | torch.Tensor | None = 0, n_steps: int = 10,
                   temperature: float = 0.667, length_scale: float = 1.0,
                   generator: torch.Generator | None = None) -> dict:
        """Text ids -> log-mel for one utterance (see `synthesise_batch`).

        Returns {"mel": denormalised natural-log mel [1, n_feats, T] (the Vocos/Griffin-Lim input),
                 "mel_norm": the normalised mel, "durations": LongTensor [N] frames per symbol (a blank's frames go to the symbol before it),
                 "rtf_s": seconds spent}.
        """
        start = time.perf_counter()
        out = self.synthesise_batch([tokens], [speaker or 0], n_steps, temperature, length_scale, generator)[0]
        return {"mel": out["mel"][None], "mel_norm": out["mel_norm"][None], "durations": out["durations"],
                "rtf_s": time.perf_counter() - start}

    @torch.no_grad()
    def synthesise_batch(self, token_lists, speakers=None, n_steps: int = 10, temperature: float = 0.667,
                         length_scale: float = 1.0, generator: torch.Generator | None = None) -> list[dict]:
        """Several utterances in one padded batch (masks keep them independent).

        token_lists: list of id lists (or 1-D LongTensors) from the checkpoint's symbol table;
        speakers: one index into config["speakers"] per utterance (None: all 0); n_steps: Euler steps
        of the flow (2-10); temperature: scale of the starting noise; length_scale: >1 slower.
        Returns one {"mel" [n_feats, T_i] denormalised natural-log mel, "mel_norm", "durations" [N_i]}
        per utterance, on the model's device.
        """
        mu_y, y_mask, spk_vec, t_y, durations, x_mask = self._frames(token_lists, speakers, length_scale)
        y = self.decoder.sample(mu_y, y_mask, n_steps, temperature, spk_vec, generator)
        mel = y * self.cfg.mel_std + self.cfg.mel_mean
        lengths = t_y.tolist()
        n_tokens = x_mask[:, 0].sum(1).long().tolist()  # with blanks: 2n + 1 per utterance
        per_token = [durations[i, :n].cpu() for i, n in enumerate(n_tokens)]
        if self.cfg.add_blank:
            per_token = [fold_blank_durations(d) for d in per_token]
        return [{"mel": mel[i, :, :n].float(), "mel_norm": y[i, :, :n].float(), "durations": per_token[i]}
                for i, n in enumerate(lengths)]

    def _frames(self, token_lists, speakers, length_scale: float) -> tuple:
        """Text ids -> what the decoder starts from: mu_y [B, F, T] (each symbol's encoding repeated over its
        frames), y_mask [B, 1, T], the speaker vector, frames t_y [B], durations [B, N], token mask [B, 1, N]."""
        device = next(self.parameters()).device
        seqs = [torch.as_tensor(t, dtype=torch.long).reshape(-1) for t in token_lists]
        token_lens = torch.tensor([len(s) for s in seqs], device=device)
        tokens = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True).to(device)  # pad id 0
        spk = None
        if self.spk_emb is not None:
            spk = torch.as_tensor([int(s or 0) for s in (speakers or [0] * len(seqs))], device=device)
        mu, logw, x_mask, spk_vec = self.encode(tokens, token_lens, spk)
        # scale before rounding and keep >= 1 frame per token (Matcha scales after ceil: tokens could vanish); at
        # most MAX_SYMBOL_FRAMES each: a wrecked duration predictor asked for millions of frames and took the RAM
        logw = logw.clamp(max=math.log(MAX_SYMBOL_FRAMES))
        w = torch.clamp(torch.ceil(torch.exp(logw) * length_scale), min=1) * x_mask  # [B, 1, N]
        durations = w[:, 0].long()  # [B, N], 0 on padding
        t_y = durations.sum(1)  # [B]
        t_pad = fix_len(int(t_y.max()))
        path = durations_to_path(durations, t_pad).to(mu.dtype)  # [B, N, T]
        mu_y = torch.einsum("bfn,bnt->bft", mu, path)
        y_mask = sequence_mask(t_y, t_pad)[:, None].to(mu.dtype)
        return mu_y, y_mask, spk_vec, t_y, durations, x_mask

    @torch.no_grad()
    def synthesise_in_windows(self, tokens, speaker: int = 0, n_steps: int = 10, temperature: float = 0.667,
                              length_scale: float = 1.0, generator: torch.Generator | None = None,
                              first: int = 32, context: int = 16):
        """One utterance decoded in two windows, so that a stream's first sound waits for its first `first` frames
        only, not for the whole sentence: frames [0, cut) on a window that reaches `context` frames past the cut,
        then [cut, T) on one that starts `context` frames before it. Every frame keeps the whole utterance's
        durations, encoder output and starting noise, so each window is the one-piece decode except near its edge
        (its attention saw fewer frames). Yields {"mel": the window's denormalised log-mel [F, n], "start": its
        first frame, "cut": the frame where the first window's own frames end, "frames": T}; a sentence too short
        to split comes whole, as one window."""
        mu_y, y_mask, spk_vec, t_y, _, _ = self._frames([tokens], [speaker], length_scale)
        frames = int(t_y[0])
        noise = torch.randn(mu_y.shape, device=mu_y.device, dtype=mu_y.dtype, generator=generator)
        cut = fix_len(first)
        windows = [(0, mu_y.shape[-1])] if frames < cut + 2 * context else [
            (0, fix_len(cut + context)), (cut - fix_len(context), mu_y.shape[-1])]
        for start, end in windows:
            y = self.decoder.sample(mu_y[..., start:end], y_mask[..., start:end], n_steps, temperature, spk_vec,
                                    noise=noise[..., start:end])
            mel = (y * self.cfg.mel_std + self.cfg.mel_mean)[0, :, :frames - start].float()
            yield {"mel": mel, "start": start, "cut": cut if len(windows) > 1 else frames, "frames": frames}

    # ------------------------------------------------------------------------------ fine-tuning
    def grow_tables(self, n_symbols: int, n_speakers: int) -> None:
        """Enlarge the symbol and speaker tables, keeping the rows that exist (fine-tuning on new data)."""
        if n_symbols > self.cfg.n_symbols:
            self.encoder.emb = _grow(self.encoder.emb, n_symbols, self.cfg.enc_channels ** -0.5)
            self.cfg.n_symbols = n_symbols
        if n_speakers > self.cfg.n_speakers:
            if self.spk_emb is None:
                raise ValueError("this checkpoint was trained for one speaker; it has no speaker table to grow. "
                                 "Fine-tune it on one speaker, or train a multi-speaker model from scratch.")
            old = self.spk_emb.weight.data
            self.spk_emb = _grow(self.spk_emb, n_speakers, 0.0)
            # a new speaker starts from the average voice
            self.spk_emb.weight.data[old.shape[0]:] = old.mean(0, keepdim=True)
            self.cfg.n_speakers = n_speakers


def _grow(emb: nn.Embedding, n: int, std: float) -> nn.Embedding:
    new = nn.Embedding(n, emb.embedding_dim).to(emb.weight.device, emb.weight.dtype)
    nn.init.normal_(new.weight, 0.0, std) if std > 0 else nn.init.zeros_(new.weight)
    new.weight.data[: emb.num_embeddings] = emb.weight.data
    return new
