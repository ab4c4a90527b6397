"""The mel cache's entry of a row: found with one system call per clip at a training start, and still confined to
the dataset folder (a row or a link that leads out of it is refused, a link inside it is followed)."""
from __future__ import annotations

import shutil

import pytest

from tests.helpers import make_dataset
from utils.audio import FeatureConfig
from utils.datasets import load_manifest
from utils.datasets.features import cache_path, content_sha1, feature_frames, features
from utils.events import StudioError


def test_entries_follow_links_inside_the_dataset_and_refuse_what_leads_out(tmp_path):
    ws = make_dataset(tmp_path / "ws", name="am", n_train=2, n_val=0)
    ds, cfg = ws.dataset_dir("am"), FeatureConfig()
    first, second = load_manifest(ws, "am")
    frames = feature_frames(ws, "am", first, cfg)
    assert frames == features(ws, "am", first, cfg).shape[-1] > 0
    assert cache_path(ds.resolve(), content_sha1(ds / first["audio"], ds), cfg).exists()

    (ds / "more").mkdir()
    (ds / "more" / "same.wav").symlink_to(ds / first["audio"])  # a link inside the dataset: its target's entry
    assert feature_frames(ws, "am", dict(first, audio="more/same.wav"), cfg) == frames
    assert feature_frames(ws, "am", dict(first, audio="more/../" + first["audio"]), cfg) == frames

    outside = tmp_path / "outside.wav"
    shutil.copy(ds / second["audio"], outside)
    (ds / "more" / "out.wav").symlink_to(outside)
    for audio in ("more/out.wav", "../../../outside.wav", str(outside)):
        with pytest.raises(StudioError, match="points outside the dataset"):
            feature_frames(ws, "am", dict(second, id="x", audio=audio), cfg)
    with pytest.raises(StudioError, match="more/gone.wav is missing; run prepare again"):
        feature_frames(ws, "am", dict(second, id="x", audio="more/gone.wav"), cfg)
