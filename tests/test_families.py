"""The family seam: every registered family answers the contract (utils/family_contract.py), a package that lacks
a member is refused by name when it registers, and a new family is one package plus one registry line: a throw-away
family (Matcha's model under another name) trains on the CPU through the service the CLI uses, speaks and exports."""
from __future__ import annotations

import importlib
import json
import sys
import textwrap

import pytest

from tests.helpers import make_dataset
from utils import families
from utils.events import StudioError
from utils.family_contract import BUILT, Family, TrainingAdapter, members, missing

# The smallest family: Matcha's model, adapter and loader under another name (CONTRIBUTING.md's worked example).
ECHO = '''
"""Echo: Matcha's model under another name, the smallest family the studio takes."""
from utils.matcha import (OPTIONS, base_verdict, check_request, default_init, guidance, load,  # noqa: F401
                          machine_verdict, memory_plan, prepare, tokenizer, train)

NAME = "echo"
TITLE = "Echo"
DESCRIPTION = "Echo: Matcha's model under another name."
GUIDE = "testing the family seam"
LICENCE = SHORT_LICENCE = DICTIONARY_NOTE = BASE_UPLOAD = ""
SAMPLE_RATE, SAMPLE_STEPS, STEPS_HELP = 24_000, 2, "steps of the flow decoder"
USES_STEPS = USES_TEMPERATURE = USES_VOCODER = HAS_SIZES = True
ASKS_LICENCE = ONNX = False


def export(folder, vocoder, steps):
    (folder / "echo.txt").write_text(f"exported by {NAME} with {steps} steps")
    return ["echo.txt"]
'''


def register(tmp_path, monkeypatch, name: str, source: str) -> None:
    """A family package `name` in a temporary folder, importable and in FAMILIES."""
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text(textwrap.dedent(source), encoding="utf-8")
    # sys.path by hand: monkeypatch.syspath_prepend calls pkg_resources, which a newer setuptools left as an empty
    # namespace once an earlier test imported it (CI failed there)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    importlib.invalidate_caches()
    monkeypatch.setitem(families.FAMILIES, name, name)


def test_every_registered_family_answers_the_whole_contract():
    for name in families.names():
        assert missing(families.get(name)) == [], name
        assert families.get(name).NAME == name
    assert {"NAME", "USES_VOCODER", "train", "load", "export"} <= set(members(Family))
    assert {"build", "losses", "evaluate", "modules", "kind"} <= set(members(TrainingAdapter))


def test_a_family_that_lacks_a_member_is_refused_by_name_when_it_registers(tmp_path, monkeypatch):
    register(tmp_path, monkeypatch, "no_tokenizer_family", ECHO.replace("memory_plan, prepare, tokenizer, train",
                                                                        "memory_plan, prepare, train"))
    with pytest.raises(StudioError, match="no_tokenizer_family.*: tokenizer\\.$"):
        families.get("no_tokenizer_family")
    # a family that asks for its base's licence answers what the licence box and the base box say
    register(tmp_path, monkeypatch, "licensed_family", ECHO.replace("ASKS_LICENCE = ONNX", "ONNX")
             + "ASKS_LICENCE = True\n")
    with pytest.raises(StudioError, match="licensed_family.*: BASE_HELP, SIZE_MB\\.$"):
        families.get("licensed_family")


def test_the_engine_refuses_an_adapter_that_lacks_a_member_by_name_before_and_after_build(tmp_path):
    from types import SimpleNamespace

    from tests.test_training_loop import LineAdapter
    from utils.training.loop import TrainingLoop, drain

    without_score = SimpleNamespace(**{n: None for n in members(TrainingAdapter) if n not in BUILT + ("score",)})
    with pytest.raises(TypeError, match="lacks what the loop asks of a training adapter.*: score\\.$"):
        TrainingLoop(without_score)

    class Unbuilt(LineAdapter):
        def build(self, ctx):
            self.ctx = ctx  # sets no modules, optimizers or phases

    with pytest.raises(TypeError, match="Unbuilt lacks .*: modules, optimizers, phases\\.$"):
        drain(TrainingLoop(Unbuilt(tmp_path / "run"), echo=False).run())


def test_a_family_registered_after_the_config_was_imported_is_one_of_train_engines_choices(tmp_path, monkeypatch):
    """`app.py train --engine` reads the registry when its parser is made, not when utils.training.config was
    imported: a family added later is offered, not refused."""
    import app
    from utils.training import config

    assert "echo" not in dict((n, c) for n, _, _, c in config.cli_fields())["engine"]
    register(tmp_path, monkeypatch, "echo", ECHO)
    assert dict((n, c) for n, _, _, c in config.cli_fields())["engine"] == families.names()
    args = app.build_parser().parse_args(["train", "--engine", "echo", "--dataset", "am"])
    assert args.engine == "echo"


def test_auto_rate_and_blanks_are_the_familys_own_else_the_default_familys(tmp_path, monkeypatch):
    """optimization.resolve asks the run's family what lr "auto" and blanks "auto" mean (FAMILY_OPTIONAL
    auto_settings); a family that says nothing gets the default family's."""
    from utils.training.config import TrainConfig
    from utils.training.optimization import resolve

    register(tmp_path, monkeypatch, "echo", ECHO)
    register(tmp_path, monkeypatch, "own_rate", ECHO + '\n\ndef auto_settings(cfg):\n'
                                                       '    return {"lr": (1e-5, "its own rate")}\n')
    default = resolve(TrainConfig(preset="tiny", device="cpu"))
    echo = resolve(TrainConfig(preset="tiny", device="cpu", engine="echo"))
    own = resolve(TrainConfig(preset="tiny", device="cpu", engine="own_rate"))
    assert (echo.lr, echo.reasons["lr"], echo.blanks) == (default.lr, default.reasons["lr"], default.blanks)
    assert (own.lr, own.reasons["lr"]) == (1e-5, "its own rate") and own.blanks == default.blanks


