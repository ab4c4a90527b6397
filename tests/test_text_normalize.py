"""Normalizer: numbers, dates, money, abbreviations, punctuation, letters, odd input."""
import pytest

from utils.text import normalize
from utils.text.numbers import ethiopic_value


def said(text: str) -> str:
    return normalize(text).text


@pytest.mark.parametrize("numeral, value", [
    ("፩", 1), ("፱", 9), ("፲", 10), ("፲፩", 11), ("፺፱", 99), ("፻", 100), ("፻፩", 101), ("፪፻", 200),
    ("፲፰፻፹፯", 1887), ("፳፻፲፮", 2016), ("፲፱፻፺፩", 1991), ("፼", 10000), ("፫፼", 30000),
    ("፻፼", 1_000_000), ("፲፪፼፫፻፵፭", 120345), ("፼፼", 100_000_000),
])
def test_ethiopic_numerals_have_their_value(numeral, value):
    assert ethiopic_value(numeral) == value


@pytest.mark.parametrize("text, words", [
    ("፲፰፻፹፯", "አንድ ሺህ ስምንት መቶ ሰማንያ ሰባት"),
    ("፳፻፲፮", "ሁለት ሺህ አስራ ስድስት"),
    ("፲፩", "አስራ አንድ"),
    ("0", "ዜሮ"),
    ("7", "ሰባት"),
    ("10", "አስር"),
    ("19", "አስራ ዘጠኝ"),
    ("21", "ሃያ አንድ"),
    ("100", "መቶ"),
    ("101", "መቶ አንድ"),
    ("365", "ሶስት መቶ ስልሳ አምስት"),
    ("1000", "አንድ ሺህ"),
    ("2016", "ሁለት ሺህ አስራ ስድስት"),
    ("1,000,000", "አንድ ሚሊዮን"),
    ("2500000", "ሁለት ሚሊዮን አምስት መቶ ሺህ"),
    ("3.5", "ሶስት ነጥብ አምስት"),
    ("3.14", "ሶስት ነጥብ አንድ አራት"),
])
def test_numbers_become_amharic_words(text, words):
    assert said(text) == words


@pytest.mark.parametrize("text, words", [
    ("-5", "ሲቀነስ አምስት"),                       # was "አምስት", the sign dropped with no warning
    ("ሙቀቱ −3 ዲግሪ ነው", "ሙቀቱ ሲቀነስ ሶስት ዲግሪ ነው"),  # the minus sign U+2212
    ("-2.5", "ሲቀነስ ሁለት ነጥብ አምስት"),
    ("5-10", "አምስት እስከ አስር"),                    # a range stays a range
    ("COVID-19", "ሲኦቪአይዲ አስራ ዘጠኝ"),              # a word's hyphen is no sign
])
def test_a_minus_sign_on_a_number_is_read_as_a_word(text, words):
    assert said(text) == words


@pytest.mark.parametrize("text, words", [
    ("1ኛ", "አንደኛ"), ("2ኛ", "ሁለተኛ"), ("3ኛው", "ሶስተኛው"), ("9ኛ", "ዘጠነኛ"), ("10ኛ", "አስረኛ"),
    ("21ኛ", "ሃያ አንደኛ"), ("፪ኛ", "ሁለተኛ"), ("100ኛ", "መቶኛ"),
])
def test_marked_ordinals_are_read_as_ordinals(text, words):
    assert said(text) == words


def test_years_before_era_are_read_in_hundreds_and_the_era_expanded():
    assert said("በ1887 ዓ.ም") == "በአስራ ስምንት መቶ ሰማንያ ሰባት አመተ ምህረት"
    assert said("በ፲፰፻፹፯ ዓ.ም") == "በአስራ ስምንት መቶ ሰማንያ ሰባት አመተ ምህረት"
    assert said("2016 ዓ.ም") == "ሁለት ሺህ አስራ ስድስት አመተ ምህረት"


def test_a_prefix_or_suffix_on_a_number_stays_on_its_words():
    assert said("በ5 ቀን") == "በአምስት ቀን"
    assert said("ከ20ዎቹ") == "ከሃያዎቹ"
    # a suffix starting with the consonant the number's word ends in takes its letter: አምስቱ, not አምስትቱ
    assert [said(t) for t in ("5ቱ", "2ቱ", "9ኙ", "በ10ሩ")] == ["አምስቱ", "ሁለቱ", "ዘጠኙ", "በአስሩ"]


def test_dates_read_month_day_and_year():
    assert said("12/05/2016") == "ጥር አስራ ሁለት ቀን ሁለት ሺህ አስራ ስድስት"
    assert said("1.1.2017") == "መስከረም አንድ ቀን ሁለት ሺህ አስራ ሰባት"


def test_clock_times_are_read_as_hours_and_minutes():
    assert said("3:30") == "ሶስት ሰአት ከሰላሳ ደቂቃ"
    assert said("10:00") == "አስር ሰአት"


def test_phone_numbers_are_read_digit_by_digit():
    assert said("0911234567") == "ዜሮ ዘጠኝ አንድ አንድ ሁለት ሶስት አራት አምስት ስድስት ሰባት"
    assert said("0911-23-45-67") == "ዜሮ ዘጠኝ አንድ አንድ, ሁለት ሶስት, አራት አምስት, ስድስት ሰባት"
    assert said("+251911234567").startswith("ሁለት አምስት አንድ ዘጠኝ")


