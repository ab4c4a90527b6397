"""Music removal over a dataset and the tab's handlers: gate per clip, manifest, accept/revert, originals kept."""
from __future__ import annotations

import pytest
import soundfile as sf

import app
from tests.helpers import news_dataset, write_clip_row
from utils.audio import file_digest, load_audio
from utils.events import StudioError, run_to_end
from utils.separation import dataset
from utils.workspace import Workspace, write_jsonl
from utils.datasets import load_manifest
from webui import separation as tab


@pytest.fixture()
def ws(tmp_path):
    """Dataset 'news': clip 'clean' (speech only) and clip 'song' (speech over music at 0 dB), 24 kHz."""
    return news_dataset(tmp_path / "ws", tmp_path)


def _digests(ws):
    folder = ws.dataset_dir("news")
    return {p.name: file_digest(p) for sub in ("raw", "audio") for p in sorted((folder / sub).iterdir())}


def test_dataset_separates_only_clips_with_music_and_accept_revert_keep_originals(ws):
    before = _digests(ws)
    result = run_to_end(dataset.process_dataset(ws, "news", backend="spleeter"))
    assert result["clips"] == 2 and result["separated"] == 1 and not result["errors"]
    folder = ws.dataset_dir("news")
    rows = {r["id"]: r for r in load_manifest(ws, "news")}
    assert rows["song"]["music"]["separated"] and rows["song"]["music"]["score"] > 0.05
    assert not rows["clean"]["music"]["separated"] and rows["clean"]["music"]["score"] < 0.015
    assert (folder / "separated" / "song.wav").exists() and not (folder / "separated" / "clean.wav").exists()
    assert rows["song"]["audio"] == "audio/song.wav"  # nothing changes until the curator accepts

    assert dataset.accept(ws, "news") == 1
    rows = {r["id"]: r for r in load_manifest(ws, "news")}
    assert rows["song"]["audio"] == "separated/song.wav" and rows["clean"]["audio"] == "audio/clean.wav"
    assert rows["song"]["sha1"] == file_digest(folder / "separated" / "song.wav")  # the feature cache key follows
    out, sr = sf.read(str(folder / "separated" / "song.wav"))
    assert sr == 24000 and out.ndim == 1

    # Running again after accepting separates the original, not the separated file.
    run_to_end(dataset.process_dataset(ws, "news", backend="dsp"))
    rows = {r["id"]: r for r in load_manifest(ws, "news")}
    assert rows["song"]["music"]["original"] == "audio/song.wav"

    assert dataset.revert(ws, "news") == 1
    rows = {r["id"]: r for r in load_manifest(ws, "news")}
    assert rows["song"]["audio"] == "audio/song.wav"
    assert rows["song"]["sha1"] == file_digest(folder / "audio" / "song.wav")
    assert _digests(ws) == before  # raw/ and audio/ were never written


def test_accept_uses_only_clear_music_unless_the_curator_picks_clips(ws):
    """A clip separated on a faint score (here the clean one, with the gate's threshold put under it) stays
    original on Accept; the curator picking it switches it, and only it."""
    from utils.separation.gate import CLEAR

    run_to_end(dataset.process_dataset(ws, "news", backend="dsp", threshold=0.0))
    rows = {r["id"]: r for r in load_manifest(ws, "news")}
    assert rows["clean"]["music"]["separated"] and rows["clean"]["music"]["score"] < CLEAR <= rows["song"]["music"]["score"]
    assert [r["music"] for r in dataset.summary(ws, "news")] == ["faint: listen, pick to use", "yes, clearly"]

    assert [r["id"] for r in dataset.listening_order(ws, "news")] == ["song", "clean"]  # clear music first
    assert dataset.progress(ws, "news") == {"music": 1, "faint": 1, "in_use": 0, "waiting": 1}
    message, table = tab.accept(ws, "news", [])
    assert message.startswith("1 clip(s) with clear music") and list(table["id"]) == ["song", "clean"]
    assert list(table["in use"]) == ["separated", "original"]
    assert dataset.progress(ws, "news") == {"music": 1, "faint": 1, "in_use": 1, "waiting": 0}
    message, table = tab.accept(ws, "news", ["clean"])
    assert message.startswith("1 clip(s) picked") and list(table["in use"]) == ["separated", "separated"]
    assert tab.faint_ids(ws, "news")["choices"] == ["song", "clean"]
    assert [r["id"] for r in dataset.listening_order(ws, "news", limit=1)] == ["song"]
    with pytest.raises(StudioError, match="no clip 'nope'"):
        dataset.accept(ws, "news", ["nope"])


