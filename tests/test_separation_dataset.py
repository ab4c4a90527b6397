"""Music removal over a dataset and the tab's handlers: gate per clip, manifest, accept/revert, originals kept."""
from __future__ import annotations

import pytest
import soundfile as sf

import app
from tests.helpers import espeak_amharic, sentences
from utils.audio import file_digest, load_audio
from utils.events import StudioError, run_to_end
from utils.separation import dataset
from utils.separation.evaluation import mix_at_snr, synth_music
from utils.workspace import Workspace, read_jsonl, write_jsonl
from webui import separation as tab


@pytest.fixture()
def ws(tmp_path):
    """Dataset 'news': clip 'clean' (speech only) and clip 'song' (speech over music at 0 dB), 24 kHz."""
    ws = Workspace.open(tmp_path / "ws")
    folder = ws.dataset_dir("news")
    (folder / "raw").mkdir(parents=True)
    speech, sr = load_audio(espeak_amharic(sentences(3)[1], tmp_path / "s.wav", "am+m3"), sample_rate=24000)
    mix, _, _ = mix_at_snr(speech, synth_music(len(speech) / sr, sr, seed=5), 0.0)
    rows = []
    for clip_id, audio in (("clean", speech), ("song", mix)):
        sf.write(str(folder / "raw" / f"{clip_id}.wav"), audio, sr, subtype="PCM_16")
        (folder / "audio").mkdir(exist_ok=True)
        sf.write(str(folder / "audio" / f"{clip_id}.wav"), audio, sr, subtype="PCM_16")
        rows.append({"id": clip_id, "audio": f"audio/{clip_id}.wav", "text": "ሰላም", "duration": len(audio) / sr,
                     "speaker": "s", "split": "train", "flags": [], "excluded": False, "source": f"raw/{clip_id}.wav",
                     "sha1": file_digest(folder / "audio" / f"{clip_id}.wav"), "music": None})
    write_jsonl(folder / "manifest.jsonl", rows)
    return ws


def _digests(ws):
    folder = ws.dataset_dir("news")
    return {p.name: file_digest(p) for sub in ("raw", "audio") for p in sorted((folder / sub).iterdir())}


def test_dataset_separates_only_clips_with_music_and_accept_revert_keep_originals(ws):
    before = _digests(ws)
    result = run_to_end(dataset.process_dataset(ws, "news", backend="spleeter"))
    assert result["clips"] == 2 and result["separated"] == 1 and not result["errors"]
    folder = ws.dataset_dir("news")
    rows = {r["id"]: r for r in read_jsonl(folder / "manifest.jsonl")}
    assert rows["song"]["music"]["separated"] and rows["song"]["music"]["score"] > 0.05
    assert not rows["clean"]["music"]["separated"] and rows["clean"]["music"]["score"] < 0.015
    assert (folder / "separated" / "song.wav").exists() and not (folder / "separated" / "clean.wav").exists()
    assert rows["song"]["audio"] == "audio/song.wav"  # nothing changes until the curator accepts

    assert dataset.accept(ws, "news") == 1
    rows = {r["id"]: r for r in read_jsonl(folder / "manifest.jsonl")}
    assert rows["song"]["audio"] == "separated/song.wav" and rows["clean"]["audio"] == "audio/clean.wav"
    assert rows["song"]["sha1"] == file_digest(folder / "separated" / "song.wav")  # the feature cache key follows
    out, sr = sf.read(str(folder / "separated" / "song.wav"))
    assert sr == 24000 and out.ndim == 1

    # Running again after accepting separates the original, not the separated file.
    run_to_end(dataset.process_dataset(ws, "news", backend="dsp"))
    rows = {r["id"]: r for r in read_jsonl(folder / "manifest.jsonl")}
    assert rows["song"]["music"]["original"] == "audio/song.wav"

    assert dataset.revert(ws, "news") == 1
    rows = {r["id"]: r for r in read_jsonl(folder / "manifest.jsonl")}
    assert rows["song"]["audio"] == "audio/song.wav"
    assert rows["song"]["sha1"] == file_digest(folder / "audio" / "song.wav")
    assert _digests(ws) == before  # raw/ and audio/ were never written


