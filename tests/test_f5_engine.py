"""The F5-TTS engine on the shared trainer, on the CPU with tiny F5 configurations: a few real training steps on
espeak-ng Amharic, exact resume (also after the dataset gained a symbol), fine-tuning from a base folder in the
public layout (the same loading code a download takes), the new text rows' starting point, the licence's yes
before any download, the download by one process of a run (a hub cache of the public layout stands in for the
network), the reference clip's choice, the requests it refuses, and an F5 voice through the Inference tab's
services: speaking with the pronunciation dictionary, A/B, a text file to a zip, export and its licence."""
from __future__ import annotations

import errno
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from tests.conftest import free_port, tiny_matcha_config
from tests.helpers import make_dataset
from utils.datasets import load_manifest, save_manifest
from utils.events import StudioError
from utils.f5.text import F5Text, latin_spelling
from utils.training import TrainConfig, prepare_run, run
from utils.training.checkpoint import load_trainer_state, read_config
from utils.workspace import Workspace, read_jsonl

BASE_SYMBOLS = [" ", ",", ".", "?", "!", *"abcdefghijklmnopqrstuvwxyz", "ni", "hao"]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Workspace:
    return make_dataset(tmp_path_factory.mktemp("ws"), n_train=4, n_val=1, voices=("am",), max_chars=30)


def f5_config(ws: Workspace, run_name: str, **kw) -> TrainConfig:
    base = dict(workspace=str(ws.root), dataset="am", run=run_name, engine="f5", preset="tiny", max_steps=4,
                warmup_steps=1, log_every=1, eval_every=0, checkpoint_every=2, keep_checkpoints=3,
                grad_accumulation=1, max_frames_per_batch=600, eval_clips=1, sample_clips=1, ode_steps=2,
                ema_decay=0.9, eval_vocoder="griffin-lim")
    return TrainConfig.from_dict({**base, **kw})  # a family's own settings by name too


def public_base(folder: Path) -> Path:
    """A tiny random F5 saved as the public files are: EMA weights under "ema_model." in a .safetensors, and
    vocab.txt (one symbol a line)."""
    from models.f5 import F5TTS, PRESETS, F5Config

    folder.mkdir(parents=True, exist_ok=True)
    model = F5TTS(F5Config.from_dict({**PRESETS["tiny"].to_dict(), "text_num_embeds": len(BASE_SYMBOLS)}))
    save_file({f"ema_model.{k}": v.contiguous() for k, v in model.state_dict().items()},
              str(folder / "model_1250000.safetensors"))
    (folder / "vocab.txt").write_text("\n".join(BASE_SYMBOLS) + "\n", encoding="utf-8")
    return folder


def losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r}


@pytest.fixture(scope="module")
def f5_voice(corpus) -> Path:
    """A tiny F5 run of two steps with a checkpoint at each (two checkpoints to compare); its run folder."""
    run(prepare_run(f5_config(corpus, "f5-voice", max_steps=2, checkpoint_every=1)))
    return corpus.run_dir("f5-voice")


@pytest.fixture(scope="module")
def finetuned(corpus) -> Path:
    """Two steps fine-tuned from a base folder in the public layout (no LICENSE.txt: the public licence holds)."""
    base = public_base(corpus.root / "pretrained" / "mini-base")
    assert run(prepare_run(f5_config(corpus, "f5-finetune", init=str(base), max_steps=2)))["state"] == "finished"
    return corpus.run_dir("f5-finetune")