def test_unreadable_clip_is_reported_and_the_rest_goes_on(ws):
    folder = ws.dataset_dir("news")
    (folder / "audio" / "clean.wav").write_bytes(b"not audio at all")
    result = run_to_end(dataset.process_dataset(ws, "news", backend="dsp"))
    assert len(result["errors"]) == 1 and "clean" in result["errors"][0] and "clean.wav" in result["errors"][0]
    assert result["separated"] == 1


def test_missing_dataset_is_a_clear_error(ws):
    with pytest.raises(StudioError, match="There is no dataset called 'nothing-here'. Datasets: news."):
        run_to_end(dataset.process_dataset(ws, "nothing-here"))
    (ws.dataset_dir("half")).mkdir()  # a folder a prepare left before writing any row
    with pytest.raises(StudioError, match="Dataset 'half' has no rows yet; prepare it"):
        run_to_end(dataset.process_dataset(ws, "half"))


def test_cli_dataset_mode_prints_progress(ws, capsys):
    assert app.main(["separate", "--dataset", "news", "--backend", "dsp", "--workspace", str(ws.root)]) == 0
    out = capsys.readouterr().out
    assert "song music: separated" in out and "clean clean: passed through" in out


def test_tab_handlers_run_listen_accept_and_revert(ws, tmp_path):
    assert "spleeter" in tab.backend_note("auto") and "chosen by you" in tab.backend_note("dsp")
    assert tab.dataset_choices(ws)["choices"] == ["news"]
    *_, (log, table, done) = list(tab.run_dataset(ws, "news", "dsp", True, progress=None))
    assert "1 of 2 clips had music" in log
    assert done.startswith("**Done:** 1 of 2 clips had music") and "Accept" in done  # said where it is seen
    assert list(table["music"]) == ["yes, clearly", "no"]  # in listening order: the music first
    choices = tab.clip_ids(ws, "news")["choices"]  # each clip named with its score, the music first
    assert [value for _, value in choices] == ["song", "clean"] and all("music score 0." in label for label, _ in choices)
    before, after = tab.show_clip(ws, "news", "song")
    assert before.endswith("audio/song.wav") and after["value"].endswith("separated/song.wav")
    assert tab.show_clip(ws, "news", "clean")[1]["value"] is None
    message, table = tab.accept(ws, "news")
    assert message.startswith("1 clip") and list(table["in use"]) == ["separated", "original"]
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


def test_the_clip_list_is_current_each_time_the_tab_opens(ws):
    """20 clips added on the Dataset tab were not in the list when the tab was opened again (the 11 it had showed
    until Remove music ran): opening the tab brought only the dataset picker up to date."""
    import gradio as gr

    from utils.datasets import load_manifest, save_manifest
    from webui.context import AppContext

    with gr.Blocks():
        hooks = tab.build(AppContext(ws))
    fn, inputs, outputs = next((fn, i, o) for fn, i, o, *when in hooks if when == ["open"])
    shown = {o.elem_id: k for k, o in enumerate(outputs)}
    said = fn("news", "clean", ["song"])  # the page as the curator left it, listening to 'clean'
    assert len(said[shown["sep-table"]]) == 2
    rows = load_manifest(ws, "news")  # two clips added meanwhile
    save_manifest(ws, "news", rows + [{**r, "id": f"{r['id']}-2"} for r in rows])
    said = fn("news", "clean", ["song"])
    assert sorted(said[shown["sep-table"]]["id"]) == ["clean", "clean-2", "song", "song-2"]
    clips = said[shown["sep-clip"]]
    assert sorted(v for _, v in clips["choices"]) == ["clean", "clean-2", "song", "song-2"]
    assert clips["value"] == "clean" and said[shown["sep-picks"]]["value"] == []  # 'song' has no separated audio


def test_music_and_faint_candidates_are_counted_apart_and_the_listen_list_starts_at_the_music(ws):
    """With the gate's threshold put under the clean clip, it becomes a faint candidate: the run says 1 clip had
    music and 1 more a faint score (not "2 of 2 had music"), the table agrees, and the listen list starts at the
    clip with music, strongest first."""
    result = run_to_end(dataset.process_dataset(ws, "news", backend="dsp", threshold=0.0))
    assert (result["with_music"], result["faint"], result["separated"]) == (1, 1, 2)
    message = dataset.done_message(result)
    assert message.startswith("1 of 2 clips had music and were separated; 1 more had a faint score")
    assert "left as they are unless picked" in message
    assert [r["music"] for r in dataset.summary(ws, "news")] == ["faint: listen, pick to use", "yes, clearly"]
    picker = tab.clip_ids(ws, "news")
    assert picker["value"] == "song" and [v for _, v in picker["choices"]] == ["song", "clean"]
    assert picker["choices"][0][0].startswith("song (yes, clearly: music score")


