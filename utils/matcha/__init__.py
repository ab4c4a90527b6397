"""The Matcha family: a small non-autoregressive model (models/matcha.py) trained from zero, or fine-tuned from one of
this studio's Matcha checkpoints, on the shared training loop (utils/matcha/adapter.py's MatchaAdapter). It runs
on any machine, and its weights are the curator's own: the one voice free of a non-commercial licence. This module
answers what the studio asks of a model family (utils/families.py); importing it needs no torch."""
from __future__ import annotations

from utils.family_options import AUTO, FRONTEND, MAS, declare, setting
from utils.transfer import Measured

NAME = "matcha"
TITLE = "Matcha"
DESCRIPTION = "Matcha: a small model trained from zero. Fast, runs on any machine (a CPU too); a clear but plain voice."
LICENCE = ""               # weights trained here from zero: the curator's own
SHORT_LICENCE = ""
SAMPLE_STEPS = 10          # Euler steps of the flow decoder (Matcha-TTS's default)
SAMPLE_RATE = 24_000
USES_STEPS = True          # Euler steps of its flow decoder
USES_TEMPERATURE = True
USES_VOCODER = True        # it makes mels: a vocoder (or Griffin-Lim) makes the sound
ASKS_LICENCE = False
HAS_SIZES = True           # tiny, small, base
ONNX = True
STEPS_HELP = "more: cleaner speech, made more slowly; 4-10 is usual (ODE steps of the flow decoder)"
GUIDE = "when the voice must be free of a non-commercial licence (trained from zero: many hours of speech)"
DICTIONARY_NOTE = ""       # the pronunciation dictionary's phonemes reach it as they are
BASE_UPLOAD = ""           # no pretrained base, nothing to upload
# `bench/transfer.py --family matcha --quick` (bench/RESULTS.md, "Fine-tuning transfers"): a tiny checkpoint trained
# here on other languages (300 steps, held-out 9.44 dB), continued on Amharic, against the same model from random
# weights; said before Start of a run from a checkpoint (utils/transfer.py)
TRANSFER = Measured(steps=100, reached_at=0, pretrained_db=8.08, scratch_db=12.40, speech_s=49.6,
                    where="tiny models on a 2-core CPU")

OPTIONS = declare(
    NAME,
    finetune_mode=setting("full", "with --init: full | freeze_encoder | new_speaker (only speaker rows train)",
                          choices=["full", "freeze_encoder", "new_speaker"]),
    blanks=setting(AUTO, "a blank symbol between every two input symbols (Matcha-TTS's add_blank): true | false | auto "
                         "(on: 1.7-2.1 dB lower held-out MCD, the distance to real speech, in the studio's A/B test); a checkpoint's own choice wins"),
    frontend=FRONTEND(),
    mas=MAS(),
    parts=setting("all", "the parts that learn: all | aligner (only the text encoder and its duration predictor, the "
                         "decoder skipped: the transcript check's own aligner, whose steps are ~9x faster; it cannot speak, so a voice "
                         "run is refused it)",
                  choices=["all", "aligner"]),
)


def auto_settings(cfg) -> dict:
    """What "auto" means for its learning rate (by size) and blanks (utils/matcha/settings.py): the studio's default,
    which a family without its own auto_settings trains with too."""
    from utils.matcha.settings import auto_settings

    return auto_settings(cfg)

def default_init(preset: str) -> str:
    return ""  # from zero


def machine_verdict(report) -> tuple[bool, str]:
    return True, ("any machine: a CPU trains the tiny size in minutes, a GPU the larger ones 10-100x faster"
                  if not report.gpus else "a GPU trains it 10-100x faster than a CPU")


def base_verdict(ws) -> tuple[bool, str]:
    return True, ""  # trained from zero: no base to get


def check_request(cfg, report=None) -> None:
    """Every mode and size runs on any machine (slowly on a CPU); only a voice of the aligner alone is refused: its
    decoder never learns, so it could neither be scored nor speak."""
    from utils.events import StudioError

    if cfg.family_options.parts == "aligner" and cfg.evaluate:
        raise StudioError("Matcha's --parts aligner trains only the text encoder and its durations (the transcript "
                          "check's aligner, on the Dataset tab): a run of it cannot speak, so it cannot be a voice. "
                          "Leave --parts out (all) to train a voice.")


def prepare(ws, cfg, accept_licence: bool = False) -> None:
    """A checkpoint to fine-tune must be inside the workspace."""
    if cfg.init:
        cfg.init = str(ws.inside(cfg.init))


def memory_plan(cfg):
    """Its memory for the batch guess (utils.hardware.MemoryPlan), as its adapter plans it."""
    from utils.matcha.adapter import MatchaAdapter

    return MatchaAdapter.memory_plan(cfg)


def guidance(ws, cfg) -> list[str]:
    from utils.matcha.expectations import guidance as expect

    return expect(ws, cfg)


def train(cfg, report=None) -> dict:
    from utils.matcha.adapter import train as run

    return run(cfg, report)


def load(folder, device="cpu"):
    """(MatchaTTS in eval mode on `device`, config) of a checkpoint or voice folder (utils/matcha/checkpoint.py)."""
    from utils.matcha.checkpoint import load_matcha

    return load_matcha(folder, device)


def tokenizer(config: dict):
    from utils.text.tokenizers import Tokenizer

    frontend = config.get("frontend") or {}
    return Tokenizer.from_dict(frontend.get("tokenizer", frontend))


def export(folder, vocoder, steps: int) -> list[str]:
    """acoustic.onnx (and vocoder.onnx with a vocoder) beside the exported weights."""
    from utils.matcha.onnx import export_onnx

    return export_onnx(folder, vocoder, steps)
