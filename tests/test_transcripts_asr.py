"""The speech recognizer path with a tiny random-weight wav2vec 2.0 CTC model of the real format (saved by the
test, loaded and decoded by the same code a download goes through) on espeak-ng Amharic clips: install with its
licence, machine drafts (never over the curator's text, least confident first), the asr check, and the
character error rate at a training evaluation."""
from __future__ import annotations

import json

import pytest
import torch

import app
from tests.helpers import make_dataset, tiny_recognizer
from utils.events import run_to_end
from utils.transcripts import asr, decide
from utils.transcripts.cer import cer
from utils.workspace import read_jsonl, write_jsonl

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return tiny_recognizer(tmp_path_factory.mktemp("recognizer") / "tiny-amharic-ctc")


@pytest.fixture
def ws(tmp_path, source, monkeypatch):
    """6 clips; the transcripts of two are gone (as after cutting a long recording by voice activity)."""
    ws = make_dataset(tmp_path, name="am", n_train=5, n_val=1)
    path = ws.dataset_dir("am") / "manifest.jsonl"
    rows = read_jsonl(path)
    for r in rows[1:3]:
        r.update(text="", normalized="", flags=["missing_text"])
    write_jsonl(path, rows)
    monkeypatch.setenv(asr.SOURCE_ENV, str(source))
    run_to_end(asr.fetch(ws))
    return ws


def test_fetch_installs_the_recognizer_with_its_licence_and_the_tabs_say_so(ws, source):
    folder = asr.available(ws)
    assert folder == ws.root / "recognizers" / "tiny-amharic-ctc"
    assert (folder / "LICENSE.md").read_text(encoding="utf-8").startswith(f"Source: {source}")
    assert "licence" in asr.status_line(ws) and str(source) in asr.status_line(ws)


def test_without_a_recognizer_the_line_says_what_would_enable_it(tmp_path):
    ws = make_dataset(tmp_path, name="am", n_train=1, n_val=0)
    line = asr.status_line(ws)
    assert asr.available(ws) is None and asr.DEFAULT_MODEL in line and asr.DEFAULT_LICENCE in line


def test_drafts_only_for_clips_without_text_and_the_manifest_is_untouched(ws):
    manifest = ws.dataset_dir("am") / "manifest.jsonl"
    before = manifest.read_bytes()
    result = run_to_end(asr.transcribe_missing(ws, "am"))
    assert manifest.read_bytes() == before  # a draft never becomes text by itself
    assert set(result["rows"]) == {"am-001", "am-002"}
    for draft in result["rows"].values():
        assert draft["machine_draft"] is True and 0.0 <= draft["confidence"] <= 1.0 and draft["model"]
    saved = json.loads(asr.drafts_path(ws, "am").read_text(encoding="utf-8"))
    assert saved["rows"] == result["rows"]
    listed = asr.draft_rows(ws, "am")
    assert [d["confidence"] for d in listed] == sorted(d["confidence"] for d in listed)  # least confident first
    assert all(d["path"].endswith(".wav") for d in listed)


def test_a_row_the_curator_typed_is_never_drafted_again(ws):
    run_to_end(asr.transcribe_missing(ws, "am"))
    decide(ws, "am", "am-001", "text", "ሰላም ነው ።")
    assert [d["id"] for d in asr.draft_rows(ws, "am")] == ["am-002"]
    result = run_to_end(asr.transcribe_missing(ws, "am"))
    rows = {r["id"]: r for r in read_jsonl(ws.dataset_dir("am") / "manifest.jsonl")}
    assert rows["am-001"]["text"] == "ሰላም ነው ።" and rows["am-001"]["text_fixed"]
    assert [d["id"] for d in asr.draft_rows(ws, "am")] == ["am-002"]
    assert result["rows"]["am-002"]["machine_draft"]


def test_check_transcripts_by_the_recognizer_prints_the_ranking(ws, capsys):
    path = ws.dataset_dir("am") / "manifest.jsonl"
    rows = read_jsonl(path)
    for r in rows[1:3]:  # the check needs 5 transcribed rows
        r.update(text=rows[0]["text"], normalized=rows[0]["text"], flags=[])
    write_jsonl(path, rows)
    assert app.main(["check-transcripts", "--workspace", str(ws.root), "--dataset", "am", "--method", "asr"]) == 0
    out = capsys.readouterr().out.splitlines()
    header = out.index(next(line for line in out if line.startswith("id ")))
    listed = [line.split()[0] for line in out[header + 1:]]
    assert sorted(listed) == sorted(r["id"] for r in rows)
    saved = json.loads((ws.dataset_dir("am") / "transcript_check.json").read_text(encoding="utf-8"))
    assert saved["method"] == "asr" and [r["id"] for r in saved["rows"]] == listed


def test_character_error_rate_after_the_studio_normalisation():
    assert cer("ሰላም ነው ።", "ሰላም ነው") == 0.0  # punctuation is not speech
    assert cer("፲ ሰው", "አስር ሰው") == 0.0  # numbers are compared as read
    assert cer("ሰላም", "ሰላሙ") == pytest.approx(1 / 3)
    assert cer("ሰላም", "") == 1.0 and cer("", "") == 0.0


def test_a_training_evaluation_reports_the_character_error_rate(ws):
    from utils.training import TrainConfig, prepare_run, run

    cfg = TrainConfig(workspace=str(ws.root), dataset="am", run="cer", preset="tiny", max_steps=2, lr=2e-3,
                      warmup_steps=1, log_every=1, eval_every=0, checkpoint_every=2, mcd="logmel", eval_clips=1,
                      sample_clips=0, ode_steps=2, ema_decay=0.0, max_frames_per_batch=400, grad_accumulation=1,
                      eval_vocoder="griffin-lim")
    assert run(prepare_run(cfg))["state"] == "finished"
    evals = [m for m in read_jsonl(ws.run_dir("cer") / "metrics.jsonl") if "mcd" in m]
    assert evals and all(isinstance(m["cer"], float) and m["cer"] >= 0 for m in evals)
    from utils import runs

    row = next(r for r in runs.run_table(ws) if r["run"] == "cer")
    assert row["val CER"] == f"{evals[-1]['cer']:.0%}"