def app(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "app.py", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_a_tiny_f5_trains_evaluates_and_resumes_onto_the_same_curve(corpus):
    straight = run(prepare_run(f5_config(corpus, "f5-straight", eval_every=4)))
    assert straight["state"] == "finished" and straight["step"] == 4
    curve = losses(corpus.run_dir("f5-straight"))
    assert sorted(curve) == [1, 2, 3, 4] and all(torch.isfinite(torch.tensor(list(curve.values()))))
    evaluation = [r for r in read_jsonl(corpus.run_dir("f5-straight") / "metrics.jsonl") if "mcd" in r]
    assert evaluation and evaluation[-1]["mcd"] > 0 and evaluation[-1]["val_loss"] > 0
    assert any((corpus.run_dir("f5-straight") / "samples" / "step-4").glob("*.wav"))
    saved = read_config(corpus.run_dir("f5-straight") / "checkpoints" / "step-4")
    assert saved["engine"] == "f5" and saved["text"]["kind"] == "phoneme" and "ə" in saved["text"]["symbols"]
    assert saved["features"]["log_floor"] == 1e-5

    first = run(prepare_run(f5_config(corpus, "f5-resumed", max_steps=2, eval_every=4)))
    assert first["step"] == 2
    second = run(prepare_run(f5_config(corpus, "f5-resumed", eval_every=4)))
    assert second["state"] == "finished" and second["step"] == 4
    resumed = losses(corpus.run_dir("f5-resumed"))
    for step in (1, 2, 3, 4):  # the schedule is the same (max_steps 4 both times for steps 3-4): same losses
        assert resumed[step] == pytest.approx(curve[step], rel=1e-5, abs=1e-6), step


def test_fine_tuning_from_a_base_in_the_public_layout_grows_the_text_table(corpus, finetuned):
    saved = read_config(corpus.run_dir("f5-finetune") / "checkpoints" / "step-2")
    symbols = saved["text"]["symbols"]
    assert symbols[: len(BASE_SYMBOLS)] == BASE_SYMBOLS and saved["text"]["base_size"] == len(BASE_SYMBOLS)
    assert "ə" in symbols[len(BASE_SYMBOLS):]  # Amharic symbols added after the base's, none moved
    state = load_trainer_state(corpus.run_dir("f5-finetune") / "checkpoints" / "step-2")
    table = state["modules"]["model"]["transformer.text_embed.text_embed.weight"]
    assert table.shape[0] == len(symbols) + 1
    log = (corpus.run_dir("f5-finetune") / "train.log").read_text()
    assert "fine-tune: starting from the pretrained F5-TTS base" in log and "symbols added" in log


def test_new_rows_start_from_their_latin_spelling():
    from models.f5 import F5TTS, PRESETS, F5Config
    from utils.f5.base import _grow

    text = F5Text(symbols=list(BASE_SYMBOLS), base_size=len(BASE_SYMBOLS))
    model = F5TTS(F5Config.from_dict({**PRESETS["tiny"].to_dict(), "text_num_embeds": len(BASE_SYMBOLS)}))
    before = model.transformer.text_embed.text_embed.weight.detach().clone()
    added = text.grow(["ሸ ጥሩ"])  # ʃ ə, tʼ ɨ r u
    _grow(model, text, added, log=lambda m: None)
    table = model.transformer.text_embed.text_embed.weight.detach()
    assert torch.equal(table[: before.shape[0]], before)  # no old row moved
    row = lambda s: table[text.symbols.index(s) + 1]  # noqa: E731  (+1: row 0 is the filler)
    old = lambda s: before[BASE_SYMBOLS.index(s) + 1]  # noqa: E731
    assert latin_spelling("ʃ") == "sh"
    assert torch.allclose(row("ʃ"), (old("s") + old("h")) / 2)
    assert torch.allclose(row("ɨ"), old("i")) and torch.allclose(row("ə"), old("e"))
    assert torch.allclose(row("tʼ"), old("t"))  # the ejective mark has no Latin letter


def gpu_machine():
    """What utils.hardware.detect says of a machine whose GPU can fine-tune the base (a 24 GB L4)."""
    from utils.hardware import GPUInfo, HardwareReport

    return HardwareReport(gpus=[GPUInfo(0, "NVIDIA L4", 22.0, "8.9")], cpu_count=8, ram_gb=32, disk_free_gb=100)


def test_the_public_base_is_downloaded_only_after_a_yes_to_its_licence(corpus, monkeypatch):
    """On a machine that can fine-tune it; a run prepared there and started on this CPU is refused by the trainer
    before anything is downloaded (the offline download's message: tests/test_offline.py)."""
    from utils import hardware

    with monkeypatch.context() as gpu:
        gpu.setattr(hardware, "detect", lambda *a, **k: gpu_machine())
        cfg = f5_config(corpus, "f5-hub", init="SWivid/F5-TTS", preset="small")
        with pytest.raises(StudioError, match="CC-BY-NC-4.0.*--accept-licence"):
            prepare_run(cfg)
        assert not (corpus.root / "pretrained" / "f5tts-v1-base").exists()
        path = prepare_run(f5_config(corpus, "f5-hub", init="SWivid/F5-TTS", preset="small"), accept_licence=True)
        assert path.exists()  # accepted: the trainer downloads it in its own process
    with pytest.raises(StudioError, match="This machine cannot fine-tune the F5-TTS base: no GPU"):
        run(path)
    assert not (corpus.root / "pretrained" / "f5tts-v1-base").exists()


def test_a_folder_that_is_not_a_base_and_a_mismatched_file_are_refused(corpus, tmp_path):
    empty = corpus.root / "pretrained" / "empty"
    empty.mkdir(parents=True, exist_ok=True)
    with pytest.raises(StudioError, match="is not an F5-TTS base: it needs a model file"):
        prepare_run(f5_config(corpus, "f5-empty", init=str(empty)))
    broken = public_base(corpus.root / "pretrained" / "broken")
    weights = broken / "model_1250000.safetensors"
    from safetensors.torch import load_file

    state = load_file(str(weights))
    key = next(k for k in state if k.endswith("proj_out.weight"))
    state[key] = torch.zeros(3, 3)
    save_file(state, str(weights))
    with pytest.raises(StudioError, match="proj_out"):
        run(prepare_run(f5_config(corpus, "f5-broken", init=str(broken), max_steps=1)))
    assert os.path.exists(weights)  # nothing the user gave is removed


def test_an_f5_run_speaks_through_its_prompt_exports_and_speaks_from_the_cli(corpus, f5_voice):
    from utils.inference import Voice
    from utils.inference.export import export_voice

    folder = f5_voice / "checkpoints" / "step-2"
    voice = Voice.load(folder)
    wave, sr, info = voice.synthesize("ሰላም ነው። ዛሬ ጥሩ ቀን ነው።", steps=2)
    assert sr == 24000 and info["spoken"] == 2 and len(wave) > sr * 0.1 and float(abs(wave).max()) > 0
    assert "ə" in info["rows"][0]["phonemes"]
    exported = export_voice(corpus, "f5-voice", "f5-abebe", vocoder="griffin-lim")
    again, _, _ = Voice.load(exported).synthesize("ሰላም ነው።", steps=2)
    assert len(again) > 0
    with pytest.raises(StudioError, match="ONNX export is for Matcha voices"):
        export_voice(corpus, "f5-voice", "f5-onnx", vocoder="griffin-lim", onnx=True)
    out = corpus.root / "f5.wav"
    proc = app("synth", "ሰላም ነው።", "--voice", "f5-abebe", "--out", str(out), "--workspace", str(corpus.root),
               "--steps", "2", "--vocoder", "griffin-lim")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert out.stat().st_size > 1000


def test_the_training_tab_refuses_the_base_on_this_cpu_and_elsewhere_asks_for_the_licence_and_a_usable_clip(
        corpus, monkeypatch):
    """The tab's F5 start fine-tunes the pretrained base (whatever size is ticked for Matcha). On this CPU it is
    refused at once, licence ticked or not, before any run folder, queue entry or download. On a machine whose GPU
    can run it: no download without the licence's yes, a reference clip the dataset lacks refused before anything is
    queued, then a queued job; that job, run by this CPU's trainer, is refused there too before downloading."""

    from tests.helpers import serve_tab
    from utils import hardware, jobs
    from webui import training as tab

    def start(run_name, licence, prompt=""):
        return str(client.predict("am", "tiny", run_name, 2, "(from scratch)", "full", False, "f5", licence, prompt,
                                  "", api_name="/start_training")[0])

    with serve_tab(tab, corpus, "Training") as client:
        for licence in (False, True):
            refused = start("f5-here", licence)
            assert "Not done:** This machine cannot fine-tune the F5-TTS base: no GPU" in refused
            assert "Trains on this machine now: Matcha" in refused and "--preset tiny, without --init" in refused
        assert not corpus.run_dir("f5-here").exists() and "f5-here" not in [r["name"] for r in jobs.list_runs(corpus)]
        assert not (corpus.root / "pretrained" / "f5tts-v1-base").exists()

        monkeypatch.setattr(hardware, "detect", lambda *a, **k: gpu_machine())  # as on a machine with an L4
        refused = start("", False)
        assert "CC-BY-NC-4.0" in refused and "licence" in refused
        assert not (corpus.root / "pretrained" / "f5tts-v1-base").exists()
        wrong = start("f5-typo", True, "nope")
        assert "F5 reference clip 'nope': dataset am has no usable row with that id" in wrong
        assert not (corpus.run_dir("f5-typo") / "config.json").exists()  # refused before anything was queued
        prompt = next(r["id"] for r in load_manifest(corpus, "am") if r["split"] == "train")
        assert "f5-tab" in start("f5-tab", True, prompt)
    config = read_config(corpus.run_dir("f5-tab"))
    assert config["train"]["init"] == "SWivid/F5-TTS" and config["train"]["options"]["prompt"] == prompt
    assert "CC-BY-NC-4.0" in config["train"]["licence_accepted"]
    end = time.time() + 240
    while jobs.reconcile(corpus.run_dir("f5-tab")).get("state") not in jobs.FINAL and time.time() < end:
        time.sleep(0.5)
    status = jobs.read_status(corpus.run_dir("f5-tab"))
    assert status["state"] == "failed" and "This machine cannot fine-tune the F5-TTS base" in status["message"]
    assert not (corpus.root / "pretrained" / "f5tts-v1-base").exists()


def test_a_tiny_f5_job_runs_to_the_end_through_the_job_service_with_the_chosen_clip(corpus):

    from utils import jobs
    from utils.runs import control

    prompt = next(r["id"] for r in load_manifest(corpus, "am") if r["split"] == "train")
    control.start_training(corpus, "am", "tiny", "f5-job", engine="f5", max_steps=2,
                           overrides={"prompt": prompt, "max_frames_per_batch": 600, "grad_accumulation": 1,
                                   "eval_vocoder": "griffin-lim", "ode_steps": 2, "eval_clips": 1})
    end = time.time() + 240
    while jobs.reconcile(corpus.run_dir("f5-job")).get("state") not in jobs.FINAL and time.time() < end:
        time.sleep(0.5)
    status = jobs.read_status(corpus.run_dir("f5-job"))
    assert status["state"] == "finished", (corpus.run_dir("f5-job") / "train.log").read_text()[-2000:]
    saved = read_config(corpus.run_dir("f5-job") / "checkpoints" / "step-2")
    assert status["kind"] == "f5" and saved["engine"] == "f5" and saved["prompt"]["id"] == prompt


# ------------------------------------------------------------------------------------ the download
@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> Path:
    """The hub's cache as huggingface_hub lays it out (refs/main -> snapshots/COMMIT/F5TTS_v1_Base/...), holding a
    tiny base in the public layout; offline, the hub's download functions answer from it as after a first download."""
    repo = tmp_path / "hub" / "models--SWivid--F5-TTS"
    commit = "0123456789abcdef0123456789abcdef01234567"
    public_base(repo / "snapshots" / commit / "F5TTS_v1_Base")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return repo


def _fetch_in_a_process(root: str, rank: int, world: int, port: int, record: str, meet) -> None:
    """One process asking for the base, as the adapter's build does: rank `rank` of a run of `world` processes
    (gloo), or a run of its own (world 1). Each download it makes adds a line to `record`; with `meet`, it waits
    inside its download for the other process to be inside one too (a sure overlap, not a likely one).
    What it ends with goes to `record` too."""
    import huggingface_hub

    from utils.f5 import base as bases
    from utils.training import ddp

    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    real = huggingface_hub.snapshot_download

    def download(*args, **kwargs):
        with open(record, "a") as f:
            f.write(f"download {rank}\n")
        if meet is not None:
            try:
                meet.wait(60)
            except threading.BrokenBarrierError:
                pass  # the other process failed before it got here: the test fails on its exit code
        return real(*args, **kwargs)

    huggingface_hub.snapshot_download = download
    dist = ddp.setup("cpu")
    try:
        path = bases.fetch_for_run(Workspace.open(root), "SWivid/F5-TTS", True, dist)
        outcome = f"ok {rank} {path}"
    except StudioError as exc:
        outcome = f"refused {rank} {exc}"
    ddp.cleanup(dist)
    with open(record, "a") as f:
        f.write(outcome.replace("\n", " ") + "\n")


def _processes(root: Path, record: Path, world: int, meet=None) -> list[str]:
    """Two real processes through `_fetch_in_a_process` (ranks 0 and 1 of one run when world is 2); the record."""
    spawn = multiprocessing.get_context("spawn")
    port = free_port()
    procs = [spawn.Process(target=_fetch_in_a_process, args=(str(root), rank if world > 1 else 0, world, port,
                                                             str(record), meet)) for rank in range(2)]
    [p.start() for p in procs]
    [p.join(180) for p in procs]
    assert [p.exitcode for p in procs] == [0, 0]
    return record.read_text().splitlines()


def test_two_processes_fetching_the_base_at_once_leave_one_good_copy(hub_cache, tmp_path):
    from utils.f5.base import describe_base, pretrained_dir

    ws = Workspace.open(tmp_path / "ws")
    lines = _processes(ws.root, tmp_path / "record.txt", world=1, meet=multiprocessing.get_context("spawn").Barrier(2))
    assert sorted(line.split()[0] for line in lines) == ["download"] * 2 + ["ok"] * 2  # both downloaded, both ok
    assert {line.split()[-1] for line in lines if line.startswith("ok")} == {str(pretrained_dir(ws))}
    assert [p.name for p in pretrained_dir(ws).parent.iterdir()] == ["f5tts-v1-base"]  # no temporary folder left
    assert describe_base(pretrained_dir(ws))["licence"].startswith("F5-TTS v1 Base weights")
    assert (pretrained_dir(ws) / "model_1250000.safetensors").read_bytes() == \
        next(hub_cache.rglob("model_1250000.safetensors")).read_bytes()


def test_the_base_is_stored_once_where_the_hub_cache_shares_the_disk_and_copied_where_not(hub_cache, tmp_path,
                                                                                           monkeypatch):
    from huggingface_hub import constants

    from utils.f5 import base as bases

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache.parent))  # read at import, by an earlier test
    blob = next(hub_cache.rglob("model_1250000.safetensors"))
    original = blob.read_bytes()

    def another_disk(source, dest):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    with monkeypatch.context() as patch:  # a workspace on a mounted Drive folder: no hard link across disks
        patch.setattr(bases.os, "link", another_disk)
        copied = bases.fetch(Workspace.open(tmp_path / "drive"), accept_licence=True, log=lambda line: None)
    assert (copied / blob.name).stat().st_ino != blob.stat().st_ino and (copied / blob.name).read_bytes() == original

    linked = bases.fetch(Workspace.open(tmp_path / "ws"), accept_licence=True, log=lambda line: None)
    assert (linked / blob.name).stat().st_ino == blob.stat().st_ino  # one file on the disk, not two
    shutil.rmtree(hub_cache)  # the curator clears the hub's cache: the workspace's base stays whole
    assert (linked / blob.name).read_bytes() == original
    assert bases.describe_base(linked)["licence"].startswith("F5-TTS v1 Base weights")


