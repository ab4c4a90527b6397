"""The Amharic G2P tab: handlers called directly, its API through gradio_client, and the page in a real browser."""
import re

import gradio as gr
import pytest
from playwright.sync_api import expect

from utils.events import StudioError
from utils.text import load_user_dict
from utils.workspace import Workspace, write_jsonl
from utils.datasets import load_manifest
from webui import g2p


@pytest.fixture
def ws(tmp_path):
    return Workspace.open(tmp_path / "workspace")


def make_dataset(ws, name="demo", texts=("ሰላም ነው።", "በ፲፰፻፹፯ ዓ.ም ተወለደ።", "")):
    rows = [{"id": f"u{i}", "audio": f"audio/u{i}.wav", "text": t, "normalized": None, "phonemes": None,
             "duration": 1.0, "speaker": "s", "split": "train", "flags": [], "excluded": False}
            for i, t in enumerate(texts)]
    write_jsonl(ws.dataset_dir(name) / "manifest.jsonl", rows)
    return name


def test_explain_shows_normalized_text_ipa_symbols_and_warnings(ws):
    normalized, ipa, symbols, notes = g2p.explain(ws, "ዶ/ር አበበ 2ኛ Hi ሰላም።")
    assert normalized == "ዶክተር አበበ ሁለተኛ Hi ሰላም."
    assert ipa.endswith("s ə l a m .") and " | " in ipa
    assert "Hi" in notes


def test_the_symbols_box_counts_the_symbols_and_shows_no_ids(ws):
    """It showed "21 ids: [34, 5, ...]", numbers a curator has no use for."""
    _, _, symbols, _ = g2p.explain(ws, "ሰላም ነው።")
    assert symbols == "s ə l a m | n ə w .\n\nThe model reads 10 symbols (each | between words is one)."
    assert g2p.explain(ws, "")[2] == ""


def test_text_a_voice_will_not_speak_is_said_so_here_and_empty_text_asks_for_some(ws, capsys):
    """"hello world" was shown read letter by letter, "approximate", while Speak refused it (no Amharic letters);
    an empty box said "No warnings.". Both now say what Speak and synth would."""
    import app
    from utils.inference.speech import _check_request

    *_, notes = g2p.explain(ws, "hello world")
    assert notes.startswith("- " + g2p.NOT_SPOKEN)
    with pytest.raises(StudioError, match="no Amharic .Ethiopic. letters"):
        _check_request("hello world", None, 1.0, {})
    assert g2p.NOT_SPOKEN not in g2p.explain(ws, "hello ሰላም world")[3]  # spoken: Latin words inside Amharic
    assert g2p.explain(ws, "  ") == ("", "", "", "Type Amharic text above to see how it is read.")
    assert app.main(["g2p", "hello world", "--workspace", str(ws.root)]) == 0
    assert "a voice will not speak this text alone (synth refuses it)" in capsys.readouterr().err
    # a number beside Latin words is read with them: every refusal says so, as the rule is
    assert app.main(["g2p", "5 km", "--workspace", str(ws.root)]) == 0
    assert "numbers (other than beside Latin words, as in 5 km)" in capsys.readouterr().err
    with pytest.raises(StudioError, match=r"numbers \(other than beside Latin words, as in 5 km\)"):
        _check_request("5 km", None, 1.0, {})
    assert app.main(["g2p", "   ", "--workspace", str(ws.root)]) == 2  # as empty text is: nothing to read


def test_an_abbreviation_is_shown_spelled_and_a_dictionary_entry_for_it_wins(ws):
    normalized, ipa, _, notes = g2p.explain(ws, "BBC ዘገበ")
    assert normalized == "ቢቢሲ ዘገበ" and ipa.startswith("b i b i s i |")
    assert "Spelled letter by letter: BBC (ቢቢሲ)" in notes and "approximate" not in notes
    g2p.add_word(ws, "BBC", "b i b i s i j ə")
    normalized, ipa, _, notes = g2p.explain(ws, "BBC ዘገበ")
    assert normalized == "BBC ዘገበ" and ipa.startswith("b i b i s i j ə |") and notes == "No warnings."


def test_dictionary_edits_are_saved_to_the_workspace_and_used(ws):
    table, status = g2p.add_word(ws, "ኢትዮጵያ", "ʔ i t ɨ j o pʼ ɨ j a")
    assert table == [["ኢትዮጵያ", "ʔ i t ɨ j o pʼ ɨ j a"]] and "saved" in status
    assert load_user_dict(ws)["ኢትዮጵያ"][3] == "ɨ"
    _, ipa, _, _ = g2p.explain(ws, "ኢትዮጵያ")
    assert ipa == "ʔ i t ɨ j o pʼ ɨ j a"
    table, status = g2p.save_rows(ws, [["ሰላም", "s ə l a m"], ["", ""]])
    assert table == [["ሰላም", "s ə l a m"]] and set(load_user_dict(ws)) == {"ሰላም"}
    assert "(removed ኢትዮጵያ; added ሰላም)" in status  # the cleared row is named, not only a count
    assert g2p.dict_rows(ws) == table


def test_a_bad_dictionary_row_is_refused_and_nothing_is_saved(ws):
    g2p.add_word(ws, "ሰላም", "s ə l a m")
    with pytest.raises(gr.Error):
        g2p.save_rows(ws, [["ሰላም", ""], ["two words", "t u"]])
    assert load_user_dict(ws) == {"ሰላም": ["s", "ə", "l", "a", "m"]}


