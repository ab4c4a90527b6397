"""A tiny random OmniVoice in the hub's layout (k2-fsa/OmniVoice): what the tests speak with, fine-tune, resume
and export on a CPU, and what `app.py` smoke tests read, without the 3.3 GB download. Same files, same classes,
same code paths as the real base; only the sizes differ (a 2-layer Qwen3 of width 64, a codec of ~0.8 M
parameters whose codebooks are random, so its tokens vary with the sound).

    write_tiny_base(folder)   # config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
                              # audio_tokenizer/{config.json, model.safetensors, preprocessor_config.json}, LICENSE
"""
from __future__ import annotations

from pathlib import Path

SPECIALS = ["<|pad|>", "<|denoise|>", "<|lang_start|>", "<|lang_end|>", "<|instruct_start|>", "<|instruct_end|>",
            "<|text_start|>", "<|text_end|>"]
TEXT_VOCAB = 1100          # > 1025: audio ids (and the mask id 1024) pass through the text embedding too


def tiny_llm_config():
    from transformers import Qwen3Config

    return Qwen3Config(vocab_size=TEXT_VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
                       tie_word_embeddings=False)


def full_llm_config():
    """The released base's backbone (Qwen3-0.6B: width 1024, 28 layers, 16 heads of 128, 8 key-value heads) with
    random weights: what the GPU bench times at the recipe's batch without the 3.3 GB download."""
    from transformers import Qwen3Config

    return Qwen3Config(vocab_size=151_936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40_960,
                       rope_theta=1_000_000.0, tie_word_embeddings=True)


def random_model(size: str = "tiny", attention: str = "sdpa"):
    """omnivoice.OmniVoice with random weights, `size` "tiny" or "full" (the released base's shapes)."""
    from utils.omnivoice.runtime import activate

    activate()
    from omnivoice import OmniVoice, OmniVoiceConfig

    llm = full_llm_config() if size == "full" else tiny_llm_config()
    llm._attn_implementation = attention
    return OmniVoice(OmniVoiceConfig(llm_config=llm))


def tiny_codec_config():
    """Higgs Audio v2's layout at 24 kHz, 25 frames a second (hop 960 = 8*5*4*2*3), 8 codebooks of 1024."""
    from transformers import HiggsAudioV2TokenizerConfig

    acoustic = dict(model_type="dac", encoder_hidden_size=8, downsampling_ratios=[8, 5, 4, 2, 3],
                    decoder_hidden_size=32, upsampling_ratios=[8, 5, 4, 2, 3], hidden_size=16, n_codebooks=8,
                    codebook_size=1024, codebook_dim=8, sampling_rate=24000, hop_length=960)
    semantic = dict(model_type="hubert", hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, conv_dim=[16] * 7, num_conv_pos_embeddings=16,
                    num_conv_pos_embedding_groups=2)
    return HiggsAudioV2TokenizerConfig(target_bandwidths=[0.5, 1, 1.5, 2], acoustic_model_config=acoustic,
                                       semantic_model_config=semantic, codebook_size=1024, codebook_dim=8,
                                       downsample_factor=320, semantic_sample_rate=16000, sample_rate=24000)


def tiny_text_tokenizer():
    """A byte-level BPE with no merges (every UTF-8 byte a token, as Qwen's tokenizer falls back to) and the special
    tokens OmniVoice's prompts use."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {s: i for i, s in enumerate(SPECIALS + sorted(alphabet))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<|pad|>")
    fast.add_special_tokens({"additional_special_tokens": SPECIALS[1:]})
    return fast


def write_tiny_base(folder: str | Path, seed: int = 0, size: str = "tiny") -> Path:
    """Write the tiny random base into `folder` (made if missing) and return it. `size` "full": the backbone at the
    released base's shapes (2.5 GB of random weights; the codec and text tokenizer stay tiny: training reads cached
    tokens, so its step costs what the real base's does)."""
    import torch
    from transformers import DacFeatureExtractor

    from utils.omnivoice.runtime import activate

    activate()
    from omnivoice import OmniVoice, OmniVoiceConfig
    from transformers import HiggsAudioV2TokenizerModel

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = OmniVoice(OmniVoiceConfig(llm_config=full_llm_config() if size == "full" else tiny_llm_config()))
    model.save_pretrained(folder)  # before any codec is attached: the codec keeps its own folder
    tiny_text_tokenizer().save_pretrained(folder)
    codec = HiggsAudioV2TokenizerModel(tiny_codec_config())
    with torch.no_grad():  # random codebooks (buffers; the default init leaves them equal: every frame one token)
        draws = torch.Generator().manual_seed(seed)
        for name, buffer in codec.named_buffers():
            if name.endswith("codebook.embed") or name.endswith("codebook.embed_avg"):
                buffer.copy_(torch.randn(buffer.shape, generator=draws, device=draws.device))
    codec.save_pretrained(folder / "audio_tokenizer")
    DacFeatureExtractor(sampling_rate=24000, hop_length=960).save_pretrained(folder / "audio_tokenizer")
    (folder / "LICENSE").write_text("A tiny random OmniVoice made by the studio's tests: no licence of its own.\n")
    return folder
