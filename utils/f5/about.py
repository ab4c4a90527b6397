"""What the F5 family is, in constants: the public base, its licence, its size, its sampler's steps, what it needs of
a GPU. Imported by the family's modules (and needs nothing: no torch)."""

HUB_ID = "SWivid/F5-TTS"
LICENCE = ("F5-TTS v1 Base weights by SWivid et al.: Creative Commons Attribution-NonCommercial 4.0 "
           "(CC-BY-NC-4.0), non-commercial use only; code MIT")
SHORT_LICENCE = "CC-BY-NC-4.0, non-commercial use only"
SIZE_MB = 1350
SAMPLE_STEPS = 32  # steps of F5-TTS's flow sampler by default (its own inference default)
DESCRIPTION = ("F5-TTS: fine-tunes a large pretrained voice model (337 M parameters). A more natural voice from a few "
               "hours of speech; needs a GPU.")
FIXED_GB = 7.0  # the 337 M-parameter base on a GPU: fp32 weights, gradients, AdamW's two moments, the EMA copy
FRAME_FACTOR = 8.0  # 22 blocks of width 1024 over every frame: ~8x Matcha base's activation bytes a frame, so an
#                     80 GB card holds ~31000 frames beside FIXED_GB, near the 38400 a GPU of the published recipe took
NEEDS_BASE = ("The F5 engine fine-tunes the pretrained base: pass --init SWivid/F5-TTS --accept-licence (the public "
              "v1 Base, downloaded once), --init owner/repo[:folder] for another F5 model on the hub, --init FOLDER "
              "holding its model file and vocab.txt, or --init RUN (or VOICE) to continue one of this studio's F5 "
              "fine-tunes. From zero it trains only the tiny test configuration (--preset tiny).")


SMOKE_TEST = ("Only the tiny random F5 runs on this machine, as a smoke test of the set-up (no usable voice): choose "
              "the model size tiny and no base to start from (on the command line: python app.py train --engine f5 "
              "--preset tiny, without --init).")
BASE_PARAMETERS = 100_000_000  # a base this large is the 337 M-parameter F5-TTS v1 Base (the other size is tiny)

# No TRANSFER (utils/transfer.py): nothing is said to a curator of what an F5 fine-tune buys until the public base is
# measured (`bench/transfer.py --family f5 --size full`, a GPU). The tiny base made here says nothing of it: after 10
# steps it led random weights by 0.66 dB (6 seeds), after 100 (`--quick`, a 1,500-step base of 15.9 dB) it trailed
# them, 15.99 against 15.59 dB, since a from-zero start trains at 7.5x a fine-tune's rate (bench/RESULTS.md,
# "Fine-tuning transfers").
