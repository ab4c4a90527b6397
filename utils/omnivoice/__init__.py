"""The OmniVoice family: k2-fsa's multilingual voice (613 M parameters, 24 kHz, 12.8 hours of Amharic among its
581k) speaks Amharic in the voice of a short clip with no training (speech.py), and fine-tunes on the shared
training engine (adapter.py) from the codec's tokens of a dataset (tokens.py). The package `omnivoice` does the
model's forward and generation; its torchaudio stays in a folder of its own (runtime.py). This module answers what
the studio asks of a model family (utils/families.py); importing it needs no torch."""
from utils.family_options import PROMPT, declare
from utils.omnivoice.about import DESCRIPTION, GUIDE, HUB_ID, LICENCE, NEEDS_BASE, SHORT_LICENCE, SIZE_MB  # noqa: F401

NAME = "omnivoice"
TITLE = "OmniVoice"
SAMPLE_RATE = 24_000
SAMPLE_STEPS = 32          # the package's decoding steps
CPU_SAMPLE_STEPS = 8       # on a 2-core CPU the released base takes 38 s a 4.5 s sentence at 8, 144 s at 32
                           # (bench/omnivoice_speak.py): fewer there
USES_STEPS = True
USES_TEMPERATURE = False   # the package's sampling temperatures are kept as published
USES_VOCODER = False       # its codec makes the waveform
ASKS_LICENCE = True        # CC-BY-NC weights and Boson's codec licence: the curator says yes before the download
HAS_SIZES = False
OPTIONS = declare(NAME, prompt=PROMPT())  # its own training settings (utils/family_options.py)
ONNX = False
VOICE_FILES = ("prompt.wav",)  # what a voice folder carries besides its weights and config (export copies them)
STEPS_HELP = ("passes over the sentence: more is cleaner and slower; 32 is OmniVoice's own default on a GPU, 8 here "
              "on a CPU (about 8 s of computing a second of speech on 2 cores at 8, 4 times that at 32)")
DICTIONARY_NOTE = ("OmniVoice reads the Ethiopic letters as written: the pronunciation dictionary's phonemes do not "
                   "reach it (numbers and abbreviations are still spelled out)")
BASE_UPLOAD = ""           # 3.3 GB is not taken through the browser: the offline remedy names the folder
BASE_HELP = ("empty: the public OmniVoice base (k2-fsa/OmniVoice, downloaded once); or a folder in the workspace in "
             "the hub's layout, or one of your OmniVoice runs or voices to continue")


def default_init(preset: str) -> str:
    return HUB_ID


def machine_verdict(report) -> tuple[bool, str]:
    from utils.omnivoice.expectations import machine_verdict as verdict

    return verdict(report)


def base_verdict(ws) -> tuple[bool, str]:
    from utils.omnivoice.base import obtainable
    from utils.omnivoice.runtime import installed, missing_message

    if not installed():
        return False, missing_message()
    return obtainable(ws)


def check_request(cfg, report=None) -> None:
    from utils.omnivoice.expectations import check_request as check

    check(cfg, report)


def prepare(ws, cfg, accept_licence: bool = False) -> None:
    from utils.omnivoice.expectations import prepare as settle

    settle(ws, cfg, accept_licence)


def memory_plan(cfg):
    from utils.omnivoice.adapter import OmniVoiceAdapter

    return OmniVoiceAdapter.memory_plan(cfg)


def guidance(ws, cfg) -> list[str]:
    from utils.omnivoice.expectations import guidance as expect

    return expect(ws, cfg)


def train(cfg, report=None) -> dict:
    from utils.omnivoice.adapter import train as run

    return run(cfg, report)


def load(folder, device: str = "cpu"):
    from utils.omnivoice.speech import load_omnivoice

    return load_omnivoice(folder, device)


def tokenizer(config: dict):
    from utils.omnivoice.speech import OmniVoiceText

    return OmniVoiceText()


def export(folder, vocoder, steps: int) -> list[str]:
    from utils.events import StudioError

    raise StudioError("ONNX export is not offered for OmniVoice voices (its iterative decoding and codec stay in "
                      "PyTorch): untick ONNX.")
