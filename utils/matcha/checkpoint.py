"""A Matcha checkpoint or voice folder loaded for speech (and for its ONNX export)."""
from __future__ import annotations


def load_matcha(folder, device="cpu"):
    """Checkpoint or voice folder -> (MatchaTTS in eval mode on `device`, config dict).

    config["frontend"] = {"kind", "symbols": list (index = token id, 0 = padding), ...},
    config["speakers"] = list of speaker names (index = speaker id), config["features"] = FeatureConfig dict,
    config["model"] = MatchaConfig dict (incl. mel_mean / mel_std). Synthesis:

        model, config = load_matcha("workspace/runs/r/checkpoints/step-1000")
        out = model.synthesise(token_ids, speaker=config["speakers"].index("am"), n_steps=10,
                               temperature=0.667, length_scale=1.0)
        out["mel"]  # [1, 100, T] denormalised natural-log mel -> utils.vocoder.griffin_lim / Vocos
    """
    from pathlib import Path

    from models.matcha import MatchaConfig, MatchaTTS
    from utils.events import StudioError
    from utils.training.checkpoint import load_weights, read_config

    config = read_config(folder)
    model = MatchaTTS(MatchaConfig.from_dict(config["model"]))
    missing, unexpected = model.load_state_dict(load_weights(folder), strict=False)
    if missing or unexpected:
        raise StudioError(f"{Path(folder)}: weights do not match config.json (missing {missing[:3]}, unexpected "
                          f"{unexpected[:3]}).")
    return model.to(device).eval(), config