def test_only_the_first_process_of_a_run_downloads_and_the_others_read_its_copy(hub_cache, tmp_path, monkeypatch):
    from utils.f5.base import pretrained_dir

    ws = Workspace.open(tmp_path / "ws")
    lines = _processes(ws.root, tmp_path / "record.txt", world=2)
    assert sorted(lines) == ["download 0", f"ok 0 {pretrained_dir(ws)}", f"ok 1 {pretrained_dir(ws)}"]  # rank 0 only

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))  # offline with nothing cached: it fails
    lines = _processes(tmp_path / "ws2", tmp_path / "record2.txt", world=2)
    assert any(line.startswith("refused 0 This machine cannot reach the Hugging Face hub to download the F5-TTS base")
               for line in lines)
    assert any(line.startswith("refused 1 The first process on this machine could not download") for line in lines)
    assert not any(line.startswith("download 1") for line in lines)  # the second waited, and did not try itself


# ------------------------------------------------------------------------------------ what F5 refuses
def test_f5_refuses_matcha_fine_tuning_modes_and_a_missing_base_before_reading_the_dataset(corpus):
    for mode in ("freeze_encoder", "new_speaker"):
        with pytest.raises(StudioError, match="F5-TTS takes no setting 'finetune_mode' .it is a setting of Matcha.: leave"):
            run(prepare_run(f5_config(corpus, "f5-mode", options={"finetune_mode": mode})))
    with pytest.raises(StudioError, match="pass --init SWivid/F5-TTS --accept-licence.*--preset tiny"):
        run(prepare_run(f5_config(corpus, "f5-nobase", preset="small")))
    assert not (corpus.run_dir("f5-nobase") / "train.log").exists()  # refused before the trainer started
    proc = app("train", "--engine", "f5", "--dataset", "am", "--run", "f5-cli-nobase", "--max-steps", "2",
               "--workspace", str(corpus.root))
    assert proc.returncode == 2 and "--init SWivid/F5-TTS --accept-licence" in proc.stdout + proc.stderr
    assert "--preset tiny" in proc.stdout + proc.stderr
    assert not corpus.run_dir("f5-cli-nobase").exists()  # no run folder, no data read, nothing queued


