"""The OmniVoice engine on the shared trainer, on the CPU with a tiny random OmniVoice in the hub's layout
(utils/omnivoice/tiny.py) and espeak-ng Amharic: a fine-tune that trains (finite loss, weights that move),
evaluates (held-out MCD of sentences spoken in the reference clip's voice) and resumes onto the same curve; the
codec's tokens extracted once per dataset and codec, a killed extraction keeping what it wrote; out-of-memory
splits and the mixed-precision fallback; a checkpoint that speaks through the studio's Voice, exports with its
reference clip and speaks again; the adapter's contract and its memory plan."""
from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import add_joined_clips, make_dataset
from utils.datasets import load_manifest
from utils.events import StudioError
from utils.training import TrainConfig, prepare_run, run
from utils.training.checkpoint import read_config
from utils.workspace import Workspace, read_jsonl

BASE = "pretrained/tiny-omnivoice"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Workspace:
    from utils.omnivoice.tiny import write_tiny_base

    ws = make_dataset(tmp_path_factory.mktemp("ws"), n_train=3, n_val=1, voices=("am",), max_chars=40)
    add_joined_clips(ws)  # the reference clip: 3-20 s
    write_tiny_base(ws.root / BASE)
    return ws


def omni_config(ws: Workspace, run_name: str, **kw) -> TrainConfig:
    base = dict(workspace=str(ws.root), dataset="am", run=run_name, engine="omnivoice", init=BASE, max_steps=4,
                log_every=1, eval_every=0, checkpoint_every=2, keep_checkpoints=3, eval_clips=1, sample_clips=1,
                ode_steps=2, ema_decay=0.9, lr=1e-3)
    return TrainConfig(**{**base, **kw})


def losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r}


@pytest.fixture(scope="module")
def straight(corpus) -> Path:
    """Four steps with an evaluation at the end; its run folder."""
    result = run(prepare_run(omni_config(corpus, "omni-straight", eval_every=4)))
    assert result["state"] == "finished" and result["step"] == 4
    return corpus.run_dir("omni-straight")


def test_a_fine_tune_trains_evaluates_and_resumes_onto_the_same_curve(corpus, straight):
    curve = losses(straight)
    assert sorted(curve) == [1, 2, 3, 4] and all(np.isfinite(list(curve.values())))
    evaluation = [r for r in read_jsonl(straight / "metrics.jsonl") if "mcd" in r]
    assert evaluation and evaluation[-1]["mcd"] > 0 and evaluation[-1]["val_loss"] > 0
    assert {"mcd_ema", "mcd_raw"} <= set(evaluation[-1])
    assert any((straight / "samples" / "step-4").glob("*.wav"))
    log = (straight / "train.log").read_text()
    assert "tokens: 0 of 5 clips already encoded" in log and "reference clip: am-long-000" in log

    folder = straight / "checkpoints" / "step-4"
    saved, before = load_file(str(folder / "model.safetensors")), load_file(str(corpus.root / BASE / "model.safetensors"))
    assert set(before) <= set(saved)  # OmniVoice's own keys, as the package saves them
    assert not torch.equal(saved["audio_heads.weight"], before["audio_heads.weight"])  # the weights moved
    config = read_config(folder)
    assert config["engine"] == "omnivoice" and config["model"]["weights"] == "own"
    assert config["prompt"]["id"] == "am-long-000" and (folder / "prompt.wav").is_file()
    onward = run(prepare_run(omni_config(corpus, "omni-onward", init="omni-straight", max_steps=1, evaluate=False)))
    assert onward["state"] == "finished"  # a fine-tune of this studio continued by its run's name, its weights put on
    assert "continuing the OmniVoice fine-tune" in (corpus.run_dir("omni-onward") / "train.log").read_text()

    first = run(prepare_run(omni_config(corpus, "omni-resumed", max_steps=2, evaluate=False)))
    assert first["step"] == 2
    second = run(prepare_run(omni_config(corpus, "omni-resumed", evaluate=False)))
    assert second["state"] == "finished" and second["step"] == 4
    log = (corpus.run_dir("omni-resumed") / "train.log").read_text()
    assert "tokens: 5 of 5 clips already encoded" in log and "resume: continuing from" in log
    resumed = losses(corpus.run_dir("omni-resumed"))
    for step in (1, 2, 3, 4):  # same masks, same batches, same weights: same losses
        assert resumed[step] == pytest.approx(curve[step], rel=1e-5, abs=1e-6), step


