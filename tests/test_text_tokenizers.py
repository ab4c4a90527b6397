"""Tokenizers: phoneme (default), char, BPE; serialization, growth, coverage."""
import json

import pytest

from tests.helpers import sentences
from utils.events import StudioError
from utils.text import phonemize
from utils.text.tokenizers import Tokenizer, coverage, make_tokenizer


def test_phoneme_tokenizer_is_the_default_with_padding_at_zero():
    tok = make_tokenizer()
    assert tok.kind == "phoneme" and tok.symbols[0] == "<pad>"
    assert {" ", ",", ".", "?", "!"} <= set(tok.symbols)
    assert len(tok.symbols) == len(set(tok.symbols))


def test_phoneme_encode_normalizes_and_phonemizes():
    tok = make_tokenizer("phoneme")
    ids = tok.encode("ሰላም ነው።")
    assert 0 not in ids
    assert tok.decode(ids) == phonemize("ሰላም ነው።")
    assert tok.encode("") == []


def test_phoneme_encode_uses_the_user_dictionary():
    tok = make_tokenizer("phoneme")
    assert tok.decode(tok.encode("ቃል", {"ቃል": ["kʼ", "a", "l", "ɨ"]})) == ["kʼ", "a", "l", "ɨ"]


def test_phoneme_tokenizer_round_trips_through_json():
    tok = make_tokenizer("phoneme")
    again = Tokenizer.from_dict(json.loads(json.dumps(tok.to_dict())))
    assert again.symbols == tok.symbols and again.encode("ሰላም") == tok.encode("ሰላም")


def test_grow_appends_new_symbols_and_keeps_existing_ids():
    tok = make_tokenizer("phoneme")
    before = list(tok.symbols)
    added = tok.grow(["ts", "s", "ts", "θ"])
    assert added == ["ts", "θ"]
    assert tok.symbols[: len(before)] == before and tok.symbols[-2:] == ["ts", "θ"]
    assert tok.encode_units(["θ"]) == [len(before) + 1]


def test_char_tokenizer_covers_the_syllabary_and_the_texts():
    tok = make_tokenizer("char", texts=["ሰላም hello"])
    assert {"ሰ", "ላ", "ም", " ", "h", "."} <= set(tok.symbols)
    assert tok.decode(tok.encode("ሰላም።")) == list("ሰላም.")
    assert Tokenizer.from_dict(tok.to_dict()).symbols == tok.symbols


def test_unknown_symbols_are_skipped_and_reported_by_coverage():
    tok = make_tokenizer("char", texts=["ሰላም"])
    space = tok.symbols.index(" ")
    assert tok.encode("ሰላም xyz ነው") == tok.encode("ሰላም") + [space, space] + tok.encode("ነው")
    report = coverage(tok, ["ሰላም xyz", "ሰላም"])
    assert set(report.missing) == {"x", "y", "z"} and report.examples["x"] == "ሰላም xyz"
    assert not report.ok and "x" in report.summary()
    assert coverage(make_tokenizer("phoneme"), sentences(50)).ok


def test_bpe_is_trained_on_transcripts_and_embeds_its_model(tmp_path):
    texts = sentences(300)
    tok = make_tokenizer("bpe", texts=texts, workdir=tmp_path, vocab_size=300)
    assert tok.kind == "bpe" and tok.symbols[0] == "<pad>" and len(tok.symbols) <= 300
    ids = tok.encode(texts[0])
    assert ids and 0 not in ids
    d = json.loads(json.dumps(tok.to_dict()))
    assert isinstance(d["sentencepiece_model"], str)
    again = Tokenizer.from_dict(d)
    assert again.encode(texts[5]) == tok.encode(texts[5])
    assert list(tmp_path.iterdir()) == []  # training leaves nothing behind


def test_bpe_on_a_tiny_dataset_shrinks_its_vocabulary(tmp_path):
    tok = make_tokenizer("bpe", texts=["ሰላም ነው።", "ደህና ነኝ።"], workdir=tmp_path, vocab_size=8000)
    assert tok.encode("ሰላም ነው")


def test_bpe_without_texts_is_a_clear_error():
    with pytest.raises(StudioError, match="transcripts"):
        make_tokenizer("bpe", texts=["", "  "])


def test_unknown_kind_is_a_clear_error():
    with pytest.raises(StudioError, match="phoneme"):
        make_tokenizer("words")
