"""Where an F5 run starts, on the CPU with tiny F5 models: a base whose vocabulary already has Ethiopic characters
(read as characters, no new rows), another repo on the hub (a local hub cache stands in for the network: its own
folder, its model card's licence before the download and beside the weights), one of this studio's own F5
fine-tunes continued by run name and by exported voice (its table kept), and a vocab.txt that is not the
checkpoint's own, refused before any weight is loaded, naming the symbols."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.test_f5_engine import BASE_SYMBOLS, app, corpus, f5_config, gpu_machine, public_base  # noqa: F401
from utils.events import StudioError
from utils.f5.text import F5Text
from utils.training import prepare_run, run
from utils.text.ethiopic import is_ethiopic
from utils.training.checkpoint import read_config
from utils.datasets import load_manifest

TABLE = "transformer.text_embed.text_embed.weight"


def tiny_f5(folder: Path, symbols: list[str], name: str = "model_1250000.safetensors") -> Path:
    """A tiny random F5 in the public layout (EMA weights under "ema_model.") whose table fits `symbols`, with its
    vocab.txt; a .pt name saves it as the F5 trainer does."""
    from models.f5 import PRESETS, F5Config, F5TTS

    folder.mkdir(parents=True, exist_ok=True)
    model = F5TTS(F5Config.from_dict({**PRESETS["tiny"].to_dict(), "text_num_embeds": len(symbols)}))
    weights = {f"ema_model.{k}": v.contiguous() for k, v in model.state_dict().items()}
    if name.endswith(".pt"):
        torch.save({"ema_model_state_dict": weights}, folder / name)
    else:
        save_file(weights, str(folder / name))
    (folder / "vocab.txt").write_text("\n".join(symbols) + "\n", encoding="utf-8")
    return folder


def saved_table(folder: Path) -> torch.Tensor:
    return load_file(str(folder / "model.safetensors"))[TABLE]


# ------------------------------------------------------------------------------------ a base that reads Ethiopic
def test_a_base_whose_vocabulary_has_ethiopic_characters_is_read_as_characters_with_no_new_rows(corpus):
    rows = load_manifest(corpus, "am")
    ethiopic = sorted({u for r in rows for u in F5Text(kind="char").units(r)} - set(BASE_SYMBOLS))
    assert any(map(is_ethiopic, ethiopic))
    symbols = BASE_SYMBOLS + ethiopic
    base = tiny_f5(corpus.root / "pretrained" / "amharic-chars", symbols)

    assert run(prepare_run(f5_config(corpus, "f5-ethiopic", init=str(base), max_steps=2)))["state"] == "finished"
    folder = corpus.run_dir("f5-ethiopic") / "checkpoints" / "step-2"
    text = read_config(folder)["text"]
    assert text["kind"] == "char" and text["symbols"] == symbols and text["base_size"] == len(symbols)
    assert saved_table(folder).shape[0] == len(symbols) + 1  # not one row added
    log = (corpus.run_dir("f5-ethiopic") / "train.log").read_text()
    assert f"vocab.txt has {sum(map(is_ethiopic, ethiopic))} Ethiopic characters: reading characters (char frontend)" in log
    assert "0 symbol(s) added for this dataset" in log and "(0 added for this dataset, char)" in log
    assert "symbols added to the table" not in log


# ------------------------------------------------------------------------------------ another repo on the hub
@pytest.fixture
def someone_hub(tmp_path, monkeypatch) -> Path:
    """The hub's cache holding someone/amharic-f5 as huggingface_hub lays it out: a model card declaring
    cc-by-4.0, and in ckpts/ two checkpoints (the newer one fits vocab.txt, the older one does not) beside vocab.txt;
    this machine is offline, so the hub's library answers from the cache as after a first download."""
    from huggingface_hub import constants

    repo = tmp_path / "hub" / "models--someone--amharic-f5"
    commit = "89abcdef0123456789abcdef0123456789abcdef"
    snapshot = repo / "snapshots" / commit
    tiny_f5(snapshot / "ckpts", BASE_SYMBOLS[:-3], "model_100000.safetensors")
    tiny_f5(snapshot / "ckpts", BASE_SYMBOLS, "model_200000.safetensors")  # rewrites vocab.txt to fit this one
    tiny_f5(snapshot / "other", BASE_SYMBOLS[:5])  # another model in the same repo
    (snapshot / "README.md").write_text("---\nlicense: cc-by-4.0\nlanguage:\n- am\n---\n# Amharic F5\n", encoding="utf-8")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))  # read at import
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return snapshot