def test_a_run_in_a_workspace_that_moved_resumes_with_the_base_there(corpus, straight, tmp_path):
    """A run copied with its workspace (Colab to Lightning AI) names its base relative to the workspace, so it
    resumes from the moved workspace's own base, not the old place's."""
    from utils.omnivoice.base import base_of

    def others(folder, names):  # the runs of other tests stay behind
        return [n for n in names if Path(folder).name == "runs" and n != "omni-straight"]

    moved = Workspace.open(shutil.copytree(corpus.root, tmp_path / "moved", ignore=others))
    checkpoint = moved.run_dir("omni-straight") / "checkpoints" / "step-4"
    assert read_config(checkpoint)["model"]["base"] == BASE
    assert base_of(checkpoint, read_config(checkpoint)) == moved.root / BASE
    result = run(prepare_run(omni_config(moved, "omni-straight", max_steps=5, evaluate=False)))
    assert result["state"] == "finished" and result["step"] == 5
    log = (moved.run_dir("omni-straight") / "train.log").read_text()
    assert f"parameters from {moved.root / BASE}" in log.split("resume: continuing from")[-1]


def test_each_held_out_sentence_is_spoken_and_scored_in_its_own_speakers_voice(corpus, monkeypatch):
    """On a dataset of two speakers every held-out sentence was spoken in one clip's voice and scored against the
    other speaker's recordings too; that MCD picked the best checkpoint."""
    from utils.omnivoice import speech

    ws = make_dataset(corpus.root, name="two", n_train=2, n_val=2, voices=("am", "am+f2"), max_chars=40)
    long_a, long_b = add_joined_clips(ws, "two", n=2)
    rows = [{**r, "speaker": "am_f2"} if r["id"] == long_b["id"] else r for r in read_jsonl(
        ws.dataset_dir("two") / "manifest.jsonl")]
    (ws.dataset_dir("two") / "manifest.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n"
                                                                   for r in rows))
    spoken = []
    clone = speech.clone_prompt
    monkeypatch.setattr(speech, "clone_prompt", lambda model, wave, text: spoken.append(text) or clone(model, wave,
                                                                                                      text))
    result = run(prepare_run(omni_config(ws, "omni-two", dataset="two", max_steps=1, eval_every=1, eval_clips=2,
                                         sample_clips=0, ode_steps=1)))
    assert result["state"] == "finished"
    log = (ws.run_dir("omni-two") / "train.log").read_text()
    assert f"in its own speaker's voice (am: {long_a['id']}, am_f2: {long_b['id']})" in log
    assert len(set(spoken)) == 2, spoken  # two reference clips cloned at each evaluation, one a speaker


class CountingCodec:
    """The real codec, counting its encodes; after `die_after` of them it is killed (KeyboardInterrupt)."""

    def __init__(self, codec, die_after: int | None = None):
        self.codec, self.calls, self.die_after = codec, 0, die_after
        self.config = codec.config

    def encode(self, wave):
        if self.die_after is not None and self.calls >= self.die_after:
            raise KeyboardInterrupt("killed")
        self.calls += 1
        return self.codec.encode(wave)