def test_money_and_percentages():
    assert said("25 ብር") == "ሃያ አምስት ብር"
    assert said("ብር 50") == "ሃምሳ ብር"
    assert said("50.25 ብር") == "ሃምሳ ብር ከሃያ አምስት ሳንቲም"
    assert said("$5") == "አምስት ዶላር"
    assert said("5%") == "አምስት በመቶ"
    # the currency word written after the sign is said once; a number written against ብር is not a suffix
    assert said("$100 ዶላር") == said("$100") == "መቶ ዶላር" and said("€5ዩሮ") == "አምስት ዩሮ"
    assert said("100ብር") == said("ብር100") == "መቶ ብር"


@pytest.mark.parametrize("text, words", [
    ("ዓ.ም", "አመተ ምህረት"), ("ዓ/ም", "አመተ ምህረት"), ("ዓ. ም.", "አመተ ምህረት"), ("ዶ/ር", "ዶክተር"),
    ("ወ/ሮ", "ወይዘሮ"), ("ወ/ሪት", "ወይዘሪት"), ("ት/ቤት", "ትምህርት ቤት"), ("ጠ/ሚ", "ጠቅላይ ሚኒስትር"),
    ("ፕ/ር", "ፕሮፌሰር"), ("አ.አ", "አዲስ አበባ"), ("ኪ.ሜ", "ኪሎ ሜትር"), ("ገ/ሚካኤል", "ገብረ ሚካኤል"),
    ("ዶ.ር", "ዶክተር"), ("ወ.ዘ.ተ", "ወዘተ"), ("በዶ/ር አበበ", "በዶክተር አበበ"), ("ወደ ት/ቤት ሄደ", "ወደ ትምህርት ቤት ሄደ"),
    ("እ.ኤ.አ", "እንደ ኤውሮፓውያን አቆጣጠር"), ("እ.አ.አ.", "እንደ አውሮፓውያን አቆጣጠር"),  # the news' Gregorian years
])
def test_abbreviations_expand(text, words):
    assert said(text) == words


def test_ethiopic_punctuation_becomes_pauses_and_word_boundaries():
    assert said("ሰላም፣ እንዴት ነህ፧ ደህና ነኝ።") == "ሰላም, እንዴት ነህ? ደህና ነኝ."
    assert said("ሰላም፡ነው፡፡") == "ሰላም ነው."
    assert said("አንድ፤ ሁለት፥ ሶስት፦ አራት፨") == "አንድ, ሁለት, ሶስት, አራት."
    assert said("ሰላም!!! ነው...") == "ሰላም! ነው."
    assert said("። ፣ ሰላም") == "ሰላም"


def test_homophone_letters_are_unified():
    assert said("ሐሳብ ኀይል ሠላም ዐይን ፀሐይ") == "ሀሳብ ሀይል ሰላም አይን ጸሀይ"


def test_latin_words_are_kept_with_a_warning():
    n = normalize("ሰላም Google ነው")
    assert n.text == "ሰላም Google ነው"
    assert any("Google" in w for w in n.warnings)


def test_all_capital_abbreviations_are_spelled_with_the_letters_names():
    """BBC was read with Latin letter rules ("bbk"); Amharic speakers say ቢቢሲ, letter by letter."""
    n = normalize("የBBC ዘጋቢ ከUSA ና UN ዘገበ፤ WHOን ጠየቀ")
    assert n.text == "የቢቢሲ ዘጋቢ ከዩኤስኤ ና ዩኤን ዘገበ, ደብሊውኤችኦን ጠየቀ"
    assert n.warnings == ["Spelled letter by letter: BBC (ቢቢሲ), USA (ዩኤስኤ), UN (ዩኤን), WHO (ደብሊውኤችኦ). An "
                          "abbreviation said as a word, as NATO is, needs a pronunciation dictionary entry."]
    assert normalize("BBC1 ዜና").text == "ቢቢሲ አንድ ዜና"  # a number glued to the letters is a word of its own
    assert normalize("በ2015").text == "በሁለት ሺህ አስራ አምስት"  # ... while one after Amharic letters stays glued
    for kept in ("Google", "iPhone", "I", "UNESCOS"):  # mixed case, one letter, longer than five: as before
        n = normalize(f"ሰላም {kept}")
        assert n.text == f"ሰላም {kept}" and "approximate letter rules" in n.warnings[0], kept


def test_an_abbreviation_the_dictionary_holds_is_left_for_it():
    assert said("BBC") == "ቢቢሲ"
    assert normalize("የBBC ዜና", keep={"BBC": ["b", "i"]}).text == "የBBC ዜና"


def test_unknown_symbols_are_removed_with_a_warning_naming_them():
    n = normalize("ሰላም 😀 ነው ©")
    assert n.text == "ሰላም ነው"
    assert any("U+1F600" in w and "U+00A9" in w for w in n.warnings)


@pytest.mark.parametrize("text", ["", "   ", "\n\t ", "።", "፡፡፡"])
def test_empty_and_whitespace_only_input(text):
    assert normalize(text).text == ""


def test_very_long_input_is_normalized_whole():
    text = ("ሰላም ነው፣ 2016 ዓ.ም ዶ/ር አበበ። " * 400)[:10_000]
    out = normalize(text).text
    assert out.count("ዶክተር") >= 300 and "2016" not in out


def test_normalizing_twice_changes_nothing():
    from tests.helpers import sentences

    for line in sentences(300) + ["በ፲፰፻፹፯ ዓ.ም ዶ/ር አበበ 25 ብር፣ 3:30 0911234567!"]:
        once = said(line)
        assert said(once) == once, line