def test_a_new_family_is_one_package_and_one_registry_line(tmp_path, monkeypatch):
    """Trained through prepare_run/run (what `app.py train` calls), spoken with through the Voice, exported: each
    step asks the family by the name its checkpoint carries, never Matcha's."""
    from utils import inference
    from utils.training import TrainConfig, prepare_run, run

    register(tmp_path, monkeypatch, "echo", ECHO)
    ws = make_dataset(tmp_path / "ws", n_train=2, n_val=1, max_chars=30)
    cfg = TrainConfig(workspace=str(ws.root), dataset="am", run="echo-run", engine="echo", preset="tiny",
                      max_steps=2, warmup_steps=1, log_every=1, checkpoint_every=2, max_frames_per_batch=400,
                      grad_accumulation=1, mcd="logmel", eval_clips=1, sample_clips=0, ode_steps=2)
    result = run(prepare_run(cfg))
    assert result["state"] == "finished", result["message"]
    saved = json.loads((ws.run_dir("echo-run") / "checkpoints" / "step-2" / "config.json").read_text())
    assert families.of(saved).NAME == "echo"  # the checkpoint says its family

    voice = inference.Voice.load(result["last_checkpoint"])
    assert voice.family.NAME == "echo"
    wave, sample_rate, _ = voice.synthesize("ሰላም ነው።", steps=2)
    assert sample_rate == 24_000 and len(wave) > 0

    exported = inference.export_voice(ws, "echo-run", "echo-voice", vocoder="griffin-lim", onnx=True, onnx_steps=3)
    assert (exported / "echo.txt").read_text() == "exported by echo with 3 steps"  # the family's own export
    config = json.loads((exported / "config.json").read_text())
    assert config["engine"] == "echo" and config["voice"]["onnx"] == ["echo.txt"]
    assert inference.voice_engine(ws, "echo-voice") == "echo"


def test_the_engine_advice_offline_on_a_cpu_recommends_only_what_trains_here(tmp_path):
    """Offline on a CPU the F5 refusal and "Which engine" said "Train the MMS-TTS engine here" (whose base cannot be
    had offline, so Start refused it) and "Speak with OmniVoice here from a clip" (its 3.3 GB base cannot be had
    either). No family names another now; one line names what trains here, and the F5 refusal ends with it."""
    from dataclasses import replace

    from utils import hardware
    from utils.training import TrainConfig, prepare_run

    ws = make_dataset(tmp_path, n_train=1, n_val=1)
    cpu = replace(hardware.detect(ws.root), gpus=[])
    lines = families.advice(ws, "am", cpu)
    assert lines[-1] == "Trains on this machine now: Matcha."
    # seconds of speech: said what a run of them is (the line above said only that Matcha wants many hours)
    assert lines[-2].startswith("**How much speech:**") and "not train one worth keeping" in lines[-2]
    assert families.amount_line(0.5)[0].endswith("not for training from zero, which wants hours.")
    assert families.amount_line(1.0) == []
    assert not any("MMS-TTS engine here" in line or "OmniVoice here from a clip" in line for line in lines), lines
    f5 = families.get("f5")
    with pytest.raises(StudioError) as refused:
        prepare_run(TrainConfig(workspace=str(ws.root), dataset="am", run="f", engine="f5", init=f5.default_init("")))
    assert "use a GPU" in str(refused.value) and str(refused.value).endswith("Trains on this machine now: Matcha.")
    assert "MMS-TTS" not in str(refused.value)


def test_the_guidance_before_start_says_what_a_checkpoint_bought_when_measured(tmp_path):
    """What a fine-tune buys over training from zero is said from bench/transfer.py's measurement (a family's
    TRANSFER), beside the curator's amount of speech, before Start of a run from a checkpoint (Matcha); a run from
    zero says nothing of it, nor does F5 (unmeasured at a real size)."""
    from tests.test_f5_engine import public_base
    from utils import hardware
    from utils.datasets.manifest import usable_hours
    from utils.family_contract import family_optional
    from utils.training import TrainConfig
    from utils.transfer import said

    ws = make_dataset(tmp_path / "ws", n_train=1, n_val=1)
    measured = {name: family_optional(families.get(name), "TRANSFER") for name in families.names()}
    assert measured["matcha"] and not measured["f5"]  # F5's tiny base says nothing of the public one (utils/f5/about.py)
    # measured, not a placeholder: the base ahead of random weights, on some speech (the first draft said 0.0 dB)
    assert all(0 < m.pretrained_db < m.scratch_db and m.speech_s > 0 and m.steps > 0 for m in measured.values() if m)
    # not in the engine advice: there Matcha is the engine trained from zero, and a checkpoint's gain read as a base's
    assert not any("Measured here" in line for line in families.advice(ws, "am", hardware.detect(ws.root)))
    speech = usable_hours(ws, "am", with_text=True)
    matcha = lambda init: TrainConfig(workspace=str(ws.root), dataset="am", run="m", init=init)  # noqa: E731
    assert said(measured["matcha"], speech) in families.get("matcha").guidance(ws, matcha("runs/old"))
    assert not any("Measured here" in line for line in families.get("matcha").guidance(ws, matcha("")))
    f5 = TrainConfig(workspace=str(ws.root), dataset="am", run="f", engine="f5",
                     init=str(public_base(ws.root / "pretrained" / "tiny-f5")))
    assert not any("Measured here" in line for line in families.get("f5").guidance(ws, f5))