def test_tokens_are_extracted_once_per_codec_and_encoding_and_a_killed_extraction_keeps_what_it_wrote(corpus, tmp_path,
                                                                                                     monkeypatch):
    from utils.omnivoice.base import load_codec
    from utils.omnivoice.tokens import cache_dir, codec_key, extract

    ws = Workspace.open(tmp_path / "ws")
    shutil.copytree(corpus.dataset_dir("am"), ws.dataset_dir("am"), ignore=shutil.ignore_patterns("features"))
    rows = load_manifest(ws, "am")
    base, lines = corpus.root / BASE, []
    key, codec = codec_key(base), load_codec(base)

    killed = CountingCodec(codec, die_after=2)
    with pytest.raises(KeyboardInterrupt):
        extract(ws, "am", rows, killed, key, "cpu", lines.append)
    folder = cache_dir(ws, "am", key)
    assert len(list(folder.glob("*.npy"))) == 2 and not list(folder.glob(".*"))  # whole entries, no half-written

    again = CountingCodec(codec)
    paths = extract(ws, "am", rows, again, key, "cpu", lines.append)
    assert again.calls == len(rows) - 2 and sorted(paths) == sorted(r["id"] for r in rows)
    tokens = np.load(paths["am-long-000"])
    assert tokens.dtype == np.int16 and tokens.shape[0] == 8 and tokens.shape[1] == int(rows[0]["duration"] * 25)

    cached = CountingCodec(codec)
    assert extract(ws, "am", rows, cached, key, "cpu", lines.append) == paths and cached.calls == 0
    assert "tokens: 5 of 5 clips already encoded" in lines[-1]

    other = tmp_path / "other-codec"  # the same weights under another configuration: never the same entries
    shutil.copytree(base / "audio_tokenizer", other / "audio_tokenizer")
    (other / "audio_tokenizer" / "config.json").write_text((base / "audio_tokenizer" / "config.json").read_text() + " ")
    assert codec_key(other) != key

    from utils.omnivoice import tokens  # a changed encode() (its cut, its level) never reuses older tokens
    monkeypatch.setattr(tokens, "ENCODING", tokens.ENCODING + 1)
    assert codec_key(base) != key


def test_training_clips_and_reference_clips_are_encoded_at_the_packages_level(corpus):
    """The package trains on clips brought to a peak of 0.9; the studio's clips sit near -23 dBFS, 3-6 dB below. A
    clip's tokens no longer depend on the level it was recorded at, and a voice's reference clip reaches the codec at
    the same level (then the package's own lift of a quiet reference)."""
    from types import SimpleNamespace

    from utils.audio import load_audio
    from utils.datasets.features import audio_path
    from utils.omnivoice.base import load_codec
    from utils.omnivoice.speech import clone_prompt
    from utils.omnivoice.tokens import encode

    row = load_manifest(corpus, "am")[0]
    wave, _ = load_audio(audio_path(corpus, "am", row), 24_000)
    codec = load_codec(corpus.root / BASE)
    assert np.array_equal(encode(codec, wave * 0.3, "cpu"), encode(codec, wave, "cpu"))

    given = []
    model = SimpleNamespace(create_voice_clone_prompt=lambda ref_audio, ref_text: given.append(ref_audio[0]) or
                            SimpleNamespace(ref_text=ref_text))
    clone_prompt(model, wave * 0.3, "ሰላም ነው።")
    assert float(given[0].abs().max()) == pytest.approx(0.9, rel=1e-4)


def test_out_of_memory_splits_the_batch_and_failing_mixed_precision_goes_on_in_fp32(corpus):
    result = run(prepare_run(omni_config(corpus, "omni-faults", precision="bf16", fault_oom_above_frames=400,
                                         fault_nan_steps=[0, 1], max_bad_steps=2, evaluate=False, max_steps=3)))
    assert result["state"] == "finished" and result["step"] == 3
    log = (corpus.run_dir("omni-faults") / "train.log").read_text()
    assert "micro-batch halved" in log and "continuing in fp32 from the last good weights" in log
    assert np.isfinite(losses(corpus.run_dir("omni-faults"))[3])


