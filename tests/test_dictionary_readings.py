"""A dataset's transcripts are read with the pronunciation dictionary: when it is prepared, when a transcript is fixed,
and again by the next run when the dictionary changed since (a curator who forgot "Convert transcripts" trained on
readings the voice would never say)."""
from __future__ import annotations

from tests.helpers import espeak_amharic, sentences
from utils.datasets import apply_edits, get_rows, prepare
from utils.events import run_to_end
from utils.text import save_user_dict
from utils.datasets.manifest import READ_WITH
from utils.text.lexicon import dictionary_stamp
from utils.training import TrainConfig, prepare_run
from utils.workspace import Workspace, read_json

WORD, SAID = "ዋና", ["w", "a", "n", "a"]  # the rules geminate it: w a nː a
LATIN, LATIN_SAID = "Hello", ["h", "ə", "l", "o"]


def prepared(tmp_path) -> Workspace:
    """Three espeak-ng clips; the first transcript has the dictionary's Amharic word and an English one."""
    ws = Workspace.open(tmp_path / "ws")
    save_user_dict(ws, {WORD: SAID, LATIN: LATIN_SAID})
    texts = [f"{WORD} {LATIN} {sentences()[0]}"] + sentences()[1:3]
    folder = tmp_path / "upload"
    for i, text in enumerate(texts):
        espeak_amharic(text, folder / "wavs" / f"u{i}.wav")
    (folder / "metadata.csv").write_text("".join(f"u{i}|{t}\n" for i, t in enumerate(texts)), encoding="utf-8")
    run_to_end(prepare(ws, "am", folder, workers=1))
    return ws


def first_row(ws: Workspace) -> dict:
    return get_rows(ws, "am", ["u0"])["u0"]


def start(ws: Workspace, run: str):
    return prepare_run(TrainConfig.from_dict(dict(workspace=str(ws.root), dataset="am", run=run, preset="tiny",
                                                  max_steps=2)))


def test_prepare_reads_with_the_dictionary_and_a_run_reads_again_after_it_changed(tmp_path):
    ws = prepared(tmp_path)
    row = first_row(ws)
    assert row["phonemes"].startswith("w a n a | h ə l o |")  # the dictionary's readings, not the rules'
    assert LATIN in row["normalized"] and "normalizer" not in row["notes"]  # no "add it to the dictionary" asked
    assert read_json(ws.dataset_dir("am") / READ_WITH)["dictionary"] == dictionary_stamp({WORD: SAID, LATIN: LATIN_SAID})

    save_user_dict(ws, {LATIN: LATIN_SAID})  # the curator takes the Amharic word out, and forgets to convert
    path = start(ws, "r1")
    assert first_row(ws)["phonemes"].startswith("w a nː a | h ə l o |")  # read by the rules again, as speaking will
    assert "the pronunciation dictionary changed since am's transcripts were read: read them again with it (1 of 3 " \
           "row(s) changed)" in (path.parent / "train.log").read_text(encoding="utf-8")
    second = start(ws, "r2")  # nothing changed since: nothing read again, nothing said
    assert not (second.parent / "train.log").exists()


def test_a_fixed_transcript_is_read_with_the_dictionary(tmp_path):
    ws = prepared(tmp_path)
    apply_edits(ws, "am", [{"id": "u1", "action": "text", "text": f"{sentences()[1]} {WORD}"}])
    assert get_rows(ws, "am", ["u1"])["u1"]["phonemes"].endswith("| w a n a")
    assert not (start(ws, "r1").parent / "train.log").exists()  # nothing was left to read again


def test_converting_after_a_dictionary_change_refreshes_the_rows_notes_and_the_report(tmp_path):
    from utils.datasets.curate import convert_dataset

    ws = prepared(tmp_path)
    save_user_dict(ws, {WORD: SAID})  # "Hello" leaves the dictionary: the checks now ask for it
    said = run_to_end(convert_dataset(ws, "am"))
    row = first_row(ws)
    assert "Hello" in row["notes"]["normalizer"] and row["phonemes"].startswith("w a n a |")
    assert any(w.startswith("row u0: normalizer:") and "Hello" in w for w in said["warnings"])
    assert said["changed"] == 1 and said["rows"] == 3

    save_user_dict(ws, {WORD: SAID, LATIN: LATIN_SAID})  # and comes back: the note goes with it (it stayed)
    said = run_to_end(convert_dataset(ws, "am"))
    assert "normalizer" not in first_row(ws)["notes"] and said["warnings"] == [] and said["changed"] == 1
    assert run_to_end(convert_dataset(ws, "am"))["changed"] == 0  # read as it is: nothing written


def test_a_run_that_waited_in_the_queue_reads_a_dictionary_changed_meanwhile(tmp_path):
    """A word added while a run was queued was not trained on: its start had read the transcripts when it was
    queued, and the trainer began minutes later."""
    from utils import jobs

    ws = prepared(tmp_path)
    run_dir = start(ws, "queued").parent  # read at queueing: current
    save_user_dict(ws, {LATIN: LATIN_SAID})  # meanwhile the Amharic word leaves the dictionary
    jobs.read_transcripts_again(run_dir, {"trainer_module": "utils.training"})  # the launcher, its turn come
    assert first_row(ws)["phonemes"].startswith("w a nː a |")
    log = (run_dir / "train.log").read_text(encoding="utf-8")
    assert "the pronunciation dictionary changed since am's transcripts were read" in log
    save_user_dict(ws, {})
    jobs.read_transcripts_again(run_dir, {"trainer_module": "utils.vocoder.training"})  # reads no transcript
    assert (run_dir / "train.log").read_text(encoding="utf-8") == log
