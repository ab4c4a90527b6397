"""Normalizer: a time's ሰዓት said once, fractions (1/2, ½) and English ordinal suffixes (2nd) read as Amharic."""
import re

import pytest

from utils.text import normalize, phonemize

LATIN = re.compile("[A-Za-z]")


def said(text: str) -> str:
    return normalize(text).text


@pytest.mark.parametrize("text, words", [
    ("10:30 ሰዓት", "አስር ሰአት ከሰላሳ ደቂቃ"),
    ("10:30 ሰአት", "አስር ሰአት ከሰላሳ ደቂቃ"),
    ("10:00 ሰዓት።", "አስር ሰአት."),
    ("ከ10:30ሰዓት ጀምሮ", "ከአስር ሰአት ከሰላሳ ደቂቃ ጀምሮ"),
    ("10:30 ሰዓቱ", "አስር ሰአት ከሰላሳ ደቂቃ ሰአቱ"),   # another word than ሰዓት is the writer's: kept
    ("10:30 ላይ", "አስር ሰአት ከሰላሳ ደቂቃ ላይ"),
    ("2 ሰዓት", "ሁለት ሰአት"),                      # no clock reading: the written word is the only one
])
def test_the_hour_word_after_a_time_is_said_once(text, words):
    assert said(text) == words


@pytest.mark.parametrize("text, words", [
    ("1/2 ኪሎ", "ግማሽ ኪሎ"),
    ("1/4", "ሩብ"),
    ("3/4 ሊትር", "ሶስት አራተኛ ሊትር"),
    ("1/3", "አንድ ሶስተኛ"),
    ("2/3", "ሁለት ሶስተኛ"),
    ("5/8", "አምስት ስምንተኛ"),
    ("1/10", "አንድ አስረኛ"),
    ("በ1/2 ዋጋ", "በግማሽ ዋጋ"),
    ("½ ኪሎ", "ግማሽ ኪሎ"),
    ("¼ ¾ ⅓", "ሩብ ሶስት አራተኛ አንድ ሶስተኛ"),
    ("በ½", "በግማሽ"),
    ("1½ ኪሎ", "አንድ ተኩል ኪሎ"),
    ("3 1/2 ኪሎ", "ሶስት ተኩል ኪሎ"),
    ("2¾", "ሁለት ከሶስት አራተኛ"),
])
def test_simple_fractions_read_as_amharic_fractions(text, words):
    result = normalize(text)
    assert result.text == words
    assert result.warnings == []


@pytest.mark.parametrize("text, words", [
    ("12/05/2016", "ጥር አስራ ሁለት ቀን ሁለት ሺህ አስራ ስድስት"),   # a date stays a date
    ("24/7", "ሃያ አራት ሰባት"),                    # numerator not below the denominator
    ("12/30", "አስራ ሁለት ሰላሳ"),                   # denominator above ten
    ("1/2/3", "አንድ ሁለት ሶስት"),                   # a third part: not a fraction
])
def test_what_is_not_a_simple_fraction_reads_as_before(text, words):
    assert said(text) == words


@pytest.mark.parametrize("text, words", [
    ("2nd", "ሁለተኛ"), ("1st", "አንደኛ"), ("3rd", "ሶስተኛ"), ("4th", "አራተኛ"),
    ("10th", "አስረኛ"), ("21st", "ሃያ አንደኛ"), ("2nd.", "ሁለተኛ."),
])
def test_english_ordinal_suffixes_read_as_amharic_ordinals(text, words):
    result = normalize(text)
    assert result.text == words
    assert not LATIN.search(result.text) and result.warnings == []
    assert phonemize(text) == phonemize(words)  # the sounds of the Amharic word, no "n d" left


def test_the_reported_readings_are_heard_right():
    assert phonemize("2nd") == phonemize("ሁለተኛ")
    assert phonemize("1/2 ኪሎ") == phonemize("ግማሽ ኪሎ")
    assert phonemize("10:30 ሰዓት") == phonemize("አስር ሰዓት ከሰላሳ ደቂቃ")


@pytest.mark.parametrize("text, words", [
    ("BBC1", "ቢቢሲ አንድ"),
    ("በ2015", "በሁለት ሺህ አስራ አምስት"),
    ("3.5 ብር", "ሶስት ብር ከሃምሳ ሳንቲም"),
    ("3.5", "ሶስት ነጥብ አምስት"),
    ("5%", "አምስት በመቶ"),
    ("0911234567", "ዜሮ ዘጠኝ አንድ አንድ ሁለት ሶስት አራት አምስት ስድስት ሰባት"),
    ("፲፪ኛ", "አስራ ሁለተኛ"),
    ("the", "the"),                               # a Latin word is not an ordinal suffix
])
def test_neighbouring_readings_are_unchanged(text, words):
    assert said(text) == words
