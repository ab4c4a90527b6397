"""The F5-TTS family: fine-tune a pretrained F5 model (the public v1 Base, another F5-format base, or one of this
studio's F5 fine-tunes) for Amharic on the shared training loop (adapter.py), with its text table (text.py), its
weights (base.py, hub.py) and its speech (speech.py). This module answers what the studio asks of a model family
(utils/families.py); importing it needs no torch: the UI reads names, descriptions and licences from here."""
from utils.family_options import FRONTEND, PROMPT, declare
from utils.f5.about import (DESCRIPTION, FIXED_GB, HUB_ID, LICENCE, NEEDS_BASE, SAMPLE_STEPS, SHORT_LICENCE,  # noqa: F401
                            SIZE_MB, SMOKE_TEST)
from utils.f5.request import check_request, machine_verdict  # noqa: F401  (the family's answers)

NAME = "f5"
TITLE = "F5-TTS"
SAMPLE_RATE = 24_000
USES_STEPS = True          # steps of its flow sampler
USES_TEMPERATURE = False   # its starting noise is always unit: the Inference tab hides the setting
USES_VOCODER = True        # it makes mels: a vocoder (or Griffin-Lim) makes the sound
ASKS_LICENCE = True        # the base's weights are CC-BY-NC: the curator says yes before the download
HAS_SIZES = False          # the base's size, not a choice (the tiny random F5 is a CLI smoke test)
OPTIONS = declare(NAME, prompt=PROMPT(), frontend=FRONTEND(("phoneme", "char")))  # its own settings
ONNX = False
STEPS_HELP = (f"more: cleaner speech, made more slowly; {SAMPLE_STEPS} is F5-TTS's own default (steps of its flow "
              "sampler)")
GUIDE = "many hours of speech and a big GPU (fine-tunes a 337 M-parameter base; CC-BY-NC-4.0)"
DICTIONARY_NOTE = ""       # the pronunciation dictionary's phonemes reach it as they are
BASE_UPLOAD = ""           # its 1.35 GB base is not taken through the browser (the offline remedy names its folder)
BASE_HELP = ("empty: the public base; or another F5 model on the hub (owner/repo[:folder]), a folder in the workspace "
             "with its model file and vocab.txt, or one of your F5 runs or voices to continue")


def default_init(preset: str) -> str:
    """What a run started without a checkpoint begins from: the public base (the tiny random F5 from zero)."""
    return "" if preset == "tiny" else HUB_ID


def base_verdict(ws) -> tuple[bool, str]:
    """Whether the public base can be had here (in the workspace, the hub's cache, or from the hub); "" when it can."""
    from utils.f5.hub import obtainable

    return obtainable(ws.root)


def prepare(ws, cfg, accept_licence: bool = False) -> None:
    """Settle a new run's start: the base on the hub (licence accepted), in a folder, or a fine-tune to continue;
    the reference clip named exists."""
    from utils.family_options import check_prompt

    if cfg.init:
        from utils.f5.base import local_base

        cfg.init, cfg.licence_accepted = local_base(ws, cfg.init, accept_licence or bool(cfg.licence_accepted))
    check_prompt(ws, cfg, "F5")


def memory_plan(cfg):
    """Its memory for the batch guess (utils.hardware.MemoryPlan), as its adapter plans it."""
    from utils.f5.adapter import F5Adapter

    return F5Adapter.memory_plan(cfg)


def guidance(ws, cfg) -> list[str]:
    """What to expect of a fine-tune before Start (utils/f5/expectations.py): the hours against what a new language
    needed, the time on this machine, the disk."""
    if not cfg.init:
        return []  # the tiny random F5: a smoke test
    from utils.f5.base import speaks_amharic
    from utils.f5.expectations import guidance as expect
    from utils.f5.hub import HubBase, base_licence

    hub = HubBase.parse(cfg.init)
    start = (f"It starts from {hub.what}, under its licence: {base_licence(hub)}." if hub is not None else
             f"It starts from {cfg.init} (its licence travels with it).")
    return [start, *expect(ws, cfg.dataset, cfg.max_steps, keep_checkpoints=cfg.keep_checkpoints,
                           speaks_amharic=speaks_amharic(ws, cfg.init))]


def train(cfg, report=None) -> dict:
    from utils.f5.adapter import train as run

    return run(cfg, report)


def load(folder, device: str = "cpu"):
    """(speaker model with the Voice's calls, config) of an F5 checkpoint or voice folder."""
    from utils.f5.speech import load_f5

    return load_f5(folder, device)


def tokenizer(config: dict):
    from utils.f5.speech import F5Tokenizer
    from utils.f5.text import F5Text

    return F5Tokenizer(F5Text.from_dict(config["text"]))


def export(folder, vocoder, steps: int) -> list[str]:
    """What an exported F5 voice adds to its weights, config and licence: nothing (no ONNX graph of the sampler)."""
    from utils.events import StudioError

    raise StudioError("ONNX export is for Matcha voices; an F5 voice is exported as PyTorch weights (untick ONNX).")