# ------------------------------------------------------------------------------------ the reference clip
def test_the_reference_clip_is_a_clean_5_to_10_s_clip_else_the_closest_with_a_warning(corpus, f5_voice):
    from utils.f5.adapter import pick_prompt
    from utils.training.data import Item

    def clip(rid: str, seconds: float, flags=(), music=None) -> Item:
        return Item({"id": rid, "flags": list(flags), "music": music}, [1, 2], int(seconds * 100), 0)

    items = [clip("exact-but-clipped", 6.0, ["clipping"]), clip("noisy", 6.2, ["low_snr"]),
             clip("separated", 5.9, music={"score": 0.9, "separated": True}), clip("short", 4.5),
             clip("clean", 8.5), clip("long", 11)]
    chosen, why = pick_prompt(items, frames_per_s=100)
    assert chosen.row["id"] == "clean" and why == []
    chosen, why = pick_prompt(items[:4], frames_per_s=100)  # none fits: the closest to 6 s, and why
    assert chosen.row["id"] == "exact-but-clipped" and why == ["flagged clipping: samples at full scale (distorted)"]
    assert "music was removed" in " ".join(pick_prompt(items[2:3], 100)[1])

    # the test corpus's clips are all shorter than 5 s: the run says which clip it took and why, in its log and
    # in the voice's config
    prompt = read_config(f5_voice / "checkpoints" / "step-2")["prompt"]
    assert all(part in prompt["warning"] for part in (prompt["id"], "works best", "--prompt ID"))
    assert f"warning: the voice's reference clip {prompt['id']}: " in (f5_voice / "train.log").read_text()


