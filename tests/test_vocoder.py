"""Vocoder: public checkpoint format, our format, Griffin-Lim, discriminators and the GAN trainer."""
from __future__ import annotations

import collections
import contextlib
import os
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from models.discriminators import MultiPeriodDiscriminator, MultiResolutionDiscriminator
from models.vocoder import PRESETS, Vocoder
from tests.helpers import espeak_amharic, sentences
from utils.audio import FeatureConfig, load_audio, log_mel, save_audio
from utils.events import StudioError, run_to_end
from utils.jobs import torchrun
from utils.training.checkpoint import load_trainer_state
from utils.training.loop import TrainingLoop, drain
from utils.training.faults import with_faults
from utils.vocoder import griffin_lim, load_vocoder, save_vocoder, vocode
from utils.training.gan import frozen
from utils.vocoder.training import (VocoderAdapter, VocoderTrainConfig, generator_losses, prepare_vocoder_run,
                                    train_vocoder)
from utils.workspace import Workspace, read_json, read_jsonl, write_jsonl

ROOT = Path(__file__).resolve().parent.parent

PUBLIC_CONFIG_YAML = """\
feature_extractor:
  class_path: vocos.feature_extractors.MelSpectrogramFeatures
  init_args:
    sample_rate: 24000
    n_fft: 1024
    hop_length: 256
    n_mels: 100
    padding: center

backbone:
  class_path: vocos.models.VocosBackbone
  init_args:
    input_channels: 100
    dim: 512
    intermediate_dim: 1536
    num_layers: 8

head:
  class_path: vocos.heads.ISTFTHead
  init_args:
    dim: 512
    n_fft: 1024
    hop_length: 256
    padding: center
"""


