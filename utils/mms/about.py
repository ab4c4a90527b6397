"""What the MMS-TTS family is, in constants: its base on the hub, the base's licence, what a fine-tune costs and the
published recipe's settings. Needs nothing (no torch): the UI and the CLI read it before anything loads."""

HUB_ID = "facebook/mms-tts-amh"         # the generator: transformers' VitsModel, tokenizer files beside it
HUB_FILES = ("config.json", "vocab.json", "tokenizer_config.json")  # + the weights (WEIGHTS, else WEIGHTS_BIN)
WEIGHTS, WEIGHTS_BIN = "model.safetensors", "pytorch_model.bin"
DISCRIMINATOR_HUB = ("facebook/mms-tts", "full_models/amh/D_100000.pth")  # the original VITS training checkpoint
DISCRIMINATOR = "discriminator.safetensors"  # its weights as the workspace keeps them (no optimizer state, no pickle)
FOLDER = "mms-tts-amh"                  # workspace/pretrained/<FOLDER>/
SAMPLE_RATE = 16_000
PARAMETERS_M = 36                       # the generator; the discriminator has 47 M more (training only)
SIZE_MB = 145                           # the generator's fp32 weights
LICENCE = ("MMS-TTS Amharic (facebook/mms-tts-amh) weights by Meta AI: Creative Commons Attribution-NonCommercial "
           "4.0 (CC-BY-NC-4.0), non-commercial use only")
SHORT_LICENCE = "CC-BY-NC-4.0, non-commercial use only"
DESCRIPTION = ("MMS-TTS: fine-tunes Meta's small Amharic voice (VITS, 36 M parameters, 16 kHz). A first voice from "
               "an hour or two of one speaker, on any GPU or a CPU.")

# finetune-hf-vits's published example (speaker adaptation of an MMS checkpoint from 80-150 clips)
FINE_TUNE_LR = 2e-5
# No TRANSFER (utils/transfer.py): the base a curator fine-tunes is Meta's, which speaks Amharic already; what a tiny
# base made here from other languages bought (`bench/transfer.py --family mms --quick`: 2.2 dB ahead of random weights
# after 100 steps, bench/RESULTS.md) says nothing of that base, so nothing is said until it is measured (`--size full`).
BETAS = (0.8, 0.99)
EPS = 1e-9                              # VITS's AdamW epsilon
CLIPS_PER_STEP = 16                     # its batch; the studio batches ~that many clips of the median length
CPU_CLIPS_PER_STEP = 4                  # on a CPU: a step of seconds rather than minutes (bench/mms_step.py)
LOSS_WEIGHTS = {"mel": 35.0, "kl": 1.5, "duration": 1.0, "adversarial": 1.0, "discriminator": 3.0,
                "feature_matching": 1.0}
SEGMENT_FRAMES = 32                     # the decoder's training window: 32 frames = 8192 samples (0.5 s), as VITS

NO_DISCRIMINATOR = ("no discriminator weights were found beside the base, so the discriminators start from random "
                    "weights: the first few hundred steps are a slower, less stable start (an untrained critic "
                    "first has to learn what real speech sounds like, and its early gradients can roughen the "
                    "voice). Put Meta's D_100000.pth (facebook/mms-tts, full_models/amh/) into the base's folder to "
                    "start from the trained discriminator")
NEEDS_BASE = (f"The MMS engine fine-tunes Meta's Amharic MMS-TTS voice: pass --init {HUB_ID} --accept-licence (about "
              f"{SIZE_MB} MB, downloaded once into workspace/pretrained/{FOLDER}/), --init FOLDER holding the same "
              "files (config.json, model.safetensors or pytorch_model.bin, vocab.json, tokenizer_config.json, and "
              "optionally D_100000.pth), or --init RUN (or VOICE) to continue one of this studio's MMS fine-tunes.")
BASE_UPLOAD = ("config.json, vocab.json, tokenizer_config.json and model.safetensors (or pytorch_model.bin) from "
               f"https://huggingface.co/{HUB_ID}, and optionally D_100000.pth (facebook/mms-tts, full_models/amh/, "
               "its discriminator), copied from a machine that has them")  # what the Training tab's upload box takes
OFFLINE = ("This machine cannot reach the Hugging Face hub and this workspace holds no MMS-TTS base, so no MMS run can "
           f"start: under *MMS-TTS base files* on the Training tab, upload {BASE_UPLOAD} (or pass --init with a "
           "folder holding them).")
GUIDE = "an hour or two of one speaker, any GPU or a CPU (fine-tunes Meta's Amharic voice; CC-BY-NC-4.0)"