# ------------------------------------------------------------------------------------ resuming with new symbols
def test_resuming_after_the_dataset_gained_a_symbol_grows_the_model_and_goes_on(corpus, tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    shutil.copytree(corpus.dataset_dir("am"), ws.dataset_dir("am"), dirs_exist_ok=True)  # its features too
    assert run(prepare_run(f5_config(ws, "f5-grow", max_steps=2)))["step"] == 2
    rows = load_manifest(ws, "am")
    row = next(r for r in rows if r["split"] == "train")
    row["phonemes"] = "ʕ a | " + (row["phonemes"] or "s ə l a m")  # a reviewed phoneme the table has never seen

    save_manifest(ws, "am", rows)
    result = run(prepare_run(f5_config(ws, "f5-grow", max_steps=4)))
    assert result["state"] == "finished" and result["step"] == 4
    saved = read_config(ws.run_dir("f5-grow") / "checkpoints" / "step-4")
    assert saved["text"]["symbols"][-1] == "ʕ" and saved["model"]["text_num_embeds"] == len(saved["text"]["symbols"])
    state = load_trainer_state(ws.run_dir("f5-grow") / "checkpoints" / "step-4")
    assert state["modules"]["model"]["transformer.text_embed.text_embed.weight"].shape[0] == \
        len(saved["text"]["symbols"]) + 1
    log = (ws.run_dir("f5-grow") / "train.log").read_text()
    assert "resume: continuing from" in log and "1 symbols added to the table (ʕ)" in log


# ------------------------------------------------------------------------------------ an F5 voice, as the tab uses it
def test_the_pronunciation_dictionary_is_what_an_f5_voice_speaks_and_shows(f5_voice, tmp_path, monkeypatch):
    from utils import inference
    from utils.f5.speech import F5Speaker
    from utils.text import save_user_dict

    ws = Workspace.open(tmp_path / "ws")
    shutil.copytree(f5_voice / "checkpoints" / "step-2", ws.voice_dir("f5"))
    symbols = read_config(ws.voice_dir("f5"))["text"]["symbols"]
    said = ["m", "a", "m", "a"]  # ሰላም read as "mama": not what the rules say (s ə l a m)
    assert set(said) <= set(symbols)
    save_user_dict(ws, {"ሰላም": said})
    spoken = []
    real = F5Speaker.synthesise_batch
    monkeypatch.setattr(F5Speaker, "synthesise_batch",
                        lambda self, tokens, *a, **k: spoken.extend(tokens) or real(self, tokens, *a, **k))
    _, _, info = inference.synthesize(ws, "f5", "ሰላም ነው።", steps=2, vocoder="griffin-lim")
    shown = info["rows"][0]["phonemes"]
    assert shown.startswith("m a m a |")
    assert " ".join("|" if symbols[i] == " " else symbols[i] for i in spoken[0]) == shown


def test_an_f5_run_compares_two_checkpoints_from_the_same_noise(corpus, f5_voice):
    from utils import inference

    first, second = (str((f5_voice / "checkpoints" / f"step-{n}").relative_to(corpus.root)) for n in (1, 2))
    options = dict(steps=2, temperature=0.667, length_scale=1.0, vocoder="griffin-lim", seed=3)  # as the A/B tab
    a, sr, info_a = inference.synthesize(corpus, first, "ሰላም ነው።", **options)
    b, _, info_b = inference.synthesize(corpus, second, "ሰላም ነው።", **options)
    again, _, _ = inference.synthesize(corpus, first, "ሰላም ነው።", **options)
    assert sr == 24000 and info_a["checkpoint"] == first and info_b["checkpoint"] == second
    assert torch.equal(torch.from_numpy(a), torch.from_numpy(again))  # the same seed: the same starting noise
    assert a.shape != b.shape or not torch.equal(torch.from_numpy(a), torch.from_numpy(b))
    assert "vocoder: griffin-lim" in inference.describe(info_b)


def test_an_f5_voice_speaks_a_text_file_into_a_zip(corpus, f5_voice, tmp_path):
    from utils import inference
    from utils.events import run_to_end

    lines = tmp_path / "lines.txt"
    lines.write_text("greeting|ሰላም ነው።\n# a comment\nlatin|hello world\nዛሬ ጥሩ ቀን ነው።\n", encoding="utf-8")
    result = run_to_end(inference.speak_file(corpus, "f5-voice", lines, vocoder="griffin-lim", steps=2, seed=0))
    assert result["written"] == 2 and [line for line, _ in result["failed"]] == ["line 3"]
    with zipfile.ZipFile(result["zip"]) as zf:
        assert sorted(zf.namelist()) == ["00004.wav", "greeting.wav", "manifest.csv"]
        assert len(zf.read("greeting.wav")) > 1000


def test_export_voice_command_exports_an_f5_run_that_speaks(corpus, f5_voice):
    from utils.inference import Voice

    proc = app("export-voice", "f5-voice", "f5-cli", "--vocoder", "griffin-lim", "--workspace", str(corpus.root))
    assert proc.returncode == 0, proc.stderr[-2000:]
    folder = corpus.voice_dir("f5-cli")
    config = read_config(folder)
    assert config["engine"] == "f5" and config["voice"]["source"] == "runs/f5-voice/checkpoints/step-2"
    with zipfile.ZipFile(corpus.root / "exports" / "f5-cli.zip") as zf:
        assert {"f5-cli/model.safetensors", "f5-cli/config.json", "f5-cli/README.md"} <= set(zf.namelist())
    assert not (folder / "LICENSE.txt").exists()  # a tiny F5 trained from zero inherits no base's licence
    wave, _, _ = Voice.load(folder).synthesize("ሰላም ነው።", steps=2)
    assert len(wave) > 0


def test_an_exported_fine_tuned_f5_voice_carries_the_non_commercial_licence(corpus, finetuned):
    from utils.inference.export import export_voice

    folder = export_voice(corpus, "f5-finetune", "f5-nc", vocoder="griffin-lim")
    licence = (folder / "LICENSE.txt").read_text(encoding="utf-8")
    assert "CC-BY-NC-4.0" in licence and "no commercial use" in licence and "SWivid" in licence
    readme = (folder / "README.md").read_text(encoding="utf-8")
    assert "**Licence: F5-TTS v1 Base weights by SWivid et al." in readme and "see LICENSE.txt" in readme
    with zipfile.ZipFile(corpus.root / "exports" / "f5-nc.zip") as zf:
        assert zf.read("f5-nc/LICENSE.txt").decode() == licence


def test_the_base_download_reports_its_progress_in_plain_lines(tmp_path):
    """The Training tab shows train.log: a 1.35 GB download must say how far it is, in MB and percent."""
    import re

    from utils.f5.base import progress_lines
    from utils.hub import byte_progress

    lines = []
    with byte_progress(progress_lines(total_mb=4, log=lines.append))(total=4 * 2**20, unit="B") as bar:
        for _ in range(4 * 8):  # 128 kB at a time, as the hub's byte bar moves
            bar.update(2**17)
    shown = [tuple(map(int, re.search(r"(\d+) of about 4 MB \((\d+) %\)", line).groups())) for line in lines]
    assert len(shown) >= 3 and shown == sorted(shown) and shown[-1] == (4, 100), lines


def test_an_f5_voice_speaks_with_its_own_sampler_steps_unless_told(f5_voice, monkeypatch):
    """F5's flow sampler wants 32 steps where Matcha's decoder wants 10: `synth --voice` and the services use the
    voice's engine's own number when the caller names none (the Inference tab shows the same default)."""
    from utils.f5 import SAMPLE_STEPS
    from utils.f5.speech import F5Speaker
    from utils.inference import DEFAULT_STEPS, Voice

    asked = []
    real = F5Speaker.synthesise_batch
    monkeypatch.setattr(F5Speaker, "synthesise_batch",
                        lambda self, tokens, spk, n_steps, *a, **k: asked.append(n_steps) or real(self, tokens, spk, 2, *a, **k))
    voice = Voice.load(f5_voice / "checkpoints" / "step-2")
    voice.synthesize("ሰላም ነው።")
    voice.synthesize("ሰላም ነው።", steps=3)
    assert asked == [SAMPLE_STEPS, 3] and SAMPLE_STEPS != DEFAULT_STEPS


def test_the_batch_probe_keeps_the_fine_tuning_rate_and_does_not_put_back_matchas(corpus, tmp_path):
    """After the probe (a GPU with an automatic batch), set_effective_batch rescales the automatic learning rate: it
    must scale F5's own fine-tuning rate (1e-5 for the public base's size; a tiny base's from-zero rate / 7.5), not the
    default family's preset rate (2e-3 at tiny), which would wreck the base."""
    from utils import hardware
    from utils.f5.adapter import FINE_TUNE_LR, PRETRAIN_LR, TINY_LR, F5Adapter, auto_rate
    from utils.matcha.settings import PRESET_LR
    from utils.training import optimization as opt

    base = public_base(tmp_path / "base")
    adapter = F5Adapter(f5_config(corpus, "f5-rate", init=str(base)))
    m = adapter.machine
    assert m.lr == pytest.approx(TINY_LR * FINE_TUNE_LR / PRETRAIN_LR) and m.lr < PRESET_LR["tiny"][0]
    rec = {"lr_batch_scale": hardware.Setting(1.0, "one process")}
    opt.set_effective_batch(m, adapter.cfg, 1, rec)  # what apply_probe does once a probe measured the batch
    assert m.lr == pytest.approx(TINY_LR * FINE_TUNE_LR / PRETRAIN_LR) and "F5-TTS issue 87" in m.reasons["lr"]
    big = corpus.root / "pretrained" / "full-size"  # the public base's size, by its header: the public rate
    big.mkdir(parents=True, exist_ok=True)
    header = json.dumps({"w": {"dtype": "F32", "shape": [20000, 20000], "data_offsets": [0, 0]}}).encode()
    (big / "model_1250000.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    assert auto_rate(f5_config(corpus, "f5-big", init=str(big)))[0] == FINE_TUNE_LR


def fake_report(memory_gb: float):
    """What utils.hardware.detect says of a machine with one GPU of that size (CPU tests of the GPU case)."""
    from utils.hardware import GPUInfo, HardwareReport

    return HardwareReport(gpus=[GPUInfo(0, "NVIDIA L4", memory_gb, "8.9")], cpu_count=8, ram_gb=32, disk_free_gb=100)


def test_the_f5_request_check_takes_the_machine_a_gpu_passes_this_cpu_is_refused(tiny_runs_copy):
    from utils import hardware
    from utils.f5 import check_request

    ws = tiny_runs_copy
    cfg = tiny_matcha_config(ws, "f5-base", engine="f5", preset="base", init="SWivid/F5-TTS")
    check_request(cfg, fake_report(22.0))  # an L4: allowed
    with pytest.raises(StudioError, match="16 GiB GPU or larger"):
        check_request(cfg, fake_report(8.0))
    with pytest.raises(StudioError, match="This machine cannot fine-tune the F5-TTS base: no GPU.*choose the "
                                          "model size tiny and no base.*--preset tiny, without --init"):
        check_request(cfg, hardware.detect(ws.root))
    check_request(tiny_matcha_config(ws, "f5-tiny", engine="f5"), hardware.detect(ws.root))  # the smoke test stays
    big = ws.root / "pretrained" / "big-base"  # the full-size base in a folder: its header says 400 M parameters
    big.mkdir(parents=True)
    header = json.dumps({"w": {"dtype": "F32", "shape": [20000, 20000], "data_offsets": [0, 0]}}).encode()
    (big / "model_1250000.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    (big / "vocab.txt").write_text("a\n", encoding="utf-8")
    with pytest.raises(StudioError, match="cannot fine-tune the F5-TTS base"):
        check_request(tiny_matcha_config(ws, "f5-folder", engine="f5", init=str(big)), hardware.detect(ws.root))


def test_the_f5_base_is_refused_here_before_any_run_folder_queue_entry_or_download(tiny_runs_copy):
    from utils import jobs
    from utils.runs import control

    ws = tiny_runs_copy
    before = sorted(p.name for p in ws.runs.iterdir())
    with pytest.raises(StudioError, match="This machine cannot fine-tune the F5-TTS base"):
        control.start_training(ws, "am", "base", "f5-queued", engine="f5", accept_licence=True)
    proc = app("train", "--engine", "f5", "--dataset", "am", "--init", "SWivid/F5-TTS", "--accept-licence",
               "--run", "f5-cli", "--background", "--workspace", str(ws.root))
    assert proc.returncode == 2 and "This machine cannot fine-tune the F5-TTS base: no GPU" in proc.stderr
    assert "--preset tiny, without --init" in proc.stderr
    assert sorted(p.name for p in ws.runs.iterdir()) == before
    assert not [r for r in jobs.list_runs(ws) if r["name"].startswith("f5-") and r["name"] != "f5"]
    assert not (ws.root / "pretrained" / "f5tts-v1-base").exists()
