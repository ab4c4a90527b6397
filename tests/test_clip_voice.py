"""An OmniVoice voice from one clip with no training (utils/omnivoice/clip_voice.py, `app.py clip-voice`): from a
dataset row or an audio file, refused with a message naming the clip before anything is fetched, and spoken."""
from __future__ import annotations

import json
import re
import shutil

import pytest

import app
from tests.helpers import espeak_amharic
from utils.audio import file_digest
from utils.events import StudioError, run_to_end
from utils.inference import synthesize, voice_choices, voice_engine
from utils.omnivoice.clip_voice import make_clip_voice, suggest_rows
from utils.workspace import Workspace, read_jsonl, write_jsonl

LONG = "ሰላም ነው። እንዴት ነህ? ዛሬ ጥሩ ቀን ነው። ወደ ገበያ እንሄዳለን።"  # 6.5 s at 150 words a minute
LONGER = LONG + " ነገ ደግሞ ትምህርት ቤት እንሄዳለን።"
SHORT = "ሰላም ነው።"


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    from utils.omnivoice.tiny import write_tiny_base

    return write_tiny_base(tmp_path_factory.mktemp("omnivoice") / "omnivoice")


def clip_dataset(ws: Workspace, name: str = "am") -> Workspace:
    """Rows a clip voice chooses among: two of 5-15 s (6.5 s and, first in the table, 9.7 s), one too short, one
    without a transcript, one excluded."""
    folder = ws.dataset_dir(name)
    spoken = {"longer": LONGER, "long": LONG, "short": SHORT, "untold": LONGER, "dropped": LONGER}
    rows = []
    for rid, text in spoken.items():
        import soundfile as sf

        path = espeak_amharic(text, folder / "audio" / f"{rid}.wav", rate=150)
        rows.append({"id": rid, "audio": f"audio/{rid}.wav", "text": "" if rid == "untold" else text,
                     "duration": sf.info(str(path)).duration, "speaker": "s", "split": "train",
                     "flags": ["missing_text"] if rid == "untold" else [], "excluded": rid == "dropped",
                     "source": f"raw/{rid}.wav", "sha1": "", "music": None})
    write_jsonl(folder / "manifest.jsonl", rows)
    return ws


@pytest.fixture
def ws(tmp_path, tiny_base):
    ws = Workspace.open(tmp_path / "workspace")
    shutil.copytree(tiny_base, ws.root / "pretrained" / "omnivoice")  # found there: nothing is downloaded
    return clip_dataset(ws)


def test_rows_offered_are_kept_5_to_15_s_with_a_transcript_nearest_8_s_first(ws):
    offered = suggest_rows(ws, "am")
    assert [r["id"] for r in offered] == ["long", "longer"]  # 6.5 s is nearer 8 s than 9.7 s
    assert 5 <= offered[0]["duration"] < offered[1]["duration"] <= 15 and offered[0]["text"] == LONG


def test_a_voice_from_a_dataset_row_speaks_and_leaves_the_row_alone(ws):
    clip = ws.dataset_dir("am") / "audio" / "long.wav"
    before = file_digest(clip)
    folder = run_to_end(make_clip_voice(ws, "tigist", dataset="am", row="long"))
    assert folder == ws.voice_dir("tigist") and (folder / "prompt.wav").is_file()
    assert file_digest(clip) == before
    assert "tigist" in [v for _, v in voice_choices(ws)] and voice_engine(ws, "tigist") == "omnivoice"
    wave, sr, info = synthesize(ws, "tigist", "ሰላም ነው። እንዴት ነህ?", steps=2)
    assert sr == 24_000 and len(wave) > 0 and info["spoken"] == 2


def test_a_voice_from_an_audio_file_and_its_typed_transcript(ws, tmp_path):
    clip = espeak_amharic(LONG, tmp_path / "mine.wav", rate=150)
    before = file_digest(clip)
    events = list(make_clip_voice(ws, "abebe", clip=clip, text=LONG))
    assert events[-1].result == ws.voice_dir("abebe") and file_digest(clip) == before
    assert "mine.wav" in events[0].message


def test_the_reference_transcript_is_read_as_the_text_spoken_and_training_read_it(ws):
    """A typed "2" was kept as a digit in the reference while the text spoken went through the studio's normaliser,
    and the package's add_punctuation wrote an ASCII period after "።"."""
    from utils.inference import Voice
    from utils.omnivoice.speech import OmniVoiceText

    typed = "ሰላም ነው 2 ሰዎች መጡ። ዛሬ ጥሩ ቀን ነው።"
    folder = run_to_end(make_clip_voice(ws, "hana", dataset="am", row="long", text=typed))
    prompt = json.loads((folder / "config.json").read_text())["prompt"]
    assert prompt["typed"] == typed and "2" not in prompt["text"] and "ሁለት" in prompt["text"]
    assert prompt["text"] == "".join(OmniVoiceText().units(typed))  # as a fine-tune reads a clip's text
    assert Voice.load(folder).model.prompt.ref_text == prompt["text"]  # "።" ends it; no "." after it
    bare = run_to_end(make_clip_voice(ws, "bare", dataset="am", row="long", text="ሰላም ነው እንዴት ነህ"))
    assert json.loads((bare / "config.json").read_text())["prompt"]["text"] == "ሰላም ነው እንዴት ነህ።"


