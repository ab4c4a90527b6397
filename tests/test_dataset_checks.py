"""Row checks (the report curators read) and curator edits saved to the manifest."""
from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from tests.helpers import espeak_amharic, sentences, spoken_pairs, tone, write_wav
from utils.audio import load_audio, resample
from utils.datasets import apply_edits, get_rows, load_manifest, prepare, recheck, review_row
from utils.datasets.config import PrepareConfig
from utils.events import StudioError, run_to_end
from utils.workspace import Workspace

SENTS = sentences(12)


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """One dataset holding every kind of problem, prepared once for the tests of this module."""
    tmp = tmp_path_factory.mktemp("checks")
    src = tmp / "src"
    rows = []

    def add(uid, audio, sr, text, speaker="default"):
        write_wav(src / "wavs" / f"{uid}.wav", audio, sr)
        rows.append(f"{uid}|{speaker}|{text}")

    for i in range(8):  # ordinary clean rows
        a, sr = load_audio(espeak_amharic(SENTS[i], tmp / f"s{i}.wav"))
        add(f"good{i}", a, sr, SENTS[i], "abebe" if i % 2 else "hana")
    speech, sr = load_audio(espeak_amharic(SENTS[8], tmp / "s8.wav"))
    add("short", tone(0.25, sr, amp=0.3), sr, "ሰላም")
    reps = int(np.ceil(25 * sr / len(speech)))  # over the 20 s maximum
    add("long", np.concatenate([speech] * reps), sr, " ".join([SENTS[8]] * reps))
    add("silent", np.zeros(sr * 2, np.float32), sr, SENTS[9])
    add("clipped", np.clip(speech * 8, -1, 1), sr, SENTS[8])
    rng = np.random.default_rng(0)
    add("noisy", speech + rng.normal(0, 0.08, len(speech)).astype(np.float32), sr, SENTS[8])
    add("latin", speech, sr, "this transcript is in english")
    add("odd", tone(2.0, sr, 180), sr, "ሰላም ☺ ነው")
    add("fast", tone(1.0, sr, 300), sr, " ".join(SENTS[:4]))
    add("notext", tone(2.0, sr, 250), sr, "")
    phone = resample(speech, sr, 8000)  # a telephone recording, stereo: resampled to 24 kHz, its sound still 4 kHz
    add("phone", np.stack([phone, phone], axis=1), 8000, SENTS[10])
    a, _ = load_audio(src / "wavs" / "good0.wav")
    add("copy", a, sr, SENTS[0])  # the same audio as good0 under another id
    rows.append(rows[1])  # good1 twice: a duplicate id
    (src / "metadata.csv").write_text("\n".join(rows), encoding="utf-8")
    ws = Workspace.open(tmp / "ws")
    summary = run_to_end(prepare(ws, "chk", src, workers=1))
    return ws, summary


def flags(ws, name="chk") -> dict[str, list[str]]:
    return {r["id"]: r["flags"] for r in load_manifest(ws, name)}


def test_each_problem_is_flagged_with_a_message(checked):
    ws, summary = checked
    f = flags(ws)
    assert "too_short" in f["short"]
    assert "too_long" in f["long"]
    assert "silent" in f["silent"] and "rate_outlier" not in f["silent"]  # one fault, one flag
    assert "clipping" in f["clipped"]
    assert "low_snr" in f["noisy"]
    assert "non_ethiopic" in f["latin"]
    assert "unknown_chars" in f["odd"]
    assert "rate_outlier" in f["fast"]
    assert "missing_text" in f["notext"]
    assert "duplicate_audio" in f["copy"]
    assert f["phone"] == ["low_sample_rate"]  # said, and still trained on: the curator decides
    assert "recorded at 8 kHz (telephone quality): nothing above 4 kHz" in review_row(ws, "chk", "phone")["messages"]
    assert "duplicate_id" in f["good1-dup2"] and "duplicate_audio" in f["good1-dup2"]
    assert not any(f[f"good{i}"] for i in range(8))
    assert "no speech: the audio is digital silence" in review_row(ws, "chk", "silent")["messages"]
    assert "☺" in review_row(ws, "chk", "odd")["messages"]
    latin = review_row(ws, "chk", "latin")["messages"]  # one advice, not also "add them to the dictionary"
    assert "write what the clip says in Amharic letters" in latin and "dictionary" not in latin
    assert summary["flags"]["too_short"] == 1 and summary["speakers"] >= 2
    assert summary["hours"] > summary["usable_hours"] > 0


def test_serious_flags_exclude_by_default_but_rows_stay_in_the_manifest(checked):
    ws, _ = checked
    rows = {r["id"]: r for r in load_manifest(ws, "chk")}
    for uid in ("short", "long", "silent", "latin", "notext", "copy"):
        assert rows[uid]["excluded"] is True
    for uid in ("clipped", "noisy", "odd", "fast", "good3"):
        assert rows[uid]["excluded"] is False