def test_the_batch_probe_reaches_the_budget_in_micro_batches_when_less_fits(corpus):
    """As on a GPU: what fits is measured with real steps (here an out-of-memory above 400 positions stands in for
    the card), and the recipe's update is kept by accumulating micro-batches."""
    result = run(prepare_run(omni_config(corpus, "omni-probe", probe="true", fault_oom_above_frames=400, max_steps=1,
                                         evaluate=False)))
    assert result["state"] == "finished"
    resolved = read_config(corpus.run_dir("omni-probe"))["resolved"]
    assert resolved["max_frames_per_batch"] < 1024 and resolved["grad_accumulation"] >= 2
    assert "positions fitted in one real step" in (corpus.run_dir("omni-probe") / "train.log").read_text()


def test_the_batch_probe_stops_at_the_budget_where_the_budget_fits(corpus):
    """Its batches never pass the recipe's budget, so tries beyond it ran the same real step again (4 on an H100 for
    a 47059 'positions' log line): the probe stops at the budget, before the headroom it keeps."""
    result = run(prepare_run(omni_config(corpus, "omni-probe-fits", probe="true", max_steps=1, evaluate=False)))
    assert result["state"] == "finished"
    run_dir = corpus.run_dir("omni-probe-fits")
    config = read_config(run_dir)
    budget, headroom = config["resolved"]["max_frames_per_batch"], config["train"]["probe_headroom"]
    tried = [int(n) for n in re.findall(r"probe: (\d+) frames per batch fits", (run_dir / "train.log").read_text())]
    assert tried and max(tried) == math.ceil(budget / headroom) and len(tried) <= 2, tried
    assert config["resolved"]["grad_accumulation"] == 1


def test_a_checkpoint_speaks_as_a_voice_exports_with_its_clip_and_speaks_again(corpus, straight):
    from utils.inference import Voice
    from utils.inference.export import export_voice

    wave, sr, info = Voice.load(straight / "checkpoints" / "step-4").synthesize("ሰላም ነው። ዛሬ ጥሩ ቀን ነው።", steps=2)
    assert sr == 24_000 and info["spoken"] == 2 and len(wave) > sr * 0.1 and np.isfinite(wave).all()
    exported = export_voice(corpus, "omni-straight", "omni-abebe")
    assert {"model.safetensors", "prompt.wav", "config.json", "LICENSE.txt"} <= {p.name for p in exported.iterdir()}
    assert "CC-BY-NC-4.0" in (exported / "LICENSE.txt").read_text()
    again, sr, _ = Voice.load(exported).synthesize("ሰላም ነው።", steps=2)
    assert sr == 24_000 and len(again) > 0


def test_the_disk_estimate_is_what_a_checkpoint_writes(corpus, straight):
    """The Training tab said "about 7 GB more" for the trainer state; the loop saves the weights again, AdamW's two
    moments and the EMA (about 9.8 GB). The estimate, made for the tiny base's parameters, is its run's files."""
    from utils.hardware import HardwareReport
    from utils.omnivoice.expectations import checkpoint_gb, guidance

    parameters = sum(t.numel() for t in load_file(str(corpus.root / BASE / "model.safetensors")).values())
    weights, state = checkpoint_gb(parameters)
    newest = straight / "checkpoints" / "step-4"
    assert (newest / "model.safetensors").stat().st_size / 1e9 == pytest.approx(weights, rel=0.05)
    assert (newest / "trainer_state.pt").stat().st_size / 1e9 == pytest.approx(state, rel=0.05)
    cpu = HardwareReport(gpus=[], cpu_count=2, ram_gb=8.0, disk_free_gb=100.0)
    disk = next(line for line in guidance(corpus, omni_config(corpus, "x"), cpu) if line.startswith("Disk:"))
    assert "about 2.5 GB)" in disk and "about 9.8 GB more, 12.3 GB in all" in disk, disk


