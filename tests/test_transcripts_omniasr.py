"""omniASR CTC, the default recognizer, without the hub: a tiny random OmniASRForCTC saved in the hub's layout
(config, weights, processor and tokenizer files, model card) is installed by the same fetch a download goes
through; its decoding equals transformers' own (generate + the processor's decode); long clips are cut below the
model's limit; drafts, the transcript check's recognition signal and the CER of evaluations (synthesised and
recorded) all run through it on the CPU; the machine's choice of model, with its reason; the download's bytes."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import app
from tests.helpers import make_dataset, tiny_omniasr
from tests.test_transcripts_asr import tiny_run, with_recognizer
from utils.datasets import load_manifest, save_manifest
from utils.events import run_to_end
from utils.transcripts import asr, recognizers
from utils.transcripts.ctc import MAX_CHUNK_S, SAMPLE_RATE, Recognizer, chunks, collapse
from utils.workspace import read_jsonl

torch.set_num_threads(1)
BLANK_BIAS = 0.3  # about half the frames blank with the tiny model's logits, as in a trained CTC model's output


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return tiny_omniasr(tmp_path_factory.mktemp("recognizer") / "omniasr-ctc-tiny", blank_bias=BLANK_BIAS)


@pytest.fixture
def ws(tmp_path, source, monkeypatch):
    """6 clips, two of them without text, and the tiny omniASR installed as the workspace's recognizer."""
    return with_recognizer(tmp_path, source, monkeypatch)


def test_fetch_installs_omniasr_with_the_licence_of_its_model_card(ws):
    folder = asr.available(ws)
    assert json.loads((folder / "config.json").read_text())["model_type"] == "omniasr_ctc"
    assert (folder / "tokenizer.json").is_file() and (folder / "processor_config.json").is_file()
    assert asr.notice(folder)["licence"] == "apache-2.0" and asr.notice(folder)["lang"] == ""
    assert "licence apache-2.0" in asr.status_line(ws)


def test_the_decoding_equals_transformers_own_generate_and_decode(ws):
    """Argmax, repeats collapsed, blanks dropped, then the tokenizer's decode: what OmniASRForCTC.generate and
    OmniASRCTCProcessor.decode give, one clip at a time and in a padded batch."""
    from transformers import AutoProcessor

    folder = asr.available(ws)
    rec, processor = Recognizer(folder, "cpu"), AutoProcessor.from_pretrained(str(folder))
    waves = [asr._wave(ws, "am", r) for r in load_manifest(ws, "am")]
    ours = [text for text, _ in rec.transcribe(waves)]
    alone = [processor.decode(rec.model.generate(**processor(w, sampling_rate=SAMPLE_RATE))[0],
                              skip_special_tokens=True) for w in waves]
    batched = processor.batch_decode(rec.model.generate(**processor(waves, sampling_rate=SAMPLE_RATE)),
                                     skip_special_tokens=True)
    assert ours == [t.strip() for t in alone] == [t.strip() for t in batched]
    assert all(ours) and any(a == b for text in ours for a, b in zip(text, text[1:]))  # a doubled letter kept
    path = rec.logits(waves[:1]).argmax(-1)[0].tolist()
    assert 0.2 < path.count(rec.blank) / len(path) < 0.8  # the blank really is emitted between symbols


def test_ctc_collapse_keeps_a_letter_said_twice_across_a_blank():
    assert collapse([5, 5, 0, 5, 7, 7, 0, 0, 9], blank=0) == [5, 5, 7, 9]
    assert collapse([0, 0], blank=0) == []