def test_curator_exclude_keep_and_text_fix_are_saved_and_survive_recheck_and_rerun(checked, tmp_path):
    ws, _ = checked
    summary = apply_edits(ws, "chk", [{"id": "good2", "action": "exclude"},
                                      {"id": "short", "action": "keep"},
                                      {"id": "latin", "action": "text", "text": "  ዶ/ር  አበበ 25 ብር  "}])
    rows = {r["id"]: r for r in load_manifest(ws, "chk")}
    assert rows["good2"]["excluded"] and rows["good2"]["review"] == "exclude"
    assert not rows["short"]["excluded"] and "too_short" in rows["short"]["flags"]
    latin = rows["latin"]
    assert latin["text"] == "ዶ/ር አበበ 25 ብር" and "ዶክተር" in latin["normalized"] and "non_ethiopic" not in latin["flags"]
    assert not latin["excluded"] and latin["phonemes"]
    assert summary["usable_clips"] == sum(not r["excluded"] for r in rows.values())
    report = json.loads((ws.dataset_dir("chk") / "report.json").read_text())
    assert report["summary"]["usable_clips"] == summary["usable_clips"]

    recheck(ws, "chk")
    said = [e.message for e in prepare(ws, "chk", None, workers=1)]  # a re-run keeps the decisions, and says so
    kept = next(m for m in said if m.startswith("Kept your earlier Keep/Exclude on"))
    assert "fixed transcript of" in kept and "(latin" in kept and "press Save text" in kept
    rows = {r["id"]: r for r in load_manifest(ws, "chk")}
    assert rows["good2"]["excluded"] and not rows["short"]["excluded"] and rows["latin"]["text"] == "ዶ/ር አበበ 25 ብር"
    with pytest.raises(StudioError, match="no row 'ghost'"):
        apply_edits(ws, "chk", [{"id": "ghost", "action": "keep"}])


def test_a_transcript_on_two_clips_is_pointed_at_on_the_second_and_follows_edits(checked):
    """A sentence pasted onto the wrong clip reads like any other row: the second clip with a transcript word for word
    is flagged (not excluded: two takes are fine), a copy of the audio is left to duplicate_audio, and a fixed
    transcript moves the flag and shows as a decision."""
    ws, _ = checked
    rows = {r["id"]: r for r in load_manifest(ws, "chk")}
    assert "duplicate_text" in rows["noisy"]["flags"] and not rows["noisy"]["excluded"]  # SENTS[8], as "clipped"
    assert "the same transcript as clipped" in rows["noisy"]["notes"]["duplicate_text"]
    assert "duplicate_text" not in rows["clipped"]["flags"] and "duplicate_text" not in rows["copy"]["flags"]

    apply_edits(ws, "chk", [{"id": "clipped", "action": "text", "text": SENTS[11]}])
    got = get_rows(ws, "chk", ["clipped", "noisy"])
    assert "duplicate_text" not in got["noisy"]["flags"] + got["clipped"]["flags"]  # noisy's twin is gone
    assert review_row(ws, "chk", "clipped")["decision"] == "text fixed"
    apply_edits(ws, "chk", [{"id": "odd", "action": "text", "text": SENTS[2]}, {"id": "clipped", "action": "keep"}])
    got = get_rows(ws, "chk", ["odd", "clipped"])
    assert "the same transcript as good2" in got["odd"]["notes"]["duplicate_text"]
    assert "duplicate_text" not in got["clipped"]["flags"] and got["clipped"]["review"] == "keep"
    apply_edits(ws, "chk", [{"id": "clipped", "action": "text", "text": SENTS[8]}])
    assert "the same transcript as clipped" in get_rows(ws, "chk", ["noisy"])["noisy"]["notes"]["duplicate_text"]


def test_short_lines_said_again_are_not_flagged():
    """"ሰላም" twice is an honest dataset; a whole sentence twice is worth a look."""
    from utils.datasets.checks import SAME_TEXT_MIN_WORDS, mark_same_texts

    short = " ".join(SENTS[0].split()[:SAME_TEXT_MIN_WORDS - 1])
    spaced = "  ".join(SENTS[1].split()) + " "  # typed with two spaces between words: the same sentence
    rows = [{"id": f"r{i}", "text": t, "notes": {}} for i, t in enumerate([short, short, SENTS[1], spaced])]
    mark_same_texts(rows)
    assert [list(r["notes"]) for r in rows] == [[], [], [], ["duplicate_text"]]