def test_a_hub_base_with_a_subfolder_gets_its_own_folder_and_its_model_cards_licence(corpus, someone_hub,
                                                                                     monkeypatch):
    from utils import hardware
    from utils.f5.base import pretrained_dir
    from utils.f5.hub import HubBase

    here = hardware.detect(corpus.root)  # this CPU trains; check_request is told the base will fit a GPU
    folder = corpus.root / "pretrained" / "someone--amharic-f5--ckpts"
    assert pretrained_dir(corpus, HubBase.parse("someone/amharic-f5:ckpts")) == folder
    with monkeypatch.context() as gpu:
        gpu.setattr(hardware, "detect", lambda *a, **k: gpu_machine())
        with pytest.raises(StudioError) as refused:
            prepare_run(f5_config(corpus, "f5-someone", init="someone/amharic-f5:ckpts"))
        message = str(refused.value)
        assert message.startswith("someone/amharic-f5:ckpts: cc-by-4.0, as the model card of someone/amharic-f5 "
                                  "declares (https://huggingface.co/someone/amharic-f5)")
        assert "--accept-licence" in message and "CC-BY-NC" not in message
        assert not folder.exists() and not corpus.run_dir("f5-someone").exists()

        path = prepare_run(f5_config(corpus, "f5-someone", init="someone/amharic-f5:ckpts", max_steps=2),
                           accept_licence=True)
        assert "cc-by-4.0" in read_config(path.parent)["train"]["licence_accepted"]
        assert run(path, here)["state"] == "finished"  # the trainer downloads it, then fine-tunes on this CPU
    assert sorted(p.name for p in folder.iterdir()) == ["LICENSE.txt", "model_200000.safetensors", "vocab.txt"]
    cached = someone_hub / "ckpts" / "model_200000.safetensors"
    assert (folder / cached.name).stat().st_ino == cached.stat().st_ino  # one file on the disk, not two
    notice = (folder / "LICENSE.txt").read_text(encoding="utf-8").splitlines()
    assert notice[0] == "Source: https://huggingface.co/someone/amharic-f5 (ckpts/)"
    assert notice[1].startswith("Licence: cc-by-4.0, as the model card of someone/amharic-f5 declares")
    assert not (corpus.root / "pretrained" / "f5tts-v1-base").exists()  # the public base's folder is its own
    log = (corpus.run_dir("f5-someone") / "train.log").read_text()
    assert "downloading the F5 base someone/amharic-f5:ckpts (once; licence accepted: cc-by-4.0" in log
    assert "cc-by-4.0" in read_config(corpus.run_dir("f5-someone") / "checkpoints" / "step-2")["licence"]

    # downloaded once: the next run starts from the workspace's copy, no question asked, with its licence
    again = prepare_run(f5_config(corpus, "f5-someone-2", init="someone/amharic-f5:ckpts"))
    train = read_config(again.parent)["train"]
    assert train["init"] == str(folder) and train["licence_accepted"].startswith("cc-by-4.0")


def test_a_hub_base_whose_card_cannot_be_read_offline_says_where_its_licence_is(corpus, someone_hub, monkeypatch):
    from utils import hardware

    monkeypatch.setattr(hardware, "detect", lambda *a, **k: gpu_machine())
    with pytest.raises(StudioError) as refused:
        prepare_run(f5_config(corpus, "f5-unknown", init="someone/not-cached"))
    message = str(refused.value)
    assert message.startswith("someone/not-cached: the licence of someone/not-cached could not be read")
    assert "the model card at https://huggingface.co/someone/not-cached says it" in message
    assert "--accept-licence" in message