def test_what_a_curator_types_is_saved_as_the_models_symbols_and_what_it_cannot_use_is_refused(ws):
    table, status = g2p.add_word(ws, "ሰዎች", "s ə w o tʃ")  # the untied affricate nobody can type tied
    assert table == [["ሰዎች", "s ə w o t͡ʃ"]] and "t͡ʃ saved" in status
    _, _, symbols, notes = g2p.explain(ws, "ሰዎች")
    assert symbols.startswith("s ə w o t͡ʃ") and notes == "No warnings."  # the model is told every sound
    table, _ = g2p.save_rows(ws, [["ሰዎች", "s ə w o tʃ"], ["ጋራ", "g a r a"], ["ሰማ", "s ə m: a"], ["ቃል", "k' a l"]])
    assert dict(table) == {"ሰዎች": "s ə w o t͡ʃ", "ጋራ": "ɡ a r a", "ሰማ": "s ə mː a", "ቃል": "kʼ a l"}
    with pytest.raises(gr.Error, match=r"no symbol for 'x'.*can use: vowels ə u i a e ɨ o; consonants b d"):
        g2p.add_word(ws, "ሰላም", "s ə l a x")
    with pytest.raises(gr.Error, match=r"row 2 \(ሰላም\): the model has no symbol for 'θ'"):
        g2p.save_rows(ws, [["ሰዎች", "s ə w o tʃ"], ["ሰላም", "s ə l a θ"]])
    assert set(load_user_dict(ws)) == {"ሰዎች", "ጋራ", "ሰማ", "ቃል"}


def test_suggest_fills_in_the_rules_reading():
    assert g2p.suggest("ሰላም") == "s ə l a m" and g2p.suggest("  ") == ""
    assert g2p.fill_from_rules(" ሰላም ")[0] == "s ə l a m" and "Add / update" in g2p.fill_from_rules("ሰላም")[1]
    with pytest.raises(StudioError, match="Type a word in the Word box first"):  # it did nothing, saying nothing
        g2p.fill_from_rules("  ")


def test_fill_from_rules_reads_a_word_as_a_sentence_would_and_the_entry_keeps_the_word_as_typed(ws):
    """It gave 'b b k' for BBC while the same tab and Inference read it b i b i s i."""
    assert g2p.suggest("BBC") == "b i b i s i" == g2p.explain(ws, "BBC")[1]
    table, _ = g2p.add_word(ws, "BBC", g2p.suggest("BBC"))
    assert table == [["BBC", "b i b i s i"]]


def test_converting_a_dataset_fills_normalized_and_phonemes(ws):
    name = make_dataset(ws)
    seen = []
    message = g2p.convert(ws, name, progress=lambda fraction, desc=None: seen.append(fraction))
    rows = load_manifest(ws, name)
    assert rows[0]["normalized"] == "ሰላም ነው." and rows[0]["phonemes"] == "s ə l a m | n ə w ."
    assert "m ə tː o" in rows[1]["phonemes"] and rows[2]["phonemes"] is None
    assert rows[0]["audio"] == "audio/u0.wav" and rows[0]["speaker"] == "s"  # other fields untouched
    assert "3 of 3" in message.replace("**", "") and "nothing to pronounce" in message
    assert seen and seen[-1] == 1.0


def test_converting_needs_an_existing_dataset(ws):
    with pytest.raises(gr.Error):
        g2p.convert(ws, "", progress=lambda *a, **k: None)
    with pytest.raises(gr.Error, match="There is no dataset called 'missing'"):
        g2p.convert(ws, "missing", progress=lambda *a, **k: None)


def test_tab_api_through_gradio_client(ws):
    from tests.helpers import serve_tab

    make_dataset(ws, "viaapi")
    with serve_tab(g2p, ws, "Amharic G2P") as client:
        normalized, ipa, _, _ = client.predict("ሰላም ፩", api_name="/g2p_explain")
        message = client.predict("viaapi", api_name="/g2p_convert")
    assert normalized == "ሰላም አንድ" and ipa == "s ə l a m | ʔ a n d"
    assert "3 of 3" in message.replace("**", "")
    assert load_manifest(ws, "viaapi")[0]["phonemes"] == "s ə l a m | n ə w ."


def test_the_g2p_tab_stops_asking_for_an_entry_it_received(app_server, page):
    page.goto(app_server.url)
    page.get_by_role("tab", name="Amharic G2P").click()
    page.locator("#g2p-input textarea").fill("ሰላም Google ነው")
    page.locator("#g2p-run").click()
    warnings = page.locator("#g2p-warnings")
    expect(warnings).to_contain_text("Google. Add them to the pronunciation dictionary", timeout=30_000)

    page.locator("#g2p-dict-word input, #g2p-dict-word textarea").fill("Google")
    page.locator("#g2p-dict-ipa input, #g2p-dict-ipa textarea").fill("ɡ u ɡ ə l")
    page.locator("#g2p-dict-add").click()
    expect(page.locator("#g2p-dict-status")).to_contain_text("Google → ɡ u ɡ ə l saved")
    expect(warnings).to_have_text("No warnings.")  # the reading above is of the dictionary as it is now
    expect(page.locator("#g2p-ipa textarea")).to_have_value(re.compile("ɡ u ɡ ə l"))