@pytest.mark.parametrize("given, said", [
    (dict(clip="short.wav", text=SHORT), r"short.wav is [0-9.]+ s long.*5-15 s works best"),
    (dict(clip="mine.wav", text="  "), "mine.wav: give the clip's transcript"),
    (dict(dataset="am", row="nope"),
     r"has no row 'nope': pick one of its rows; these suit a clip best: long \(6.5 s\), longer"),
    (dict(dataset="am", row="untold"), "untold.wav: give the clip's transcript"),
])
def test_a_clip_that_would_not_do_is_refused_by_name(ws, tmp_path, given, said):
    if "clip" in given:
        given["clip"] = espeak_amharic(SHORT if "short" in given["clip"] else LONG, tmp_path / given["clip"])
    with pytest.raises(StudioError, match=said):
        run_to_end(make_clip_voice(ws, "v", **given))
    assert not ws.voice_dir("v").exists()


def test_a_name_in_use_is_refused_and_the_voice_there_kept(ws):
    run_to_end(make_clip_voice(ws, "tigist", dataset="am", row="long"))
    made = (ws.voice_dir("tigist") / "config.json").read_text()
    with pytest.raises(StudioError, match="A voice called tigist exists already"):
        run_to_end(make_clip_voice(ws, "tigist", dataset="am", row="longer"))
    assert (ws.voice_dir("tigist") / "config.json").read_text() == made


@pytest.fixture
def no_base(tmp_path, monkeypatch):
    """A workspace with the dataset and no OmniVoice base on this machine (an empty Hugging Face cache)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    return clip_dataset(Workspace.open(tmp_path / "bare"))


def test_without_a_base_here_the_licence_is_asked_before_any_download(no_base, monkeypatch):
    monkeypatch.setattr("utils.omnivoice.base.hub_reachable", lambda *a, **k: True)
    with pytest.raises(StudioError, match="CC-BY-NC-4.0.*Boson.*say yes to both licences"):
        run_to_end(make_clip_voice(no_base, "v", dataset="am", row="long"))
    assert not (no_base.root / "pretrained" / "omnivoice").exists() and not no_base.voice_dir("v").exists()


def test_offline_without_a_base_says_where_to_put_one(no_base):
    with pytest.raises(StudioError, match="cannot reach the Hugging Face hub.*pretrained/omnivoice/"):
        run_to_end(make_clip_voice(no_base, "v", dataset="am", row="long", accept_licence=True))


def test_the_section_says_at_once_when_the_base_cannot_be_had_here(no_base, monkeypatch):
    """Offline, the section offered a download and said otherwise only after the form was filled and sent."""
    from webui.clip_voice import INTRO, readiness

    assert "downloaded once" not in INTRO  # the intro promised a download the line under it then took back

    line, _, asks_licence = readiness(no_base)
    assert "cannot reach the Hugging Face hub" in line and "pretrained/omnivoice/" in line
    assert not asks_licence  # no licence box for a download that cannot happen here
    monkeypatch.setattr("utils.omnivoice.base.hub_reachable", lambda *a, **k: True)
    line, _, asks_licence = readiness(no_base)
    assert "**Make voice** downloads it once" in line and asks_licence


def test_no_licence_box_where_the_base_is_here_already(ws):
    from webui.clip_voice import readiness

    line, _, asks_licence = readiness(ws)
    assert "no download is needed" in line and not asks_licence


def test_a_dataset_with_no_clip_of_5_to_15_s_says_so_in_the_refusal_with_its_lengths(ws, tmp_path):
    """Clips of 1.7-4.6 s left the Row list empty with a grey hint, and Make voice said only "Give the clip the voice
    copies: a dataset and one of its rows, or an audio file and its transcript"."""
    from webui.clip_voice import FROM_ROW, make, row_choices

    clip_dataset(ws, "brief")
    brief = ws.dataset_dir("brief")
    rows = [r for r in read_jsonl(brief / "manifest.jsonl") if r["id"] in ("short", "untold")]  # 1.3 s, no text
    write_jsonl(brief / "manifest.jsonl", rows)
    said = row_choices(ws, "brief")["info"]  # the hint under the empty Row list
    assert re.fullmatch(r"Dataset brief has no kept clip of 5-15 s with a transcript \(its kept clips with text last "
                        r"1\.\d s\): use an audio file of 5-15 s and type what is said in it\.", said), said
    with pytest.raises(StudioError) as refused:
        list(make(ws, FROM_ROW, "brief", None, None, "", "v", False))
    assert str(refused.value) == said and not ws.voice_dir("v").exists()
    with pytest.raises(StudioError, match="Pick the row of dataset am whose clip the voice copies"):
        list(make(ws, FROM_ROW, "am", None, None, "", "v", False))


def test_cli_lists_the_rows_then_makes_the_voice_that_synth_speaks(ws, capsys, tmp_path):
    where = ["--workspace", str(ws.root)]
    assert app.main(["clip-voice", *where, "tigist", "--dataset", "am"]) == 2
    assert "longer" in capsys.readouterr().err
    assert app.main(["clip-voice", *where, "tigist", "--dataset", "am", "--row", "longer"]) == 0
    assert "synth --voice tigist" in capsys.readouterr().out
    out = tmp_path / "said.wav"
    assert app.main(["synth", *where, "--voice", "tigist", "--steps", "2", "--out", str(out), "ሰላም ነው።"]) == 0
    assert out.stat().st_size > 1000


def test_the_page_makes_a_voice_from_an_uploaded_clip_and_picks_it(ws, tmp_path):
    import gradio as gr

    from webui.clip_voice import FROM_FILE, make

    with pytest.raises(gr.Error, match="Upload a clip"):
        list(make(ws, FROM_FILE, None, None, None, LONG, "abebe", False))
    clip = espeak_amharic(LONG, tmp_path / "upload.wav")
    *_, (log, picker, status, licence) = make(ws, FROM_FILE, None, None, str(clip), LONG, "abebe", False)
    assert "upload.wav" in log and "abebe is picked above" in log and "no download is needed" in status
    assert picker["value"] == "abebe" and "abebe" in [v for _, v in picker["choices"]]