def public_state_dict(seed: int = 0) -> dict:
    """The 83 tensors of charactr/vocos-mel-24khz's pytorch_model.bin, names and shapes written out
    from the published layout (not from our module), randomly initialised."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g) * 0.02  # noqa: E731
    sd = {"feature_extractor.mel_spec.spectrogram.window": torch.hann_window(1024),
          "feature_extractor.mel_spec.mel_scale.fb": torch.rand(513, 100, generator=g),
          "backbone.embed.weight": r(512, 100, 7), "backbone.embed.bias": r(512),
          "backbone.norm.weight": 1 + r(512), "backbone.norm.bias": r(512)}
    for i in range(8):
        p = f"backbone.convnext.{i}."
        sd.update({p + "dwconv.weight": r(512, 1, 7), p + "dwconv.bias": r(512),
                   p + "norm.weight": 1 + r(512), p + "norm.bias": r(512),
                   p + "pwconv1.weight": r(1536, 512), p + "pwconv1.bias": r(1536),
                   p + "pwconv2.weight": r(512, 1536), p + "pwconv2.bias": r(512),
                   p + "gamma": torch.full((512,), 0.125)})
    sd.update({"backbone.final_layer_norm.weight": 1 + r(512), "backbone.final_layer_norm.bias": r(512),
               "head.out.weight": r(1026, 512), "head.out.bias": r(1026), "head.istft.window": torch.hann_window(1024)})
    assert len(sd) == 83
    return sd


@pytest.fixture(scope="module")
def public_folder(tmp_path_factory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("vocos-mel-24khz")
    sd = public_state_dict()
    torch.save(sd, folder / "pytorch_model.bin")
    (folder / "config.yaml").write_text(PUBLIC_CONFIG_YAML)
    return folder, sd


def test_public_vocos_folder_loads_every_weight(public_folder):
    folder, sd = public_folder
    model = load_vocoder(folder)
    assert model.cfg == PRESETS["mel-24khz"]
    loaded = model.state_dict()
    for key, value in sd.items():
        if not key.startswith("feature_extractor."):
            assert torch.equal(loaded[key], value), key
    assert sum(p.numel() for p in model.parameters()) == 13_531_650  # the published parameter count


def test_public_weights_file_alone_loads_and_vocodes_with_the_right_length(public_folder):
    folder, _ = public_folder
    model = load_vocoder(folder / "pytorch_model.bin")
    wave = vocode(model, torch.randn(100, 40))
    assert wave.shape == (256 * 39,) and wave.dtype == np.float32 and np.isfinite(wave).all()


def test_public_loader_refuses_pickles_that_run_code(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (marker,))

    (tmp_path / "pytorch_model.bin").write_bytes(pickle.dumps({"backbone.embed.weight": Evil()}))
    with pytest.raises(StudioError, match="refused: .*could run code"):
        load_vocoder(tmp_path)
    assert not marker.exists()


def test_weights_that_do_not_fit_the_config_are_named(tmp_path, public_folder):
    _, sd = public_folder
    torch.save({k: v for k, v in sd.items() if k != "head.out.bias"}, tmp_path / "pytorch_model.bin")
    (tmp_path / "config.yaml").write_text(PUBLIC_CONFIG_YAML)
    with pytest.raises(StudioError, match="head.out.bias"):
        load_vocoder(tmp_path)


def test_our_format_round_trips_exactly(tmp_path):
    model = Vocoder(PRESETS["tiny"]).eval()
    folder = save_vocoder(model, tmp_path / "voc")
    assert read_json(folder / "config.json")["kind"] == "vocos"
    again = load_vocoder(folder)
    mel = torch.randn(100, 20)
    np.testing.assert_array_equal(vocode(model, mel), vocode(again, mel))


def test_hub_id_that_cannot_be_downloaded_says_what_to_do(monkeypatch):
    import huggingface_hub

    def offline(*args, **kwargs):
        raise OSError("no network")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(StudioError, match="cannot reach the Hugging Face hub"):
        load_vocoder("charactr/vocos-mel-24khz")


def test_missing_vocoder_path_is_a_clear_error(tmp_path):
    with pytest.raises(StudioError, match="not found"):
        load_vocoder(tmp_path / "nothing" / "here")


def test_istft_head_stays_fp32_under_bf16_autocast():
    model = Vocoder(PRESETS["tiny"])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        wave = model(torch.randn(2, 100, 12))
    assert wave.dtype == torch.float32 and wave.shape == (2, 256 * 11)


def test_griffin_lim_rebuilds_speech_whose_mel_matches(tmp_path):
    wav, _ = load_audio(espeak_amharic(sentences(1)[0], tmp_path / "a.wav"), 24000)
    mel = log_mel(wav)
    out = griffin_lim(mel, n_iter=32)
    assert out.shape == (256 * (mel.shape[-1] - 1),)
    speech = mel > mel.max() - 8  # bins within ~35 dB of the loudest
    err = (log_mel(out)[:, : mel.shape[-1]] - mel).abs()[speech].mean()
    noise_err = (log_mel(np.random.default_rng(0).normal(0, 0.05, len(out)).astype(np.float32))
                 [:, : mel.shape[-1]] - mel).abs()[speech].mean()
    assert err < 0.6 and err < noise_err / 3


def test_discriminators_give_logits_and_feature_maps_per_sub_discriminator():
    wave = torch.randn(2, 4096)
    logits, feats = MultiPeriodDiscriminator()(wave)
    assert len(logits) == 5 and all(l.shape[0] == 2 for l in logits) and all(len(f) == 5 for f in feats)
    logits, feats = MultiResolutionDiscriminator()(wave)
    assert len(logits) == 3 and all(len(f) == 6 for f in feats)


def make_dataset(ws: Workspace, name: str = "speech", n: int = 3) -> None:
    folder = ws.dataset_dir(name)
    rows = []
    for i, text in enumerate(sentences(n)):
        wav, sr = load_audio(espeak_amharic(text, folder / "raw" / f"{i}.wav"), 24000)
        save_audio(folder / "audio" / f"u{i}.wav", wav, sr)
        rows.append({"id": f"u{i}", "audio": f"audio/u{i}.wav", "text": text, "excluded": False,
                     "split": "val" if i == 0 else "train", "speaker": "am"})
    rows.append({"id": "gone", "audio": "audio/gone.wav", "excluded": True, "split": "train"})
    write_jsonl(folder / "manifest.jsonl", rows)


def tiny_config(**kw) -> VocoderTrainConfig:
    base = dict(dataset="speech", run="voc", preset="tiny", max_steps=2, batch_size=2, segment=4096,
                log_every=1, eval_every=0, checkpoint_every=0, mcd_clips=1, val_clips=1, device="cpu")
    return VocoderTrainConfig(**{**base, **kw})


def test_train_vocoder_writes_checkpoint_metrics_log_and_resumes(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    make_dataset(ws)
    first = run_to_end(train_vocoder(ws, tiny_config()))
    run = ws.run_dir("voc")
    assert first == run / "checkpoints" / "step-2"
    assert {p.name for p in first.iterdir()} >= {"model.safetensors", "config.json", "trainer_state.pt"}
    metrics = read_jsonl(run / "metrics.jsonl")
    assert [m["step"] for m in metrics if "loss_g" in m] == [1, 2]
    assert all(np.isfinite(m["loss_mel"]) and m["loss_d"] > 0 for m in metrics if "loss_g" in m)
    assert any("val_mcd" in m for m in metrics) and (run / "samples" / "step-2" / "u0.wav").exists()
    assert read_json(run / "status.json")["state"] == "finished"
    load_vocoder(first)  # the checkpoint is a usable vocoder

    second = run_to_end(train_vocoder(ws, tiny_config(max_steps=3, resume="auto")))
    assert second == run / "checkpoints" / "step-3"
    assert "resume: continuing from runs/voc/checkpoints/step-2" in (run / "train.log").read_text()
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl") if "loss_g" in m] == [1, 2, 3]


def test_bf16_runs_the_networks_in_bf16_and_keeps_the_waveform_and_losses_fp32(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    make_dataset(ws, n=2)
    seen: dict[str, set] = {}

    def record(module, args, output):
        if isinstance(output, torch.Tensor):
            seen.setdefault(type(module).__name__, set()).add(output.dtype)

    hook = torch.nn.modules.module.register_module_forward_hook(record)
    try:
        run_to_end(train_vocoder(ws, tiny_config(precision="bf16")))
    finally:
        hook.remove()
    assert seen["ParametrizedConv2d"] == {torch.bfloat16}  # every discriminator convolution (weight-normed)
    assert seen["Conv1d"] == {torch.bfloat16}              # the generator backbone's convolutions
    assert seen["Vocoder"] == {torch.float32}      # the ISTFT head opts out: the waveform is fp32
    metrics = [m for m in read_jsonl(ws.run_dir("voc") / "metrics.jsonl") if "loss_g" in m]
    assert len(metrics) == 2 and all(np.isfinite(m["loss_g"]) and np.isfinite(m["loss_d"]) for m in metrics)
    assert "bf16 autocast for the backbone" in (ws.run_dir("voc") / "train.log").read_text()


def test_vocoder_precision_is_fp32_on_a_cpu_unless_asked_and_fp16_is_refused(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    make_dataset(ws, n=2)
    run_to_end(train_vocoder(ws, tiny_config(max_steps=1)))
    assert read_json(ws.run_dir("voc") / "config.json")["train"]["precision"] == "fp32"  # laid out as an acoustic run's
    assert "fp32: no GPU here" in (ws.run_dir("voc") / "train.log").read_text()
    with pytest.raises(StudioError, match="'fp16' is not one of auto, bf16, fp32"):
        run_to_end(train_vocoder(ws, tiny_config(run="half", precision="fp16")))


def test_a_vocoder_config_reads_as_an_acoustic_runs_and_an_older_flat_one_still_loads(tmp_path):
    """config.json keeps the settings under "train" (as an acoustic run's); a run written before had them at the top
    with save_every; a name the trainer does not know is refused, not dropped."""
    ws = Workspace.open(tmp_path / "ws")
    cfg = tiny_config(checkpoint_every=7)
    doc = read_json(prepare_vocoder_run(ws, cfg))
    assert doc["kind"] == "vocoder" and doc["train"]["checkpoint_every"] == 7
    assert VocoderTrainConfig.from_dict(doc) == cfg
    older = {"kind": "vocoder", "workspace": str(ws.root), **{k: v for k, v in cfg.to_dict().items()
                                                              if k != "checkpoint_every"}, "save_every": 7}
    assert VocoderTrainConfig.from_dict(older) == cfg
    with pytest.raises(StudioError, match="unknown vocoder training settings: batch_sise"):
        VocoderTrainConfig.from_dict({**doc["train"], "batch_sise": 8})


def test_fine_tuning_starts_from_the_given_weights_and_a_stop_before_the_first_step_saves(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    make_dataset(ws, n=2)
    init = save_vocoder(Vocoder(PRESETS["tiny"]), tmp_path / "init")
    config = prepare_vocoder_run(ws, tiny_config(run="ft", init=str(init), mcd_clips=0))
    run = ws.run_dir("ft")
    stop = threading.Event()
    stop.set()  # a stop request before the first step (the UI's Stop, in-process) still leaves a checkpoint
    cfg = VocoderTrainConfig.from_dict(read_json(config))
    assert run_to_end(train_vocoder(ws, cfg, stop)) == run / "checkpoints" / "step-0"
    ckpt = run / "checkpoints" / "step-0"
    assert (ckpt / "trainer_state.pt").exists()
    assert read_json(run / "status.json")["state"] == "stopped"
    assert read_json(run / "config.json")["train"]["lr"] == 1e-4
    for key, value in load_vocoder(init).state_dict().items():
        assert torch.equal(load_vocoder(ckpt).state_dict()[key], value)


def test_two_cpu_processes_with_gloo_train_one_vocoder_in_lock_step(tmp_path):
    """What "use every GPU" launches (torchrun), on two CPU processes: rank 0 alone writes, the ranks' weights
    stay identical (the trainer compares a weight checksum across ranks at every save)."""
    ws = Workspace.open(tmp_path / "ws")
    make_dataset(ws, n=3)
    config = prepare_vocoder_run(ws, tiny_config(max_steps=4, eval_every=2, checkpoint_every=2, log_every=1))
    cmd = torchrun(2, "-m", "utils.vocoder.training", "--config", str(config))
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = ws.run_dir("voc")
    log = (run / "train.log").read_text()
    assert "processes        2 (CPU processes), 2 crops each: 4 per step" in log
    assert "weights identical on all 2 processes at step 2" in log and "at step 4" in log
    steps = [m["step"] for m in read_jsonl(run / "metrics.jsonl") if "loss_g" in m]
    assert steps == [1, 2, 3, 4]  # one writer
    assert read_json(run / "status.json")["state"] == "finished"
    assert [p.name for p in sorted((run / "checkpoints").iterdir())] == ["step-2", "step-4"]
    load_vocoder(run / "checkpoints" / "step-4")


def test_out_of_memory_halves_the_batch_and_training_goes_on(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    make_dataset(ws, n=2)
    ckpt = run_to_end(train_vocoder(ws, tiny_config(batch_size=4, max_steps=3, fault_oom_above_batch=1)))
    run = ws.run_dir("voc")
    log = (run / "train.log").read_text()
    # the step is kept: its crops are run in smaller micro-batches and their gradients accumulated
    assert "out of memory at step 0: micro-batch halved (each batch now in 2 parts)" in log
    assert "micro-batch halved (each batch now in 4 parts)" in log
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl") if "loss_g" in m] == [1, 2, 3]  # no step lost
    assert read_json(run / "status.json")["state"] == "finished" and ckpt.name == "step-3"
    with pytest.raises(StudioError, match="out of memory even with one crop per micro-batch at step 0; use a shorter "
                                          "segment"):
        run_to_end(train_vocoder(ws, tiny_config(run="never", batch_size=1, fault_oom_above_batch=-1)))


def test_a_step_that_runs_out_of_memory_drops_the_generator_output_the_adapter_kept(tmp_path):
    """The discriminators' phase keeps the generator's output and its graph for the generator's phase. When that
    phase runs out of memory, the loop has the adapter let go of them before it empties the CUDA cache (which
    cannot return blocks a live tensor holds); here every retry fails too, down to one crop, and the run ends."""
    ws = Workspace.open(tmp_path / "ws")
    make_dataset(ws, n=2)
    adapter = with_faults(VocoderAdapter(ws, tiny_config(batch_size=1)), oom_above=-1, oom_phase="generator")
    with pytest.raises(StudioError, match="out of memory even with one crop per micro-batch at step 0"):
        drain(TrainingLoop(adapter, echo=False).run())
    assert adapter.cached is None


def test_frozen_discriminators_pass_the_generator_the_same_gradients_and_compute_none_of_their_own():
    torch.manual_seed(0)
    features = FeatureConfig()
    gen, mpd, mrd = Vocoder(PRESETS["tiny"]), MultiPeriodDiscriminator(channels=(4, 8)), MultiResolutionDiscriminator(channels=4)
    y = 0.1 * torch.randn(2, 4096)
    mel = log_mel(y, features)

    def gradients(freeze: bool):
        for module in (gen, mpd, mrd):
            module.zero_grad(set_to_none=True)
        y_hat = gen(mel)
        with frozen(mpd, mrd) if freeze else contextlib.nullcontext():
            loss = generator_losses(mpd, mrd, y, mel, y_hat, features, 45.0, 1.0, contextlib.nullcontext)["loss"]
        loss.backward()
        return [p.grad.clone() for p in gen.parameters()], [p.grad for p in [*mpd.parameters(), *mrd.parameters()]]

    gen_frozen, disc_frozen = gradients(freeze=True)
    gen_plain, disc_plain = gradients(freeze=False)
    assert all(g is None for g in disc_frozen) and all(g is not None for g in disc_plain)
    for a, b in zip(gen_frozen, gen_plain):
        torch.testing.assert_close(a, b)
    assert all(p.requires_grad for p in [*mpd.parameters(), *mrd.parameters()])  # given back after the forward


def test_each_step_computes_the_discriminators_weight_gradients_once(tmp_path):
    """Their phase needs them; the generator's phase, whose loss runs through them, does not."""
    ws = Workspace.open(tmp_path / "ws")
    make_dataset(ws, n=2)
    backward_passes = collections.Counter()

    class Watched(VocoderAdapter):
        def build(self, ctx) -> None:
            super().build(ctx)
            for name, module in self.modules.items():
                next(module.parameters()).register_hook(lambda grad, name=name: backward_passes.update([name]))

    drain(TrainingLoop(Watched(ws, tiny_config(max_steps=2)), echo=False).run())
    assert backward_passes == {"mpd": 2, "mrd": 2, "generator": 2}


def test_non_finite_gradients_skip_the_update_then_stop_with_good_weights(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    make_dataset(ws, n=2)
    run_to_end(train_vocoder(ws, tiny_config(max_steps=3, fault_nan_steps=[2])))
    run = ws.run_dir("voc")
    assert "step 1: non-finite loss/gradients in 1 of the 2 updates, step skipped, learning rate halved (x0.5); " \
           "the weights were not touched" in (run / "train.log").read_text()
    assert read_json(run / "status.json")["state"] == "finished"

    before = load_vocoder(run / "checkpoints" / "step-3").state_dict()
    with pytest.raises(StudioError, match="3 steps in a row had non-finite loss or gradients"):
        run_to_end(train_vocoder(ws, tiny_config(max_steps=10, resume="auto", max_bad_steps=3,
                                                 fault_nan_steps=[4, 5, 6])))
    assert read_json(run / "status.json")["state"] == "failed"
    saved = run / "checkpoints" / "step-6"  # the generator's updates were all skipped: the weights are step 3's
    for key, value in load_vocoder(saved).state_dict().items():
        assert torch.equal(value, before[key]), key
        assert torch.isfinite(value).all()


def test_a_checkpoint_written_before_the_shared_engine_resumes_onto_the_same_weights(tmp_path):
    """The vocoder trainer before utils/training/loop.py (commit 0f62882) wrote the generator as the folder's
    vocoder and kept the discriminators, both optimizers and the best score at the top level of trainer_state.pt.
    Such a run resumes through `upgrade_state` and ends on the weights of a run that never stopped."""
    ws = Workspace.open(tmp_path / "ws")
    make_dataset(ws, n=2)
    settings = dict(max_steps=3, checkpoint_every=2, lr=5e-4, mcd_clips=0)  # lr: a resumed run would pick 1e-4
    run_to_end(train_vocoder(ws, tiny_config(run="straight", **settings)))
    straight = ws.run_dir("straight") / "checkpoints"
    new = load_trainer_state(straight / "step-2")
    old = ws.run_dir("old") / "checkpoints" / "step-2"
    save_vocoder(load_vocoder(straight / "step-2"), old, step=2, run="old", dataset="speech")
    torch.save({"step": 2, "mpd": new["modules"]["mpd"], "mrd": new["modules"]["mrd"],
                "opt_g": new["optimizers"]["generator"], "opt_d": new["optimizers"]["discriminator"],
                "best_mcd": None, "best_step": None}, old / "trainer_state.pt")

    resumed = run_to_end(train_vocoder(ws, tiny_config(run="old", resume="auto", **settings)))
    assert resumed == ws.run_dir("old") / "checkpoints" / "step-3"
    assert "resume: continuing from runs/old/checkpoints/step-2" in (ws.run_dir("old") / "train.log").read_text()
    assert [m["step"] for m in read_jsonl(ws.run_dir("old") / "metrics.jsonl") if "loss_g" in m] == [3]
    a, b = load_trainer_state(straight / "step-3"), load_trainer_state(resumed)
    assert b["format"] == 2 and b["step"] == 3
    for name, module in a["modules"].items():
        for key, value in module.items():
            assert torch.equal(b["modules"][name][key], value), (name, key)


def test_out_of_memory_in_one_of_two_processes_halves_both_batches(tmp_path):
    """Rank 1 alone runs out of memory; rank 0 learns it at the next gradient agreement: both halve, no hang."""
    ws = Workspace.open(tmp_path / "ws")
    make_dataset(ws, n=3)
    config = prepare_vocoder_run(ws, tiny_config(max_steps=2, batch_size=4, fault_oom_above_batch=2,
                                                 fault_oom_ranks=[1], eval_every=2))
    cmd = torchrun(2, "-m", "utils.vocoder.training", "--config", str(config))
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = (ws.run_dir("voc") / "train.log").read_text()
    assert "out of memory in another process at step 0: micro-batch halved" in log
    assert "weights identical on all 2 processes at step 2" in log
    assert read_json(ws.run_dir("voc") / "status.json")["state"] == "finished"


def test_the_time_limit_ends_a_vocoder_run_as_finished_and_saved_and_a_resume_trains_on(tmp_path):
    """The Optimizations tab's time limit holds for a vocoder run too (a Colab session ends for both kinds)."""
    from utils.jobs import ended_by_time_limit
    from utils.runs import control, settings

    ws = Workspace.open(tmp_path / "ws")
    make_dataset(ws)
    settings.save_settings(ws, {"max_minutes": 30})
    assert control.vocoder_config(ws, "speech").max_minutes == 30  # a new vocoder run takes the saved limit
    assert control.vocoder_config(ws, "speech", overrides={"max_minutes": 0}).max_minutes == 0  # the CLI's flag wins

    ended = run_to_end(train_vocoder(ws, tiny_config(max_steps=1000, max_minutes=1e-5)))  # spent before step 1
    status = read_json(ws.run_dir("voc") / "status.json")
    assert status["state"] == "finished" and ended_by_time_limit(status), status
    assert status["message"].startswith("its time limit of 1e-05 min was spent before its first step (loading the "
                                        "data and the model took ") and "nothing was trained" in status["message"]
    assert ended.name == "step-0"  # a vocoder run keeps its untrained start
    assert "time limit: training ends by" in (ws.run_dir("voc") / "train.log").read_text()
    again = run_to_end(train_vocoder(ws, tiny_config(max_steps=1, resume="auto")))
    assert again.name == "step-1"


def test_dataset_without_manifest_is_a_clear_error(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    with pytest.raises(StudioError, match="There is no dataset called 'nothing'. None is prepared yet: prepare one"):
        run_to_end(train_vocoder(ws, tiny_config(dataset="nothing")))


def test_train_vocoder_cli_end_to_end(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    make_dataset(ws, n=2)
    init = save_vocoder(Vocoder(PRESETS["tiny"]), tmp_path / "init")
    proc = subprocess.run([sys.executable, "app.py", "train-vocoder", "--workspace", str(ws.root), "--dataset",
                           "speech", "--run", "cli", "--init", str(init), "--max-steps", "1", "--batch-size", "1", "--eval-every", "0", "--preset", "tiny"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "vocoder checkpoint:" in proc.stdout
    assert (ws.run_dir("cli") / "checkpoints" / "step-1" / "model.safetensors").exists()
    assert "batch_size       1: set by the user" in (ws.run_dir("cli") / "train.log").read_text()

    # the same command again continues the run (resume auto is the default)
    again = subprocess.run([*proc.args, "--max-steps", "2"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "resume: continuing from runs/cli/checkpoints/step-1" in again.stdout


def test_train_vocoder_cli_in_the_background_queues_a_job_like_the_training_tab(tmp_path):
    from utils import jobs

    ws = Workspace.open(tmp_path / "ws")
    make_dataset(ws, n=2)
    cmd = [sys.executable, "app.py", "train-vocoder", "--workspace", str(ws.root), "--dataset", "speech", "--run", "bg",
           "--max-steps", "1", "--batch-size", "1", "--eval-every", "0", "--preset", "tiny"]
    proc = subprocess.run(cmd + ["--background"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "run bg:" in proc.stdout and " on cpu; follow " in proc.stdout
    status = jobs.read_status(ws.run_dir("bg"))
    assert status["trainer_module"] == "utils.vocoder.training" and status["devices"] == "cpu"
    deadline = time.time() + 240
    while jobs.reconcile(ws.run_dir("bg")).get("state") not in jobs.FINAL and time.time() < deadline:
        time.sleep(0.5)
    assert jobs.read_status(ws.run_dir("bg"))["state"] == "finished", (ws.run_dir("bg") / "train.log").read_text()

    refused = subprocess.run([*cmd, "--run", "x", "--all-gpus"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "--all-gpus runs the training as a queued job: add --background" in refused.stderr


def test_fine_tuning_from_the_public_vocos_format(tmp_path, public_folder):
    folder, sd = public_folder
    ws = Workspace.open(tmp_path / "ws")
    make_dataset(ws, n=2)
    ckpt = run_to_end(train_vocoder(ws, tiny_config(run="pub", init=str(folder), max_steps=1, batch_size=1,
                                                    mcd_clips=0)))
    tuned = load_vocoder(ckpt)
    assert tuned.cfg == PRESETS["mel-24khz"]  # sizes come from the public config.yaml, not the preset
    assert not any(k.startswith("feature_extractor.") for k in tuned.state_dict())
    changed = ~torch.isclose(tuned.state_dict()["head.out.weight"], sd["head.out.weight"])
    assert changed.any()  # one optimizer step moved the public weights