def test_accept_uses_only_clear_music_unless_the_curator_picks_clips(ws):
    """A clip separated on a faint score (here the clean one, with the gate's threshold put under it) stays
    original on Accept; the curator picking it switches it, and only it."""
    from utils.separation.gate import CLEAR

    run_to_end(dataset.process_dataset(ws, "news", backend="dsp", threshold=0.0))
    folder = ws.dataset_dir("news")
    rows = {r["id"]: r for r in read_jsonl(folder / "manifest.jsonl")}
    assert rows["clean"]["music"]["separated"] and rows["clean"]["music"]["score"] < CLEAR <= rows["song"]["music"]["score"]
    assert [r["music"] for r in dataset.summary(ws, "news")] == ["faint: listen, pick to use", "yes, clearly"]

    message, table = tab.accept(ws, "news", [])
    assert message.startswith("1 clip(s) with clear music") and list(table["in use"]) == ["original", "separated"]
    message, table = tab.accept(ws, "news", ["clean"])
    assert message.startswith("1 clip(s) picked") and list(table["in use"]) == ["separated", "separated"]
    assert tab.faint_ids(ws, "news")["choices"] == ["clean", "song"]
    with pytest.raises(StudioError, match="no clip 'nope'"):
        dataset.accept(ws, "news", ["nope"])


def test_unreadable_clip_is_reported_and_the_rest_goes_on(ws):
    folder = ws.dataset_dir("news")
    (folder / "audio" / "clean.wav").write_bytes(b"not audio at all")
    result = run_to_end(dataset.process_dataset(ws, "news", backend="dsp"))
    assert len(result["errors"]) == 1 and "clean" in result["errors"][0] and "clean.wav" in result["errors"][0]
    assert result["separated"] == 1


def test_missing_dataset_is_a_clear_error(ws):
    with pytest.raises(StudioError, match="no manifest"):
        run_to_end(dataset.process_dataset(ws, "nothing-here"))


def test_cli_dataset_mode_prints_progress(ws, capsys):
    assert app.main(["separate", "--dataset", "news", "--backend", "dsp", "--workspace", str(ws.root)]) == 0
    out = capsys.readouterr().out
    assert "song music: separated" in out and "clean clean: passed through" in out


def test_tab_handlers_run_listen_accept_and_revert(ws, tmp_path):
    assert "spleeter" in tab.backend_note("auto") and "chosen by you" in tab.backend_note("dsp")
    assert tab.dataset_choices(ws)["choices"] == ["news"]
    *_, (log, table) = list(tab.run_dataset(ws, "news", "dsp", True, progress=None))
    assert "1 of 2 clips had music" in log
    assert list(table["music"]) == ["no", "yes, clearly"]
    choices = tab.clip_ids(ws, "news")["choices"]  # each clip named with its score
    assert [value for _, value in choices] == ["clean", "song"] and all("music score 0." in label for label, _ in choices)
    before, after = tab.show_clip(ws, "news", "song")
    assert before.endswith("audio/song.wav") and after.endswith("separated/song.wav")
    assert tab.show_clip(ws, "news", "clean")[1] is None
    message, table = tab.accept(ws, "news")
    assert message.startswith("1 clip") and list(table["in use"]) == ["original", "separated"]
    message, table = tab.revert(ws, "news")
    assert list(table["in use"]) == ["original", "original"]

    upload = ws.dataset_dir("news") / "raw" / "song.wav"
    *_, (log, original, speech, residual) = list(tab.run_file(ws, str(upload), "dsp", True, progress=None))
    assert "music found" in log and original == str(upload)
    assert sf.info(speech).frames == sf.info(str(upload)).frames == sf.info(residual).frames


def test_tab_builds_inside_the_app(ws):
    from webui.app import build_ui
    from webui.context import AppContext

    demo = build_ui(AppContext(ws))
    names = {d.get("api_name") for d in demo.config["dependencies"]}
    assert {"separation_run_dataset", "separation_accept", "separation_revert", "separation_clip"} <= names
