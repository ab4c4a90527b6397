"""The F5-TTS engine: fine-tune the public pretrained multilingual base for Amharic (utils/f5/adapter.py on the
shared training engine), its text table (text.py) and its weights (base.py). Importing this package needs no torch:
the UI reads the licence and the engines' one-line descriptions from here, the CLI what the engine refuses."""
from utils.events import StudioError

HUB_ID = "SWivid/F5-TTS"
LICENCE = ("F5-TTS v1 Base weights by SWivid et al.: Creative Commons Attribution-NonCommercial 4.0 "
           "(CC-BY-NC-4.0), non-commercial use only; code MIT")
SHORT_LICENCE = "CC-BY-NC-4.0, non-commercial use only"
SIZE_MB = 1350
SAMPLE_STEPS = 32  # steps of F5-TTS's flow sampler by default (its own inference default)
ENGINES = {
    "matcha": "Matcha: a small model trained from zero. Fast, runs on any machine (a CPU too); a clear but plain voice.",
    "f5": "F5-TTS: fine-tunes a large pretrained voice model (337 M parameters). A more natural voice from a few "
          "hours of speech; needs a GPU.",
}
NEEDS_BASE = ("The F5 engine fine-tunes the pretrained base: pass --init SWivid/F5-TTS --accept-licence (the public "
              "v1 Base, downloaded once), or --init FOLDER holding its model file and vocab.txt. From zero it trains "
              "only the tiny test configuration (--preset tiny).")


def check_request(cfg) -> None:
    """Refuse, before any data is read, what the F5 engine cannot do, saying what to pass instead. The fine-tuning
    modes are Matcha's (its text encoder, its speaker table); F5 has neither, and running a full fine-tune under
    another mode's name would be a silent surprise."""
    if cfg.finetune_mode != "full":
        raise StudioError(f"finetune_mode {cfg.finetune_mode} is for Matcha checkpoints (it freezes Matcha's text "
                          "encoder or trains only its speaker table); the F5 engine always fine-tunes the whole "
                          "model: leave it at full (drop --finetune-mode).")
    if not (cfg.init or cfg.preset == "tiny" or _resumes(cfg)):
        raise StudioError(NEEDS_BASE)


def _resumes(cfg) -> bool:
    """Whether the trainer will continue a checkpoint (whose own model then counts, not --init or --preset)."""
    from utils.training.checkpoint import resume_point
    from utils.workspace import Workspace

    if cfg.resume == "auto" and not cfg.run:
        return False  # a new run, named later: nothing to continue yet
    folder = Workspace.open(cfg.workspace).run_dir(cfg.run) / "checkpoints" if cfg.run else None
    return resume_point(cfg.resume, folder) is not None
