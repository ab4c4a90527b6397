"""Quality proof on CPU: the tiny model overfits a few espeak-ng clips to a clearly lower
mel-cepstral distortion (WORLD/SPTK MCD after Griffin-Lim, utils.evaluation) within minutes."""
from __future__ import annotations

import pytest
import torch

from models.matcha import MatchaConfig, MatchaTTS
from tests.helpers import every_core, make_dataset
from utils.audio import FeatureConfig
from utils.datasets.features import features
from utils.training import TrainConfig, load_checkpoint, prepare_run, run
from utils.training.data import prepare_items, training_rows
from utils.training.frontend import Frontend
from utils.training.evaluate import synthesis_quality

torch.set_num_threads(1)


@pytest.mark.slow
def test_tiny_model_overfits_a_few_clips_to_clearly_lower_mcd(tmp_path):
    ws = make_dataset(tmp_path / "ws", n_train=2, n_val=0, voices=("am",), max_chars=30)
    cfg = TrainConfig(workspace=str(ws.root), dataset="am", run="overfit", preset="tiny", max_steps=200, lr=3e-3,
                      warmup_steps=20, log_every=50, eval_every=0, checkpoint_every=1000, mcd="world",
                      eval_clips=2, sample_clips=2, ode_steps=10, grad_accumulation=1, max_frames_per_batch=2000,
                      ema_decay=0.95)
    with every_core():
        result = run(prepare_run(cfg))
    trained, config = load_checkpoint(result["last_checkpoint"])
    # the same clips through an untrained model of the same shape
    torch.manual_seed(cfg.seed)
    untrained = MatchaTTS(MatchaConfig.from_dict(config["model"])).eval()
    rows, _ = training_rows(ws, "am")
    frontend = Frontend.create("auto", rows, config["frontend"])
    items = prepare_items(ws, "am", rows, frontend, config["speakers"], FeatureConfig(), log=lambda s: None)

    def score(model):
        return synthesis_quality(model, items, ws, "am", FeatureConfig(), "world", 10, None, 0, cfg.seed,
                                 features)["mcd"]

    before, after = score(untrained), score(trained)
    print(f"MCD untrained {before:.2f} dB -> trained {after:.2f} dB ({cfg.max_steps} steps)")
    assert after < before - 5.0 and after < 14.0
    assert result["best_mcd"] == pytest.approx(after, abs=0.5)
    assert len(list((ws.run_dir("overfit") / "samples" / "step-200").glob("*.wav"))) == 2