def test_the_after_player_says_what_it_plays(ws):
    """Not "empty: no music found" over the cleaned audio: the label says it is the music-removed audio and whether
    training uses it (before and after Accept), or that nothing was removed."""
    assert tab.show_clip(ws, "news", "song")[1]["label"] == "After: nothing yet (press Remove music)"
    run_to_end(dataset.process_dataset(ws, "news", backend="dsp"))
    after = tab.show_clip(ws, "news", "song")[1]
    assert after["value"].endswith("separated/song.wav")
    assert after["label"] == "After: music removed (not in use: press Accept to use it)"
    tab.accept(ws, "news")
    assert tab.show_clip(ws, "news", "song")[1]["label"] == "After: music removed (in use for training)"
    clean = tab.show_clip(ws, "news", "clean")[1]
    assert clean["value"] is None and clean["label"].startswith("After: nothing (no music found in this clip")


def test_accepted_clips_are_measured_as_they_are_now_and_the_advice_follows(tmp_path):
    """A prepared clip recorded over music is flagged noisy (low_snr) and the Dataset tab asks for music removal.
    Once its music-removed audio is accepted, it is measured again on that audio: the flag goes and the advice says
    what removal did; Re-check keeps it so; Revert brings the preparation's measure (and the flag) back."""
    from tests.helpers import make_ljspeech_zip
    from utils import datasets
    from utils.datasets import prepare
    from webui.dataset import summary_markdown

    ws = Workspace.open(tmp_path / "ws")
    run_to_end(prepare(ws, "abebe", make_ljspeech_zip(tmp_path)))

    def flags():
        return {r["id"]: r["flags"] for r in load_manifest(ws, "abebe")}

    assert flags()["clip00"] == ["low_snr"]
    assert "remove background music on the **Music removal** tab" in summary_markdown(ws, "abebe")
    run_to_end(dataset.process_dataset(ws, "abebe", backend="dsp"))
    assert dataset.accept(ws, "abebe") == 1
    assert "low_snr" not in flags()["clip00"]
    assert datasets.load_report(ws, "abebe")["summary"]["flags"].get("low_snr", 0) == 0
    advice = summary_markdown(ws, "abebe")
    assert "remove background music" not in advice
    assert "music removal found music in 1 clip(s); 1 train on their music-removed audio" in advice
    datasets.recheck(ws, "abebe")
    assert "low_snr" not in flags()["clip00"]
    checked = len(load_manifest(ws, "abebe"))
    said = [e.message for e in prepare(ws, "abebe")]  # prepared again, as adding recordings does: it stays accepted
    assert (f"Kept the music removal of {checked} row(s), 1 of them playing their music-removed audio as you "
            "accepted.") in said
    row = {r["id"]: r for r in load_manifest(ws, "abebe")}["clip00"]
    assert row["audio"] == "separated/clip00.wav" and row["music"]["separated"] and "low_snr" not in row["flags"]
    assert row["sha1"] == file_digest(ws.dataset_dir("abebe") / "separated" / "clip00.wav")
    assert dataset.revert(ws, "abebe") == 1
    assert flags()["clip00"] == ["low_snr"]
    assert ("music removal found music in 1 clip(s); 1 with music still train on their original (Accept on the "
            "**Music removal** tab") in summary_markdown(ws, "abebe")
    # a clip made again (its recording saved over) is not the clip that was separated: its result goes, said
    assert dataset.accept(ws, "abebe") == 1
    row = {r["id"]: r for r in load_manifest(ws, "abebe")}["clip00"]
    recording = ws.dataset_dir("abebe") / row["source"]
    audio, rate = sf.read(recording)
    sf.write(recording, audio[: len(audio) // 2], rate)
    said = [e.message for e in prepare(ws, "abebe")]
    assert any("1 row(s) whose clip was made again lost the music removal done on their old clip (clip00): run Music "
               "removal again for them." in (m or "") for m in said), said
    row = {r["id"]: r for r in load_manifest(ws, "abebe")}["clip00"]
    assert row["audio"] == "audio/clip00.wav" and row["music"] is None


def test_a_run_cut_off_goes_on_where_it_stopped_and_says_what_is_left(ws):
    calls = []

    def stop_after_one():
        calls.append(1)
        return len(calls) > 1  # asked before each clip: the second clip is never started

    with pytest.raises(StudioError, match="Cancelled after 1 of 2 clips"):
        run_to_end(dataset.process_dataset(ws, "news", backend="dsp", should_stop=stop_after_one))
    first = {r["id"]: r["music"] for r in load_manifest(ws, "news")}
    assert first["clean"]["backend"] == "dsp" and first["song"] is None  # the clip done was saved at the cancel

    said = []
    result = run_to_end(dataset.process_dataset(ws, "news", backend="dsp"), printer=said.append)
    assert "1 of 2 clips to check" in said[0] and "1 checked before with these settings are kept" in said[0]
    assert "or --redo on the command line" in said[0]  # the line is read in a terminal too
    assert [line for line in said if "song" in line] and not [line for line in said if "clean " in line]
    assert result["clips"] == 2 and result["with_music"] == 1  # the summary counts the clip kept from before
    assert load_manifest(ws, "news")[0]["music"] == first["clean"]

    said.clear()
    run_to_end(dataset.process_dataset(ws, "news", backend="dsp", redo=True), printer=said.append)
    assert "2 of 2 clips to check" in said[0] and "left" in said[1] and "left" not in said[2]
    said.clear()
    run_to_end(dataset.process_dataset(ws, "news", backend="dsp", gate=False), printer=said.append)
    assert "2 of 2 clips to check" in said[0]  # other settings: every clip again


def test_the_gate_spread_over_workers_finds_what_one_process_finds(ws, monkeypatch):
    """With enough clips the gate runs in worker processes and only the clips with music are separated here: every
    row's result, file and error is the one a single process gives, and a clean clip is never read here again."""
    folder = ws.dataset_dir("news")
    rows = load_manifest(ws, "news")
    broken = dict(rows[0], id="broken", audio="audio/broken.wav", source="raw/broken.wav")
    (folder / "raw" / "broken.wav").write_bytes(b"RIFF, but not audio")
    (folder / "audio" / "broken.wav").write_bytes(b"RIFF, but not audio")
    outside = dict(rows[0], id="outside", audio="../../../audio/outside.wav",
                   source="../../../audio/outside.wav")  # a real file, outside the workspace
    write_clip_row(folder.parent.parent.parent, "outside", load_audio(folder / "audio" / "clean.wav")[0], 24000)
    write_jsonl(folder / "manifest.jsonl", rows + [broken, outside])
    (folder / "manifest.sqlite").unlink(missing_ok=True)
    separated_here = []
    real = dataset.separate_verbose
    monkeypatch.setattr(dataset, "separate_verbose", lambda audio, *a, **k: separated_here.append(len(audio))
                        or real(audio, *a, **k))

    def results():
        return {r["id"]: r["music"] for r in load_manifest(ws, "news")}, \
            {p.name: file_digest(p) for p in sorted((folder / "separated").iterdir())}

    alone = run_to_end(dataset.process_dataset(ws, "news", backend="dsp", workers=1))
    alone_rows, alone_files = results()
    assert len(separated_here) == 2 and len(alone["errors"]) == 2  # clean and song; broken and outside refused
    assert (ws.root.parent / "audio" / "outside.wav").exists() and "row outside: " in " ".join(alone["errors"])

    separated_here.clear()
    monkeypatch.setattr(dataset, "POOL_MIN_TASKS", 1)  # the workers even for four clips
    said = []
    spread = run_to_end(dataset.process_dataset(ws, "news", backend="dsp", workers=2, redo=True), printer=said.append)
    assert "the detector runs on 2 cores" in said[0]
    assert results() == (alone_rows, alone_files) and alone_rows["song"]["separated"]
    assert sorted(spread["errors"]) == sorted(alone["errors"]) 
    assert len(separated_here) == 1  # only the song: the clean clip was judged in a worker


def test_a_faint_score_is_logged_as_kept_not_as_music_separated(ws, monkeypatch):
    """Nine clean clips with faint scores were logged "music: separated (score 0.02)"; only the summary said they
    stay as they are unless picked. Each line now says what happens to its clip."""
    real = dataset._separate_row

    def faint_song(ws_, row, folder, settings, gated):
        score, music, speech, sr = real(ws_, row, folder, settings, gated)
        return (0.03 if row["id"] == "song" else score), music, speech, sr  # between the gate's THRESHOLD and CLEAR

    monkeypatch.setattr(dataset, "_separate_row", faint_song)
    lines = [e.message for e in dataset.process_dataset(ws, "news", backend="dsp")]
    assert any("song faint: kept as is (separated only to listen to) (score 0.03" in line for line in lines), lines
    assert not any("song music: separated" in line for line in lines)
