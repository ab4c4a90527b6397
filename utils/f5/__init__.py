"""The F5-TTS engine: fine-tune the public pretrained multilingual base for Amharic (utils/f5/adapter.py on the
shared training engine), its text table (text.py) and its weights (base.py). Importing this package needs no torch:
the UI reads the licence and the engines' one-line descriptions from here."""

HUB_ID = "SWivid/F5-TTS"
LICENCE = ("F5-TTS v1 Base weights by SWivid et al.: Creative Commons Attribution-NonCommercial 4.0 "
           "(CC-BY-NC-4.0), non-commercial use only; code MIT")
SHORT_LICENCE = "CC-BY-NC-4.0, non-commercial use only"
SIZE_MB = 1350
ENGINES = {
    "matcha": "Matcha: a small model trained from zero. Fast, runs on any machine (a CPU too); a clear but plain voice.",
    "f5": "F5-TTS: fine-tunes a large pretrained voice model (337 M parameters). A more natural voice from a few "
          "hours of speech; needs a GPU.",
}