def test_online_the_repos_listing_and_its_model_card_name_the_files_and_the_licence(monkeypatch):
    """What the hub answers (stood in for: this machine has no network): the folder's files with their sizes, and
    the card's metadata. A folder without vocab.txt is refused, saying what it holds."""
    import huggingface_hub
    from huggingface_hub import ModelCardData, constants
    from huggingface_hub.hf_api import RepoFile, RepoFolder

    from utils.f5.hub import HubBase, base_files, base_licence

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    tree = {"v2": [RepoFile(path="v2/model_last.pt", size=2**20, oid="a"),
                   RepoFile(path="v2/model_400000.safetensors", size=3 * 2**20, oid="b"),
                   RepoFile(path="v2/model_900000.safetensors", size=5 * 2**20, oid="c"),
                   RepoFile(path="v2/vocab.txt", size=10, oid="d"), RepoFolder(path="v2/samples", oid="e")],
            "bare": [RepoFile(path="bare/model.safetensors", size=1, oid="f")]}
    asked = []
    monkeypatch.setattr(huggingface_hub.HfApi, "list_repo_tree",
                        lambda self, repo, path_in_repo=None, **kw: asked.append((repo, path_in_repo)) or tree[path_in_repo])
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda self, repo, **kw: type(
        "Info", (), {"card_data": ModelCardData(license="other", license_name="amharic-research-only")})())
    assert base_files(HubBase.parse("someone/online:v2")) == ("v2/model_900000.safetensors", "v2/vocab.txt", 5.0)
    assert asked == [("someone/online", "v2")]
    assert base_licence(HubBase.parse("someone/online:v2")).startswith(
        "other: amharic-research-only, as the model card of someone/online declares")
    with pytest.raises(StudioError, match="someone/online:bare is not an F5 base.*holds model.safetensors"):
        base_files(HubBase.parse("someone/online:bare"))


def test_the_model_file_is_the_safetensors_of_the_newest_step_and_hub_ids_are_told_from_paths(corpus):
    from utils.f5.base import looks_like_hub_id
    from utils.f5.hub import HubBase, pick_weights

    assert pick_weights(["model_500000.safetensors", "model_1250000.safetensors", "model_last.pt"]) == \
        "model_1250000.safetensors"
    assert pick_weights(["model_1200000.pt", "model_last.pt", "vocab.txt"]) == "model_last.pt"
    assert pick_weights(["vocab.txt", "README.md"]) is None
    assert HubBase.parse("SWivid/F5-TTS").folder == "f5tts-v1-base"  # existing workspaces keep their copy
    assert HubBase.parse("SWivid/F5-TTS:F5TTS_v1_Base").is_default
    assert HubBase.parse("SWivid/F5-TTS:F5TTS_Base").folder == "SWivid--F5-TTS--F5TTS_Base"
    assert HubBase.parse("a/b:../c") is None and HubBase.parse("plain-name") is None
    assert looks_like_hub_id("someone/amharic-f5:ckpts", corpus.root)
    assert not looks_like_hub_id("runs/f5-missing", corpus.root)  # a workspace folder, mistyped: not a repo


# ------------------------------------------------------------------------------------ continuing a fine-tune
@pytest.fixture(scope="module")
def first_finetune(corpus) -> Path:
    """Two steps fine-tuned from a tiny base in the public layout: the Amharic symbols added to its table."""
    base = public_base(corpus.root / "pretrained" / "mini-base")
    assert run(prepare_run(f5_config(corpus, "f5-first", init=str(base), max_steps=2)))["state"] == "finished"
    from utils.inference.voices import best_checkpoint

    return best_checkpoint(corpus, "f5-first")


@pytest.mark.parametrize("start", ["run name", "exported voice"])
def test_an_f5_fine_tune_continues_from_its_run_or_its_voice_keeping_its_table(corpus, first_finetune, start):
    from utils.f5 import LICENCE
    from utils.inference.export import export_voice

    before = read_config(first_finetune)
    assert len(before["text"]["symbols"]) > before["text"]["base_size"] == len(BASE_SYMBOLS)  # it grew the base
    init = "f5-first" if start == "run name" else str(export_voice(corpus, "f5-first", "f5-first-voice",
                                                                   vocoder="griffin-lim", overwrite=True))
    name = f"f5-on-{start.split()[-1]}"
    assert run(prepare_run(f5_config(corpus, name, init=init, max_steps=2)))["state"] == "finished"
    after_folder = corpus.run_dir(name) / "checkpoints" / "step-2"
    after = read_config(after_folder)
    assert after["text"]["symbols"] == before["text"]["symbols"]  # the same table, in the same order
    assert after["text"]["base_size"] == len(before["text"]["symbols"])  # nothing new to learn faster
    assert after["licence"] == before["licence"] == LICENCE  # the public base's licence travels on
    old, new = saved_table(first_finetune), saved_table(after_folder)
    assert new.shape == old.shape
    assert torch.allclose(new, old, atol=1e-3) and not torch.equal(new, old)  # started there, and trained on
    log = (corpus.run_dir(name) / "train.log").read_text()
    assert "fine-tune: continuing from the F5 fine-tune" in log and "is kept as it is" in log
    assert "symbols added to the table" not in log


