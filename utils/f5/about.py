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

from utils.transfer import Measured  # noqa: E402  (no torch: a dataclass)

# bench/transfer.py --family f5 --size test --seeds 1 2 3 4 5 1234 (bench/RESULTS.md, "Fine-tuning
# transfers"): a tiny F5 base made here on other languages against the same model from random weights; what a
# fine-tune buys, said before Start (utils/transfer.py)
TRANSFER = Measured(steps=10, reached_at=0, pretrained_db=15.89, scratch_db=16.55, speech_s=17.3,
                    where="a 40-step tiny base on a 2-core CPU, mean of 6 seeds")
