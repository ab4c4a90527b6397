"""Pronunciation dictionary entries as the G2P tab's editor takes them: a word the reader would never look up is
refused with the word to type, a replaced reading is named, IPA typed without spaces keeps its geminates."""
import gradio as gr
import pytest

from utils.text import load_user_dict
from utils.text.convert import analyze
from utils.text.lexicon import dict_from_rows, entry, entry_word, model_segments
from utils.workspace import Workspace
from webui import g2p


@pytest.fixture
def ws(tmp_path):
    return Workspace.open(tmp_path / "workspace")


@pytest.mark.parametrize("word, refusal", [
    ("ሰላም!", "ሰላም! has characters the reader drops (!): add ሰላም"),
    ("<script>", "<script> has characters the reader drops (< >): add script"),
    ("ዶ/ር", "ዶ/ር is read as ዶክተር: add ዶክተር"),
    ("25", "25 is read as 2 words (ሃያ አምስት): add each word on its own"),
    ("!!", "!! has nothing the reader says (no letters)"),
])
def test_a_word_the_reader_changes_is_refused_naming_what_to_add(word, refusal):
    assert entry_word(word)[1] == refusal
    assert entry(word, "s ə l a m")[1:] == ([], refusal)


@pytest.mark.parametrize("word, key", [("ሰላም", "ሰላም"), ("BBC", "BBC"), ("Google", "Google"), ("ሐሙስ", "ሀሙስ")])
def test_a_word_read_as_written_is_kept_under_the_key_lookups_use(word, key):
    """The key is folded as word_to_ipa folds what it looks up (ሐ -> ሀ); an all-capital word stays unspelled."""
    assert entry_word(word) == (key, "")


def test_the_suggested_word_is_itself_accepted_and_its_entry_is_read():
    for word in ("ሰላም!", "<script>", "ዶ/ር"):
        suggested = entry_word(word)[1].rsplit("add ", 1)[1]
        key, segments, problem = entry(suggested, "t ə s t")
        assert problem == ""
        assert analyze(word, {key: segments}).ipa.startswith("t ə s t")


def test_ipa_typed_without_spaces_makes_doubled_consonants_long():
    assert model_segments("bunna") == (["b", "u", "nː", "a"], [])
    assert model_segments("kʷkʷa tʃtʃ") == (["kːʷ", "a", "t͡ʃː"], [])  # labialized and affricate geminates
    assert model_segments("saat") == (["s", "a", "a", "t"], [])  # vowels have no long symbol: left as typed
    assert model_segments("b u n n a") == (["b", "u", "n", "n", "a"], [])  # typed apart: kept as typed
    assert model_segments("s ə m: a") == (["s", "ə", "mː", "a"], [])


def test_table_rows_are_refused_as_single_entries_are():
    mapping, problems = dict_from_rows([["ሰላም", "s ə l a m"], ["ሰላም!", "s ə l a m"], ["", ""], ["", "a"],
                                        ["ሰላም ነው", "s ə l a m n ə w"]])
    assert mapping == {"ሰላም": ["s", "ə", "l", "a", "m"]}
    assert problems == ["row 2 (ሰላም!): ሰላም! has characters the reader drops (!): add ሰላም",
                        "row 4: give one word and its IPA segments, e.g. ሰላም → s ə l a m (got '', 'a')",
                        "row 5 (ሰላም ነው): one word at a time: 'ሰላም ነው' is 2 words (an entry is a word without spaces; "
                        "give each word its own)"]


def test_add_word_refuses_a_word_never_looked_up_and_saves_nothing(ws):
    for word in ("ሰላም!", "<script>"):
        with pytest.raises(gr.Error, match="add (ሰላም|script)"):
            g2p.add_word(ws, word, "a")
    assert load_user_dict(ws) == {}


def test_add_word_says_which_reading_it_replaced(ws):
    assert g2p.add_word(ws, "Google", "g o o g l e")[1] == "Google → ɡ o o ɡ l e saved."
    table, status = g2p.add_word(ws, "Google", "ɡ u ɡ ə l")
    assert status == "Google → ɡ u ɡ ə l saved (it was ɡ o o ɡ l e)."
    assert table == [["Google", "ɡ u ɡ ə l"]]
    assert g2p.add_word(ws, "Google", "ɡuɡəl")[1] == "Google → ɡ u ɡ ə l saved (unchanged)."


def test_add_word_shows_the_segments_saved_from_ipa_typed_without_spaces(ws):
    table, status = g2p.add_word(ws, "ቡና", "bunna")
    assert status == "ቡና → b u nː a saved." and table == [["ቡና", "b u nː a"]]
    assert analyze("ቡና", load_user_dict(ws)).ipa == "b u nː a"
