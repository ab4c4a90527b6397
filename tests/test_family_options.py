"""A family's own settings (utils/family_options.py): declared by the family, read by the command line, the Training
tab and config.json from it; one a family does not take is refused by name, and older configs still load."""
from __future__ import annotations

import json
from dataclasses import fields

import pytest

from utils import families
from utils.events import StudioError
from utils.family_options import every_option, names_of, saved_option
from utils.training.config import TrainConfig, cli_fields, config_from_cli
from utils.training.optimization import resolve

OWN = {"matcha": ["finetune_mode", "blanks", "frontend", "mas", "parts"], "f5": ["prompt", "frontend"], "mms": ["mas"],
       "omnivoice": ["prompt"]}


def test_each_family_declares_its_own_settings_and_trainconfig_carries_none_of_them():
    assert {n: names_of(families.get(n)) for n in families.names()} == OWN
    assert not {f.name for f in fields(TrainConfig)} & set(every_option())
    assert TrainConfig(engine="f5").to_dict()["options"] == {"prompt": "", "frontend": "auto"}  # in full
    assert TrainConfig(engine="omnivoice", options={"prompt": "am-3"}).family_options.prompt == "am-3"


@pytest.mark.parametrize("engine, options, message", [
    ("f5", {"mas": "torch"}, "F5-TTS takes no setting 'mas' (it is a setting of Matcha and MMS-TTS): leave it out"),
    ("mms", {"finetune_mode": "new_speaker"}, "MMS-TTS takes no setting 'finetune_mode' (it is a setting of Matcha)"),
    ("omnivoice", {"frontend": "char"}, "OmniVoice takes no setting 'frontend' (it is a setting of Matcha and F5"),
    ("matcha", {"prompt": "am-1"}, "Matcha takes no setting 'prompt' (it is a setting of F5-TTS and OmniVoice)"),
    ("f5", {"frontend": "bpe"}, "F5-TTS's frontend must be one of auto, phoneme, char, not 'bpe'"),
    ("matcha", {"colour": "blue"}, "Matcha takes no setting 'colour': leave it out"),
])
def test_a_setting_the_family_does_not_take_is_refused_by_name_when_the_config_is_made(engine, options, message):
    with pytest.raises(StudioError) as caught:
        TrainConfig(engine=engine, options=options)
    assert message in str(caught.value)


def test_the_command_line_offers_each_setting_once_saying_whose_it_is_and_refuses_it_for_another_family(tmp_path):
    import app

    offered = {name: help for name, _, help, _ in cli_fields()}
    assert offered["mas"].startswith("Matcha, MMS-TTS: ") and offered["prompt"].startswith("F5-TTS, OmniVoice: ")
    parser = app.build_parser()
    args = parser.parse_args(["train", "--dataset", "am", "--engine", "f5", "--prompt", "12", "--frontend", "char"])
    cfg = config_from_cli(vars(args), tmp_path)
    assert cfg.options == {"prompt": "12", "frontend": "char"}  # a row id of digits stays the row's id, a string
    args = parser.parse_args(["train", "--dataset", "am", "--engine", "f5", "--blanks", "false"])
    with pytest.raises(StudioError, match="F5-TTS takes no setting 'blanks' .it is a setting of Matcha."):
        config_from_cli(vars(args), tmp_path)
    args = parser.parse_args(["train", "--dataset", "am", "--engine", "mms", "--mas", "torch"])
    assert config_from_cli(vars(args), tmp_path).family_options.mas == "torch"


