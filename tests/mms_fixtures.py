"""Tiny MMS-TTS bases made in the test, in the public layouts: a random-weight transformers VitsModel saved as
facebook/mms-tts-amh publishes its files (config.json, model.safetensors, vocab.json, tokenizer_config.json with
is_uroman), and a discriminator file as the original VITS training code saves it (D_100000.pth: {"model": weights
under the old weight_g / weight_v and conv_post names, "iteration", "optimizer", "learning_rate"})."""
from __future__ import annotations

import json
from pathlib import Path

import torch

LETTERS = list("zyxwvutsrqponmlkjihgfedcba") + [" ", "'", "-"]  # uroman's output letters, ids in no special order
TINY = dict(vocab_size=len(LETTERS), hidden_size=16, num_hidden_layers=1, num_attention_heads=2, window_size=4,
            ffn_dim=32, flow_size=8, spectrogram_bins=513, upsample_initial_channel=16, upsample_rates=[8, 8, 4],
            upsample_kernel_sizes=[16, 16, 8], resblock_kernel_sizes=[3], resblock_dilation_sizes=[[1]],
            duration_predictor_filter_channels=16, duration_predictor_num_flows=1, prior_encoder_num_flows=1,
            prior_encoder_num_wavenet_layers=1, posterior_encoder_num_wavenet_layers=2, depth_separable_num_layers=1,
            sampling_rate=16_000)
TINY_DISCRIMINATOR = dict(scale_channels=(4, 8, 16, 16, 16, 16), period_channels=(4, 8, 8), periods=(2, 3))


def tiny_base(folder: Path, discriminator: bool = True, seed: int = 0, real_size: bool = False, **config) -> Path:
    """A random-weight VitsModel in the public layout (+ D_100000.pth in the original layout unless told not);
    `real_size`: the published sizes (transformers' VitsConfig defaults are MMS-TTS's), for bench/ timing."""
    from transformers import VitsConfig, VitsModel

    torch.manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    sizes = {"vocab_size": len(LETTERS)} if real_size else TINY
    VitsModel(VitsConfig(**{**sizes, **config})).save_pretrained(folder)
    (folder / "vocab.json").write_text(json.dumps({c: i for i, c in enumerate(LETTERS)}), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "add_blank": True, "is_uroman": True, "language": "amh", "normalize": True, "phonemize": False,
        "pad_token": LETTERS[0], "unk_token": "<unk>", "tokenizer_class": "VitsTokenizer"}), encoding="utf-8")
    if discriminator:
        original_discriminator(folder / "D_100000.pth", seed, real_size)
    return folder


def original_discriminator(path: Path, seed: int = 0, real_size: bool = False) -> dict:
    """A tiny (or published-size) discriminator saved as VITS's train.py saves D_<step>.pth; returns its weights in
    our names."""
    from models.vits_discriminator import VitsDiscriminator

    torch.manual_seed(seed + 1)
    ours = VitsDiscriminator(**({} if real_size else TINY_DISCRIMINATOR)).state_dict()
    original = {k.replace(".post.", ".conv_post.").replace("parametrizations.weight.original0", "weight_g")
                .replace("parametrizations.weight.original1", "weight_v"): v.clone() for k, v in ours.items()}
    optimizer = {"state": {0: {"step": torch.tensor(100000.0), "exp_avg": torch.zeros(3)}},
                 "param_groups": [{"lr": 2e-4, "betas": (0.8, 0.99), "eps": 1e-9, "params": [0]}]}
    torch.save({"model": original, "iteration": 100000, "optimizer": optimizer, "learning_rate": 2e-4}, path)
    return ours
