"""The OmniVoice engine's data: cached codec tokens + each row's text -> the package's training samples -> padded
batches of at most N positions (text and audio tokens together, as the package's length-grouped batching counts
them), in the shared sampler's order (utils.training.batching.FrameBatchSampler: length buckets, a seeded shuffle
a pass, a share a rank, an exact start for resume).

The masking is the package's own (omnivoice.data.processor.OmniVoiceSampleProcessor: a prompt share of each clip
kept, a share of the rest masked, sometimes no text and no prompt at all, the language id most of the time) and so
is the padding (omnivoice.data.collator.PaddingDataCollator: a 4-D attention mask for SDPA). Its draws come from
Python's and torch's global generators; here each sample's are seeded by (run seed, pass, clip), so a resumed run,
or one with another number of loader workers, masks every clip as an uninterrupted run would.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch

from utils.events import StudioError
from utils.omnivoice.about import (DROP_CONDITION, FRAMES_PER_S, GOOD_PROMPT_SECONDS, LANGUAGE, LANGUAGE_SHARE,
                                   MASK_SHARE, PROMPT_SECONDS, PROMPT_SHARE)

MIN_FRAMES = 5             # codec frames (0.2 s): shorter clips teach nothing and are dropped
PROMPT_TARGET_S = 8.0      # the reference clip chosen: the clean clip closest to this
STYLE_POSITIONS = 12       # <|lang_start|>am<|lang_end|><|instruct_start|>None<|instruct_end|>, about


@dataclass
class Item:
    row: dict
    text: str              # what the clip says, as the voice reads text (speech.OmniVoiceText)
    tokens: np.ndarray     # int16 [8, frames]
    length: int            # positions in the model's sequence: style + text tokens + audio frames

    @property
    def seconds(self) -> float:
        return self.tokens.shape[1] / FRAMES_PER_S


def make_processor(text_tokenizer, config):
    """The package's training sample processor with the published recipe's shares (about.py)."""
    from omnivoice.data.processor import OmniVoiceSampleProcessor

    return OmniVoiceSampleProcessor(text_tokenizer=text_tokenizer, num_channels=config.num_audio_codebook,
                                    audio_mask_id=config.audio_mask_id, prompt_ratio_range=PROMPT_SHARE,
                                    mask_ratio_range=MASK_SHARE, drop_cond_ratio=DROP_CONDITION,
                                    language_ratio=LANGUAGE_SHARE, use_pinyin_ratio=0.0, instruct_ratio=0.0,
                                    only_instruct_ratio=0.0)


def prepare_items(rows: list[dict], paths: dict, text_tokenizer, log=print) -> list[Item]:
    """Rows with cached tokens -> items; rows with nothing to say or under MIN_FRAMES of audio are dropped, named."""
    from utils.omnivoice.speech import OmniVoiceText
    from utils.omnivoice.tokens import load

    reader, items, dropped = OmniVoiceText(), [], []
    for row in rows:
        if row.get("id") not in paths:
            continue
        text = "".join(reader.units(row.get("normalized") or row.get("text") or ""))
        tokens = load(paths[row["id"]])
        if not text.strip() or tokens.shape[1] < MIN_FRAMES:
            dropped.append(str(row.get("id")))
            continue
        n_text = len(text_tokenizer(f"<|text_start|>{text}<|text_end|>").input_ids)
        items.append(Item(row, text, tokens, STYLE_POSITIONS + n_text + tokens.shape[1]))
    if dropped:
        log(f"data: {len(dropped)} row(s) skipped (no text, or under {MIN_FRAMES / FRAMES_PER_S:.1f} s of audio): "
            f"{', '.join(dropped[:5])}{' ...' if len(dropped) > 5 else ''}")
    return items


class TokenDataset(torch.utils.data.Dataset):
    """Index by (item index, pass, batch index), as the sampler yields them: the package's sample, masked with
    draws seeded by (seed, pass, item)."""

    def __init__(self, items: list[Item], processor, seed: int):
        self.items, self.processor, self.seed = items, processor, seed

    def __len__(self):
        return len(self.items)

    def __getitem__(self, key):
        i, epoch, index = key if isinstance(key, tuple) else (key, -1, -1)
        item = self.items[i]
        sample = {"label": {"text": item.text, "language_id": LANGUAGE},
                  "audio_tokens": torch.from_numpy(item.tokens.astype(np.int64))}
        draws = self.seed * 1_000_003 + (epoch + 1) * 7919 + i
        state = random.getstate()
        try:
            with torch.random.fork_rng(devices=[]):
                random.seed(draws)
                torch.manual_seed(draws)
                out = self.processor(sample)
        finally:
            random.setstate(state)  # the caller's stream is untouched (no loader workers: the trainer's own)
        return {**out, "pos": (epoch, index), "audio_frames": item.tokens.shape[1]}


def collate(samples: list[dict]) -> dict:
    """The sampler's batch kept as its samples (padding waits for the micro-batch: an out-of-memory split pads
    each piece to its own longest), with the batch's data position."""
    return {"samples": samples, "pos": samples[0]["pos"]}


