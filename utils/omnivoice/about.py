"""What the OmniVoice family is, in constants: its base on the hub, the licences of its two parts, the published
fine-tuning recipe and what a fine-tune costs. Needs nothing (no torch): the UI and the CLI read it before anything
loads. Sources: the OmniVoice paper (arXiv 2604.00688), its model card and its package (PyPI omnivoice 0.2.1)."""

HUB_ID = "k2-fsa/OmniVoice"
FOLDER = "omnivoice"                    # workspace/pretrained/<FOLDER>/: the base in the hub's layout
CODEC_FOLDER = "audio_tokenizer"        # the Higgs Audio v2 codec, in its own folder with its own licence
BASE_FILES = ("config.json", "model.safetensors", "tokenizer_config.json")
CODEC_FILES = ("config.json", "model.safetensors")
SAMPLE_RATE = 24_000
FRAMES_PER_S = 25                       # codec frames a second (hop 960 at 24 kHz), 8 codebooks each
CODEBOOKS = 8
PARAMETERS_M = 613                      # Qwen3-0.6B backbone + audio embeddings and heads
SIZE_MB = 3_260                         # model.safetensors 2.45 GB + the codec 0.81 GB
AMHARIC_HOURS = 12.83                   # of its 581k training hours (646 languages)
LANGUAGE = "am"                         # its language id for Amharic

BASE_LICENCE = ("OmniVoice weights (k2-fsa/OmniVoice): Creative Commons Attribution-NonCommercial 4.0 "
                "(CC-BY-NC-4.0, from its training data, Emilia), non-commercial use only; its code is Apache-2.0")
CODEC_LICENCE = ("Higgs Audio v2 tokenizer (its audio_tokenizer/, by Boson AI): Boson Higgs Audio 2 Community License: "
                 "keep its attribution notice; a service with more than 100,000 monthly active users needs an "
                 "expanded licence from Boson AI; its outputs may not be used to improve other large language models")
LICENCE = f"{BASE_LICENCE}. {CODEC_LICENCE}"
SHORT_LICENCE = "CC-BY-NC-4.0 + Boson Higgs Audio 2 Community License, non-commercial use only"
DESCRIPTION = ("OmniVoice: a 613 M-parameter multilingual voice that already speaks Amharic (12.8 of its 581k hours). "
               "Clones a voice from a 5-15 s clip with no training; fine-tunes on a GPU from minutes to hours of speech.")
GUIDE = ("any amount of speech: a voice from one clip with no training, a fine-tune from minutes of speech on a GPU "
         "(613 M parameters; CC-BY-NC-4.0 + Boson's codec licence)")

# the published fine-tuning recipe (OmniVoice's README, examples/finetune)
FINE_TUNE_LR = 1e-5
FINE_TUNE_STEPS = (2_000, 5_000)
BATCH_AUDIO_TOKENS = 8_192              # audio tokens a GPU a step
WEIGHT_DECAY = 0.01
WARMUP_SHARE = 0.01
CLIP_NORM = 1.0
# its training processor's draws (omnivoice.training.config defaults)
PROMPT_SHARE = (0.0, 0.3)               # the share of a clip given as the prompt
MASK_SHARE = (0.0, 1.0)                 # the share of the rest masked
DROP_CONDITION = 0.1                    # no text and no prompt: what classifier-free guidance needs
LANGUAGE_SHARE = 0.8                    # the language id given
# <|denoise|> before a reference clip when speaking, as the package's generate does by default. Its recipe trains it
# only on prompts it added noise to (clean_start_token_idx) and fine-tunes on plain clips without it, so a fine-tune
# here never sees it either; the base learnt from it to speak clean from a noisy reference, which a curator's phone
# clips are. Kept on purpose, for clip voices and fine-tunes alike (speech.py says more).
DENOISE = True

PROMPT_SECONDS = (3.0, 20.0)            # a reference clip outside this is refused (the package trims above 20 s)
GOOD_PROMPT_SECONDS = (5.0, 15.0)
NEEDS_BASE = (f"The OmniVoice engine starts from the public OmniVoice base: pass --init {HUB_ID} --accept-licence "
              f"(about {SIZE_MB / 1000:.1f} GB, downloaded once into workspace/pretrained/{FOLDER}/), --init FOLDER "
              "holding the hub's files (config.json, model.safetensors, the tokenizer files and audio_tokenizer/), "
              "or --init RUN (or VOICE) to continue one of this studio's OmniVoice fine-tunes.")
OFFLINE = (f"This machine cannot reach the Hugging Face hub and this workspace holds no OmniVoice base: on a machine "
           f"that can, download https://huggingface.co/{HUB_ID} whole (its audio_tokenizer/ folder included), copy it "
           f"into the workspace's pretrained/{FOLDER}/ folder and try again.")

# No TRANSFER (utils/transfer.py): the tiny base made here (`bench/transfer.py --family omnivoice`) has a codec of random
# codebooks, so it is scored by held-out token loss, not MCD, and what it knew is mostly that codec's token statistics:
# it says nothing of what the 613 M base buys on Amharic; nothing is said until that is measured (`--size full`, a GPU).
