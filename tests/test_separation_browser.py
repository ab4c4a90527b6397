"""The Music removal tab in a real browser: a run says how many clips had music, the listen list
opens on the clip with music, and the After player says what it plays, before and after Accept."""
from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.helpers import espeak_amharic, screenshot, sentences, write_clip_row
from utils.audio import load_audio
from utils.separation.evaluation import mix_at_snr, synth_music
from utils.workspace import Workspace, write_jsonl


def music_dataset(root, tmp) -> Workspace:
    """Dataset 'news': two clean clips, then 'song' (speech over music at 0 dB), at 24 kHz."""
    ws = Workspace.open(root)
    folder = ws.dataset_dir("news")
    rows = []
    for i, clip_id in enumerate(("calm", "quiet", "song")):
        speech, sr = load_audio(espeak_amharic(sentences(3)[i], tmp / f"{clip_id}.wav", "am+m3"), sample_rate=24000)
        audio = mix_at_snr(speech, synth_music(len(speech) / sr, sr, seed=5), 0.0)[0] if clip_id == "song" else speech
        rows.append(write_clip_row(folder, clip_id, audio, sr))
    write_jsonl(folder / "manifest.jsonl", rows)
    return ws


def test_the_music_is_listened_to_first_and_the_after_player_tells_the_truth(start_app, page, tmp_path):
    ws = music_dataset(tmp_path / "workspace", tmp_path)
    server = start_app(workspace=ws.root)
    page.goto(server.url)
    page.get_by_role("tab", name="Music removal").click()
    expect(page.locator("#sep-table")).to_contain_text("not checked", timeout=30_000)
    page.get_by_label("no trained model: sound processing only, rougher (dsp)").check()
    # listening to the song before the run: the picker stays on it after, and its After player must still change
    clip, after = page.locator("#sep-clip input"), page.locator("#sep-after")
    clip.click()
    page.get_by_role("option", name="song", exact=True).click()
    expect(after).to_contain_text("After: nothing yet")
    cancel = page.locator("#sep-cancel")
    expect(cancel).to_be_disabled()  # nothing runs: nothing to cancel (a red Cancel read as work going on)
    page.locator("#sep-run").click()
    expect(page.locator("#sep-log textarea")).to_have_value(re.compile("1 of 3 clips had music and were separated"),
                                                            timeout=120_000)
    expect(cancel).to_be_disabled()  # and none once it is done
    expect(page.locator("#sep-table")).to_contain_text("yes, clearly")  # each clip named with its verdict and score

    # the listen list opens on the clip with music, and its After player says what it holds
    expect(clip).to_have_value(re.compile(r"^song \(yes, clearly: music score 0\.\d+\)$"), timeout=30_000)
    expect(after).to_contain_text("After: music removed (not in use: press Accept to use it)")
    page.locator("#sep-accept").click()
    expect(page.locator("#sep-status")).to_contain_text("1 clip(s) with clear music")
    expect(after).to_contain_text("After: music removed (in use for training)")
    screenshot(page.locator("#sep-after"), tmp_path, "after-player-in-use")

    clip.click()
    page.get_by_role("option", name="calm").click()
    expect(after).to_contain_text("After: nothing (no music found in this clip; training uses it as it is)")