def split(batch: dict, parts: int) -> list[dict]:
    samples = batch["samples"]
    parts = min(parts, len(samples))
    bounds = [round(i * len(samples) / parts) for i in range(parts + 1)]
    return [{"samples": samples[lo:hi], "pos": batch["pos"]} for lo, hi in zip(bounds[:-1], bounds[1:])]


def padded(batch: dict, processor, device) -> dict:
    """The package's padded tensors of a (micro-)batch on `device`: input_ids and labels [B, 8, L], audio_mask and
    position_ids [B, L], attention_mask [B, 1, L, L]."""
    from omnivoice.data.collator import PaddingDataCollator

    tensors = PaddingDataCollator(processor, 0)(batch["samples"])
    return {k: v.to(device, non_blocking=True) for k, v in tensors.items()}


# ---------------------------------------------------------------------------------- the reference clip
def pick_prompt(items: list[Item], named: str = "") -> tuple[Item, str]:
    """(the voice's reference clip, a warning or ""): the row named (--prompt ID), else the clip closest to 8 s
    among those of 3-20 s that no check flagged and no music was removed from (OmniVoice copies its reference's
    sound, noise and separation artefacts included), else the closest of 3-20 s with a warning."""
    low, high = PROMPT_SECONDS
    if named:
        chosen = next((it for it in items if it.row.get("id") == named), None)
        if chosen is None:
            raise StudioError(f"--prompt {named}: no usable row with that id in the dataset (excluded rows and rows "
                              "without audio or text cannot be the voice's reference clip).")
        if not low <= chosen.seconds <= high:
            raise StudioError(f"--prompt {named}: its clip is {chosen.seconds:.1f} s long; OmniVoice takes a "
                              f"reference clip of {low:g}-{high:g} s ({GOOD_PROMPT_SECONDS[0]:g}-"
                              f"{GOOD_PROMPT_SECONDS[1]:g} s works best): name another row.")
        return chosen, ""
    fits = [it for it in items if low <= it.seconds <= high]
    if not fits:
        raise StudioError(f"No clip of this dataset is {low:g}-{high:g} s long, and OmniVoice speaks in the voice of "
                          "such a clip: add longer recordings (or join short ones) on the Dataset tab.")
    clean = [it for it in fits if not it.row.get("flags") and not (it.row.get("music") or {}).get("separated")]
    chosen = min(clean or fits, key=lambda it: abs(it.seconds - PROMPT_TARGET_S))
    warning = "" if clean else (f"the voice's reference clip {chosen.row.get('id')} was flagged by a check or had "
                                "music removed (no clean 3-20 s clip): name a clean one with --prompt ID")
    return chosen, warning


def speaker_prompts(items: list[Item], held_out: list[Item], chosen: Item) -> tuple[dict, list[str]]:
    """({speaker: reference clip}, speakers left out) for an evaluation that speaks each held-out sentence in its own
    speaker's voice, so its MCD compares like with like: the run's reference for its own speaker, else the clip
    pick_prompt takes among that speaker's training clips. A speaker with no 3-20 s training clip is left out (its
    sentences are spoken in the run's voice)."""
    prompts, missing = {speaker(chosen): chosen}, []
    for name in dict.fromkeys(speaker(it) for it in held_out):
        if name in prompts:
            continue
        try:
            prompts[name] = pick_prompt([it for it in items if speaker(it) == name])[0]
        except StudioError:
            missing.append(name)
    return prompts, missing


def speaker(item: Item) -> str:
    return str(item.row.get("speaker") or "")
