"""The MMS-TTS family: fine-tune Meta's Amharic VITS voice (facebook/mms-tts-amh, 36 M parameters, 16 kHz) on an
hour or two of one speaker, on the shared training loop as a GAN (adapter.py), built on transformers' VitsModel
(models/vits_training.py adds the training forward, models/vits_discriminator.py the discriminators), reading text
through uroman as the base was trained (text.py), its weights from the hub or a folder (base.py), its speech
(speech.py). This module answers what the studio asks of a model family (utils/families.py); importing it needs no
torch."""
from utils.family_options import MAS, declare
from utils.mms.about import (BASE_UPLOAD, DESCRIPTION, GUIDE, HUB_ID, LICENCE, NEEDS_BASE, SHORT_LICENCE,  # noqa: F401
                             SIZE_MB)
from utils.mms.text import DICTIONARY_NOTE  # noqa: F401  (what the pronunciation dictionary can do for it)

NAME = "mms"
TITLE = "MMS-TTS"
SAMPLE_RATE = 16_000
SAMPLE_STEPS = 1           # no sampler: VITS makes the sound in one pass
USES_STEPS = False         # the Inference tab hides the steps slider
USES_TEMPERATURE = True    # the prior's noise scale (VITS's noise_scale, 0.667 by default)
USES_VOCODER = False       # its own HiFi-GAN decoder makes the waveform: no vocoder is loaded, exported or asked for
ASKS_LICENCE = True        # Meta's weights are CC-BY-NC: the curator says yes before the download
HAS_SIZES = False          # the base's size
OPTIONS = declare(NAME, mas=MAS())  # its own training settings (utils/family_options.py): its aligner
ONNX = True               # voice.onnx: one graph from ids to the waveform
STEPS_HELP = "not used: a VITS voice makes its sound in one pass"
BASE_HELP = ("empty: Meta's Amharic voice (facebook/mms-tts-amh, downloaded once with its discriminator); or a folder in "
             "the workspace holding the same files, or one of your MMS runs or voices to continue")


def default_init(preset: str) -> str:
    return HUB_ID


def machine_verdict(report) -> tuple[bool, str]:
    """Any machine: 36 M parameters fine-tune on a free T4, and (slowly) on a CPU."""
    if report.gpus:
        g = min(report.gpus, key=lambda x: x.memory_gb)
        return True, (f"{g.name}: the 36 M-parameter base and its discriminators hold ~1.6 GiB with their optimizer "
                      "state (an estimate), the rest is for ~16 clips a step; the public recipe (finetune-hf-vits) "
                      "adapted a speaker from 80-150 clips in about 20 minutes on one GPU")
    from utils.mms.expectations import CPU_S_PER_CLIP

    return True, (f"no GPU: it trains on the CPU, slowly: {CPU_S_PER_CLIP:g} s of training a clip at the real size on "
                  f"2 cores, so a pass over an hour of speech (~600 clips) takes "
                  f"~{600 * CPU_S_PER_CLIP / 60:.0f} minutes or more")


def base_verdict(ws) -> tuple[bool, str]:
    """Whether Meta's base can be had here (in the workspace, the hub's cache, or from the hub), and the line that
    says it."""
    from utils.mms.base import obtainable

    return obtainable(ws)


def import_base(ws, files):
    """Meta's base from uploaded files (BASE_UPLOAD) into the workspace, where every MMS run looks first."""
    from utils.mms.base import import_base as put

    return put(ws, files)


def check_request(cfg, report=None) -> None:
    """Refuse, before any data is read, what the MMS engine cannot do, saying what to pass instead."""
    from utils.events import StudioError

    if not cfg.init and not _resumes(cfg):
        raise StudioError(NEEDS_BASE)


def _resumes(cfg) -> bool:
    from utils.training.checkpoint import resume_point
    from utils.workspace import Workspace

    if not cfg.run or cfg.resume == "none":
        return False
    return resume_point(cfg.resume, Workspace.open(cfg.workspace).run_dir(cfg.run) / "checkpoints") is not None


def prepare(ws, cfg, accept_licence: bool = False) -> None:
    """Settle a new run's start: the base on the hub (licence accepted), in a folder, or a fine-tune to continue."""
    if cfg.init:
        from utils.mms.base import local_base

        cfg.init, cfg.licence_accepted = local_base(ws, cfg.init, accept_licence or bool(cfg.licence_accepted))


def memory_plan(cfg):
    from utils.mms.adapter import MmsAdapter

    return MmsAdapter.memory_plan(cfg)


def guidance(ws, cfg) -> list[str]:
    """Where it starts and under which licence, and what a fine-tune of this much speech takes here."""
    from utils.mms.expectations import guidance as expect

    return expect(ws, cfg)


def train(cfg, report=None) -> dict:
    from utils.mms.adapter import train as run

    return run(cfg, report)


def load(folder, device: str = "cpu"):
    from utils.mms.speech import load_mms

    return load_mms(folder, device)


def tokenizer(config: dict):
    from utils.mms.text import MmsText, MmsTokenizer

    return MmsTokenizer(MmsText.from_dict(config["text"]))


def export(folder, vocoder, steps: int) -> list[str]:
    """voice.onnx (text ids -> 16 kHz waveform) beside the exported weights; no vocoder, no sampler steps."""
    from utils.mms.onnx import export_onnx

    return export_onnx(folder, vocoder, steps)