def test_the_adapter_answers_the_contract_and_plans_memory_by_the_base_size(corpus):
    from utils.family_contract import check_adapter, optional
    from utils.omnivoice.adapter import OmniVoiceAdapter
    from utils.omnivoice.expectations import TRAIN_FIXED_GB

    adapter = OmniVoiceAdapter(omni_config(corpus, "omni-contract"))
    check_adapter(adapter)
    assert optional(adapter, "state_newest_only") and optional(adapter, "save_checkpoint")
    assert adapter.machine.max_frames_per_batch == 1024 and adapter.machine.betas == (0.9, 0.999)
    assert OmniVoiceAdapter.memory_plan(omni_config(corpus, "x")).fixed_gb == 0.0  # the tiny base
    full = OmniVoiceAdapter.memory_plan(omni_config(corpus, "x", init="k2-fsa/OmniVoice"))
    assert full.fixed_gb == pytest.approx(TRAIN_FIXED_GB) and full.frame_factor > 1
    default = OmniVoiceAdapter(omni_config(corpus, "omni-lr", lr="auto"))
    assert default.machine.lr == 1e-5 and "recipe" in default.machine.reasons["lr"]
    assert [round(default.lr_at(s) / 1e-5, 3) for s in (0, 1, 2)] == [1.0, 1.0, 0.75]


def test_the_full_base_is_refused_on_a_machine_that_cannot_fine_tune_it_and_a_t4_is_taken(tmp_path):
    """Said before anything is read or downloaded: no GPU (a clip voice needs only the base), a 12 GiB card; a
    T4's 15 GiB is taken with fp16 and micro-batches; --device cpu runs anyway (to check a set-up)."""
    from utils.hardware import GPUInfo, HardwareReport
    from utils.omnivoice.expectations import check_request

    def report(*gpus):
        return HardwareReport(gpus=list(gpus), cpu_count=2, ram_gb=24.0, disk_free_gb=100.0)

    cfg = TrainConfig(workspace=str(tmp_path), dataset="am", run="r", engine="omnivoice", init="k2-fsa/OmniVoice")
    with pytest.raises(StudioError, match="no GPU.*a clip voice .* needs no GPU, only the OmniVoice base"):
        check_request(cfg, report())
    small = GPUInfo(index=0, name="Small card", memory_gb=12.0, compute_capability="8.6")
    with pytest.raises(StudioError, match="12 GiB"):
        check_request(cfg, report(small))
    t4 = GPUInfo(index=0, name="Tesla T4", memory_gb=15.0, compute_capability="7.5")
    check_request(cfg, report(t4))
    check_request(TrainConfig(**{**cfg.to_dict(), "device": "cpu"}), report())


def test_the_guidance_says_the_time_from_a_measured_run_else_the_cards_throughput_and_renders_as_written(corpus,
                                                                                                        straight):
    """Before Start: the time of the run (an estimate from the card; once an OmniVoice run of this workspace trained
    on this kind of device, its measured speed), the memory and the disk, in lines Markdown shows as written (two
    "~" in a line were struck through on the Training tab)."""
    import json

    from utils.hardware import GPUInfo, HardwareReport
    from utils.omnivoice.expectations import guidance, machine_verdict

    h100 = HardwareReport(gpus=[GPUInfo(0, "NVIDIA H100 80GB HBM3", 79.0, "9.0")], cpu_count=16, ram_gb=125.0,
                          disk_free_gb=100.0)
    cfg = omni_config(corpus, "next", init="k2-fsa/OmniVoice", max_steps=3000)
    lines = guidance(corpus, cfg, h100)
    time_line = next(line for line in lines if line.startswith("Time:"))
    assert "3,000 updates" in time_line and "estimated for 1 x NVIDIA H100" in time_line
    assert not any(line.count("~") >= 2 for line in [*lines, machine_verdict(h100)[1]])

    config_path = straight / "config.json"  # the tiny run, as if it had fine-tuned a base on a GPU
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "resolved": {**config["resolved"], "device": "cuda"}}))
    try:
        time_line = next(line for line in guidance(corpus, cfg, h100) if line.startswith("Time:"))
    finally:
        config_path.write_text(json.dumps(config))
    assert f"measured by run {straight.name}" in time_line