def test_a_config_written_before_families_declared_their_settings_loads_with_what_its_family_takes():
    """An older config.json has every family's settings at the top of "train"; the Optimizations tab's saved settings
    (mas) serve every family. Each keeps what its family takes and leaves the rest out."""
    old = {"engine": "f5", "run": "r", "prompt": "am-7", "frontend": "char", "mas": "torch", "blanks": "true",
           "finetune_mode": "full"}
    cfg = TrainConfig.from_dict(old)
    assert cfg.options == {"prompt": "am-7", "frontend": "char"}
    again = TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))  # config.json round trip
    assert again == cfg and again.family_options == cfg.family_options
    matcha = TrainConfig.from_dict({k: v for k, v in old.items() if k != "engine"})
    assert matcha.options == {"frontend": "char", "mas": "torch", "blanks": "true", "finetune_mode": "full"}
    with pytest.raises(StudioError, match="unknown training settings: colour"):
        TrainConfig.from_dict({"colour": "blue"})
    assert saved_option(old, "prompt") == "am-7" == saved_option(cfg.to_dict(), "prompt")
    assert saved_option({"options": {}}, "finetune_mode", "full") == "full"


def test_the_machine_decides_mas_and_blanks_only_for_families_that_take_them():
    """F5 and OmniVoice have no aligner and no blanks: their config.json and log no longer list them."""
    resolved = {n: resolve(TrainConfig(engine=n, preset="tiny", device="cpu")).values for n in families.names()}
    assert {n: [k for k in ("mas", "blanks") if k in v] for n, v in resolved.items()} == {
        "matcha": ["mas", "blanks"], "f5": [], "mms": ["mas"], "omnivoice": []}
    assert resolve(TrainConfig(preset="tiny", device="cpu", options={"mas": "torch"})).mas == "torch"


def test_the_saved_settings_of_every_family_start_an_f5_run_with_only_its_own(tmp_path, monkeypatch):
    """The Optimizations tab saves mas for every run; an F5 run started from the Training tab (a tiny random F5 base,
    as the CLI smoke test) keeps only its own settings, its reference clip among them."""
    from tests.helpers import make_dataset
    from utils.datasets.manifest import load_manifest
    from utils.runs import control
    from utils.runs.settings import save_settings

    ws = make_dataset(tmp_path / "ws", n_train=2, n_val=1, max_chars=20)
    row = load_manifest(ws, "am")[0]["id"]
    save_settings(ws, {"mas": "torch", "max_steps": 1})
    monkeypatch.setattr(control, "queue", lambda ws, path, all_gpus: {"state": "queued"})  # prepared, not run
    status = control.start_training(ws, "am", preset="tiny", engine="f5", overrides={"prompt": row})
    train = json.loads((ws.run_dir(status["run"]) / "config.json").read_text())["train"]
    assert train["options"] == {"prompt": row, "frontend": "auto"} and "mas" not in train
    with pytest.raises(StudioError, match="F5-TTS takes no setting 'finetune_mode'"):
        control.start_training(ws, "am", preset="tiny", engine="f5", finetune_mode="freeze_encoder")


def test_a_voice_of_the_aligner_alone_is_refused_and_the_transcript_checks_aligner_is_not(tmp_path, capsys):
    """--parts aligner trains no decoder: a voice run of it trained, was scored on noise and exported a voice that
    could not speak. Only a run that is not evaluated (the transcript check's) may take it."""
    import app
    from utils.transcripts.scoring import aligner_config
    from utils.workspace import Workspace

    matcha = families.get("matcha")
    voice = TrainConfig(engine="matcha", dataset="am", options={"parts": "aligner"})
    with pytest.raises(StudioError, match=r"--parts aligner trains only the text encoder .* cannot be a voice\. "
                                          r"Leave --parts out \(all\) to train a voice"):
        matcha.check_request(voice)
    matcha.check_request(TrainConfig(engine="matcha", dataset="am"))
    matcha.check_request(aligner_config(Workspace.open(tmp_path / "ws"), "am", 600))
    assert app.main(["train", "--workspace", str(tmp_path / "ws"), "--dataset", "am", "--parts", "aligner"]) == 2
    assert "error: Matcha's --parts aligner trains only the text encoder" in capsys.readouterr().err
    assert not (tmp_path / "ws" / "runs").exists() or not any((tmp_path / "ws" / "runs").iterdir())