def test_a_long_clip_is_cut_at_pauses_below_the_models_limit(ws, monkeypatch):
    rng = np.random.default_rng(0)
    speech = [rng.standard_normal(int(s * SAMPLE_RATE)).astype(np.float32) for s in (27.0, 27.0, 18.0)]
    pause = np.zeros(SAMPLE_RATE // 2, np.float32)
    wave = np.concatenate([speech[0], pause, speech[1], pause, speech[2]])  # 73 s, pauses at 27 s and 54.5 s
    pieces = chunks(wave)
    assert np.array_equal(np.concatenate(pieces), wave)
    assert all(len(p) <= MAX_CHUNK_S * SAMPLE_RATE for p in pieces) and len(pieces) == 3
    cuts = np.cumsum([len(p) for p in pieces])[:-1]
    assert all(np.all(wave[c - SAMPLE_RATE // 5:c + SAMPLE_RATE // 5] == 0) for c in cuts)  # mid-pause

    rec, fed = asr.load(asr.available(ws), "cpu"), []
    logits = rec.logits
    monkeypatch.setattr(rec, "logits", lambda pieces: fed.append([len(p) for p in pieces]) or logits(pieces))
    [(text, confidence)] = rec.transcribe([wave])
    assert fed == [[len(p) for p in pieces]] and text and 0 < confidence <= 1


def test_drafts_and_the_recognition_check_run_through_omniasr(ws, capsys):
    result = run_to_end(asr.transcribe_missing(ws, "am"))
    assert set(result["rows"]) == {"am-001", "am-002"} and result["licence"] == "apache-2.0"
    assert all(d["text"] and d["model"] for d in result["rows"].values())
    rows = load_manifest(ws, "am")
    for r in rows[1:3]:
        r.update(text=rows[0]["text"], normalized=rows[0]["text"], flags=[])
    save_manifest(ws, "am", rows)
    assert app.main(["check-transcripts", "--workspace", str(ws.root), "--dataset", "am", "--method", "asr"]) == 0
    saved = json.loads((ws.dataset_dir("am") / "transcript_check.json").read_text(encoding="utf-8"))
    assert saved["method"] == "asr" and len(saved["rows"]) == len(rows)
    heard = read_jsonl(ws.dataset_dir("am") / "transcript_check.heard.jsonl")
    assert {line["id"] for line in heard if "id" in line} == {r["id"] for r in rows}


def test_an_evaluation_reports_the_cer_of_the_recordings_beside_the_synthesised(ws):
    from utils.runs import views
    from utils.training import prepare_run, run

    assert run(prepare_run(tiny_run(ws, "floor")))["state"] == "finished"
    evals = [m for m in read_jsonl(ws.run_dir("floor") / "metrics.jsonl") if "mcd" in m]
    assert evals and all(m["cer"] >= 0 and m["cer_recorded"] >= 0 for m in evals)
    assert len({m["cer_recorded"] for m in evals}) == 1  # the same recordings, heard once
    row = next(r for r in views.run_table(ws) if r["run"] == "floor")
    assert row["val CER"] == f"{evals[-1]['cer']:.0%} (recordings {evals[-1]['cer_recorded']:.0%})"
    assert "cer_recorded" in (ws.run_dir("floor") / "train.log").read_text(encoding="utf-8")


def test_an_evaluation_without_a_recognizer_says_so(tmp_path, capsys):
    from utils.training import prepare_run, run

    ws = make_dataset(tmp_path, name="am", n_train=3, n_val=1)
    assert run(prepare_run(tiny_run(ws, "no-asr")))["state"] == "finished"
    evals = [m for m in read_jsonl(ws.run_dir("no-asr") / "metrics.jsonl") if "mcd" in m]
    said = [line for line in capsys.readouterr().out.splitlines() if "no speech recognizer" in line]
    assert evals and not any("cer" in m for m in evals) and len(said) == len(evals), said


def test_the_training_tab_draws_both_cer_curves_with_plain_names():
    from webui.training import PLOTS, curve_name

    assert PLOTS["cer"]("cer") and PLOTS["cer"]("cer_recorded") and not PLOTS["cer"]("mcd")
    assert "recordings" in curve_name("cer_recorded") and "synthesised" in curve_name("cer")


def test_the_machine_picks_the_300m_whose_hub_id_is_known_and_offers_the_1b_on_a_big_gpu():
    """The 1B's id (hf-audio/omniasr-ctc-1b-v2) is named by no source, so no machine fetches it unasked."""
    model, why = recognizers.choose([])
    assert model is recognizers.OMNI_300M and "no GPU" in why
    assert recognizers.choose([15.0])[0] is recognizers.OMNI_300M and "15 GB" in recognizers.choose([15.0])[1]
    model, why = recognizers.choose([15.0, 80.0])
    assert model is recognizers.OMNI_300M and "80 GB" in why and "no source confirms its hub id" in why
    line = recognizers.line(recognizers.choose([]))
    assert "hf-audio/omniasr-ctc-300m-v2" in line and "Apache-2.0" in line
    assert recognizers.omniasr_loadable()  # transformers >= 5.24 on Python >= 3.11 (requirements.txt)
    model, why = recognizers.choose([80.0], omniasr=False)  # Python 3.10: transformers stops below 5.24
    assert model is recognizers.MMS and "Python 3.11" in why
    assert "non-commercial" in recognizers.line((model, why))
    assert asr.default_model() is recognizers.OMNI_300M  # this machine has no GPU
    from utils import hardware
    from webui.system import hardware_card

    assert line in hardware_card(hardware.detect()).replace("**", "")  # the System tab says it
    assert recognizers.MMS.licence.startswith("CC-BY-NC") and recognizers.known("facebook/mms-1b-all").lang == "amh"


def test_a_download_says_its_bytes_and_licence_and_takes_no_mms_adapters(tmp_path, source, monkeypatch):
    """The hub is faked by a function with snapshot_download's signature: it reports 3 MB through the progress
    class it is given and returns the tiny model's folder."""
    import huggingface_hub

    asked = {}

    def snapshot_download(repo_id, allow_patterns=None, local_files_only=False, tqdm_class=None):
        asked.update(repo=repo_id, patterns=allow_patterns)
        with tqdm_class(total=3 * 2**20, unit="B") as bar:
            for _ in range(3):
                bar.update(2**20)
        return str(source)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.delenv(asr.SOURCE_ENV, raising=False)
    ws = make_dataset(tmp_path, name="am", n_train=1, n_val=0)
    said = []
    folder = run_to_end(asr.fetch(ws), printer=said.append)
    assert asked["repo"] == "hf-audio/omniasr-ctc-300m-v2" and folder.name == "omniasr-ctc-300m-v2"
    assert not any("adapter" in p for p in asked["patterns"]) and "tokenizer.json" in asked["patterns"]
    assert any("licence Apache-2.0" in line for line in said if "downloading hf-audio" in line), said
    assert any("downloading: 3 MB of about 1300 MB" in line for line in said), said
    assert asr.notice(folder)["licence"] == "Apache-2.0"  # the catalogue's, for a known model


def test_a_recognizer_the_hub_does_not_have_falls_back_to_the_300m_in_one_line(tmp_path, source, monkeypatch):
    import huggingface_hub

    class RepositoryNotFoundError(OSError):  # the hub's class, by name (its constructor wants an HTTP response)
        pass

    asked = []

    def snapshot_download(repo_id, allow_patterns=None, local_files_only=False, tqdm_class=None):
        asked.append(repo_id)
        if repo_id == recognizers.OMNI_1B.repo:
            raise RepositoryNotFoundError(f"404 Client Error. Repository Not Found for url: {repo_id}")
        return str(source)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.delenv(asr.SOURCE_ENV, raising=False)
    ws = make_dataset(tmp_path, name="am", n_train=1, n_val=0)
    said = []
    folder = run_to_end(asr.fetch(ws, recognizers.OMNI_1B.repo), printer=said.append)
    assert asked == [recognizers.OMNI_1B.repo, recognizers.OMNI_300M.repo] and folder.name == "omniasr-ctc-300m-v2"
    assert sum("the hub has no hf-audio/omniasr-ctc-1b-v2: fetching omniASR CTC 300M v2" in line
               for line in said) == 1, said
    assert asr.available(ws) == folder