# ------------------------------------------------------------------------------------ a vocab.txt not its own
def no_weights_load(monkeypatch):
    """Any weight read fails the test: the refusal must come first."""
    import safetensors.torch

    from utils.training import checkpoint as ckpt

    def boom(*args, **kwargs):
        raise AssertionError("weights were loaded before the vocabulary was checked")

    monkeypatch.setattr(safetensors.torch, "load_file", boom)
    monkeypatch.setattr(ckpt, "load_safetensors", boom)
    monkeypatch.setattr(torch, "load", boom)


def test_a_vocab_one_line_longer_or_shorter_than_the_table_is_refused_before_any_weight_loads(corpus, monkeypatch):
    longer = tiny_f5(corpus.root / "pretrained" / "vocab-longer", BASE_SYMBOLS)
    (longer / "vocab.txt").write_text("\n".join(BASE_SYMBOLS + ["ሀ"]) + "\n", encoding="utf-8")
    shorter = tiny_f5(corpus.root / "pretrained" / "vocab-shorter", BASE_SYMBOLS)
    (shorter / "vocab.txt").write_text("\n".join(BASE_SYMBOLS[:-1]) + "\n", encoding="utf-8")
    n = len(BASE_SYMBOLS)
    no_weights_load(monkeypatch)
    with pytest.raises(StudioError) as refused:
        prepare_run(f5_config(corpus, "f5-longer", init=str(longer)))
    message = str(refused.value)
    assert f"vocab.txt of {longer} lists {n + 1} symbols but the text table of model_1250000.safetensors has rows " \
           f"for {n}: its last 1 line(s), 'ሀ', have no row in the table" in message
    assert "use the vocab.txt saved with that checkpoint" in message and "#1181" in message
    with pytest.raises(StudioError, match=rf"1 row\(s\) of the table \(ids {n} to {n}\) have no symbol; vocab.txt "
                                          r"ends at 'ni'.*use the vocab.txt saved with that checkpoint"):
        prepare_run(f5_config(corpus, "f5-shorter", init=str(shorter)))
    assert not corpus.run_dir("f5-longer").exists() and not corpus.run_dir("f5-shorter").exists()


def test_a_vocab_changed_after_the_run_was_queued_is_refused_by_the_trainer_before_loading(corpus, monkeypatch):
    base = tiny_f5(corpus.root / "pretrained" / "vocab-later", BASE_SYMBOLS)
    path = prepare_run(f5_config(corpus, "f5-later", init=str(base), max_steps=1))
    (base / "vocab.txt").write_text("\n".join(BASE_SYMBOLS + ["zz", "ሀ"]) + "\n", encoding="utf-8")
    no_weights_load(monkeypatch)
    with pytest.raises(StudioError, match="its last 2 line\\(s\\), 'zz', 'ሀ', have no row"):
        run(path)


def test_a_pt_checkpoint_is_read_safely_and_checked_before_it_goes_into_a_model(corpus, monkeypatch):
    from models.f5 import F5TTS

    folder = tiny_f5(corpus.root / "pretrained" / "trainer-pt", BASE_SYMBOLS, "model_last.pt")
    (folder / "vocab.txt").write_text("\n".join(BASE_SYMBOLS[:-2]) + "\n", encoding="utf-8")
    path = prepare_run(f5_config(corpus, "f5-pt", init=str(folder), max_steps=1))  # a .pt has no header to read

    def boom(*args, **kwargs):
        raise AssertionError("the weights went into a model before the vocabulary was checked")

    monkeypatch.setattr(F5TTS, "load_state_dict", boom)
    with pytest.raises(StudioError, match=r"2 row\(s\) of the table .* have no symbol; vocab.txt ends at 'z'"):
        run(path)


def test_a_checkpoint_whose_config_lists_another_table_is_refused_naming_the_symbol(corpus, first_finetune,
                                                                                     monkeypatch):
    folder = corpus.root / "pretrained" / "mixed-checkpoint"
    shutil.copytree(first_finetune, folder, dirs_exist_ok=True)
    config = read_config(folder)
    config["text"]["symbols"].append("ʕ")
    (folder / "config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    no_weights_load(monkeypatch)
    with pytest.raises(StudioError, match="config.json's text table .* its last 1 line\\(s\\), 'ʕ', have no row.*"
                                          "copy both from the same checkpoint folder"):
        prepare_run(f5_config(corpus, "f5-mixed", init=str(folder)))


def test_the_train_commands_help_says_what_init_accepts():
    proc = app("train", "--help")
    assert proc.returncode == 0
    said = " ".join(proc.stdout.split())
    assert all(part in said for part in ("owner/repo[:folder]", "vocab.txt", "a run name", "an exported voice"))