def test_keep_refuses_a_silent_clip_and_a_row_without_text_and_writes_nothing(checked):
    """Keep on a silent clip put digital silence back into training, and on a row without text counted a clip the
    trainer drops: both are refused with what would make the row usable, and nothing of the edits is written."""
    ws, _ = checked
    before = {r["id"]: (r["excluded"], r.get("review")) for r in load_manifest(ws, "chk")}
    with pytest.raises(StudioError, match="Not kept: silent: its audio is silence"):
        apply_edits(ws, "chk", [{"id": "good3", "action": "exclude"}, {"id": "silent", "action": "keep"}])
    with pytest.raises(StudioError, match="Not kept: notext: it has no transcript.*press Save text"):
        apply_edits(ws, "chk", [{"id": "notext", "action": "keep"}])
    assert {r["id"]: (r["excluded"], r.get("review")) for r in load_manifest(ws, "chk")} == before
    apply_edits(ws, "chk", [{"id": "notext", "action": "text", "text": SENTS[3]}])  # what the refusal says to do
    assert not get_rows(ws, "chk", ["notext"])["notext"]["excluded"]


def test_the_summary_says_flagged_rows_are_out_already_and_how_much_speech_a_voice_wants(checked):
    """A curator read "review the flagged rows" as work to do before they would be left out, and nothing said
    whether a few minutes of speech make a voice."""
    from webui.dataset import summary_markdown

    ws, _ = checked
    s = datasets_summary(ws)
    said = summary_markdown(ws, "chk")
    assert f"**{s['clips'] - s['usable_clips']} row(s) are left out of training already**" in said
    left_out = said.split("left out of training already**")[1].split("\n")[0]
    assert "no speech (silence)" in left_out and "frontend failed" not in left_out  # the kinds this dataset has, only
    assert "expect a first, rough voice: MMS-TTS wants an hour or two" in said  # minutes of speech here


def datasets_summary(ws) -> dict:
    return json.loads((ws.dataset_dir("chk") / "report.json").read_text())["summary"]


def test_clips_are_trimmed_and_loudness_normalized(tmp_path):
    a, sr = load_audio(espeak_amharic(SENTS[0], tmp_path / "s.wav"))
    quiet = np.concatenate([np.zeros(sr, np.float32), 0.05 * a, np.zeros(sr, np.float32)])
    (tmp_path / "src").mkdir()
    write_wav(tmp_path / "src" / "q.wav", quiet, sr)
    (tmp_path / "src" / "q.txt").write_text(SENTS[0], encoding="utf-8")
    ws = Workspace.open(tmp_path / "ws")
    run_to_end(prepare(ws, "q", tmp_path / "src", workers=1, cfg=PrepareConfig(target_dbfs=-20)))
    row = load_manifest(ws, "q")[0]
    out, _ = sf.read(str(ws.dataset_dir("q") / row["audio"]))
    assert row["duration"] < len(quiet) / sr - 1.5  # most of the 2 s of silence is gone
    assert np.max(np.abs(out)) > 10 * np.max(np.abs(quiet))  # brought up from -26 dB...
    assert np.max(np.abs(out)) <= 10 ** (-1 / 20) + 1e-3  # ...but never above the -1 dBFS peak cap


def test_bpe_frontend_trains_a_sentencepiece_model(tmp_path):
    src = spoken_pairs(tmp_path / "b", 6, prefix="b")
    ws = Workspace.open(tmp_path / "ws")
    events = list(prepare(ws, "bpe", src, workers=1, frontend="bpe"))
    assert any(e.stage == "tokenizer" for e in events)
    tok = json.loads((ws.dataset_dir("bpe") / "tokenizer" / "tokenizer.json").read_text())
    assert tok and events[-1].result["frontend"] == "bpe"


def test_the_next_line_asks_for_a_review_only_when_a_row_is_flagged(tmp_path):
    """It asked to review the flagged rows under "none: every clip passed"."""
    from tests.helpers import make_dataset
    from webui.dataset import next_line

    ws = make_dataset(tmp_path / "ws")
    clean = {"clips": 40, "usable_clips": 40, "usable_hours": 2.0, "flagged_clips": 0, "flags": {}}
    assert "no row is flagged, so there is nothing to review" in next_line(ws, "am", clean)
    flagged = {**clean, "flagged_clips": 3, "flags": {"low_snr": 3}}
    assert "review the flagged rows below" in next_line(ws, "am", flagged)


def test_the_name_box_says_whether_prepare_adds_to_a_dataset_or_makes_one(tmp_path):
    """Adding a second day's recordings to a dataset worked, and nothing said it would."""
    from tests.helpers import make_dataset
    from webui.dataset import name_note

    ws = make_dataset(tmp_path / "ws", "abebe")
    assert name_note(ws, " abebe ").startswith("abebe exists: Prepare adds these recordings to it")
    assert name_note(ws, "tigist") == "a new dataset: Prepare makes tigist" and name_note(ws, "") is None
    assert name_note(ws, "Abebe voice").startswith("The dataset name 'Abebe voice' cannot be used: use Latin or")
