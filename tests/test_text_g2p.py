"""G2P: every Ethiopic code point, syllable structure, gemination, dictionaries, real sentences."""
import re

import pytest

from tests.conftest import ROOT
from tests.helpers import sentences
from utils.events import StudioError
from utils.text import load_user_dict, phonemize, save_user_dict, word_to_ipa
from utils.text.ethiopic import BLOCKS, syllable
from utils.text.normalize import fold
from utils.text.tokenizers import make_tokenizer
from utils.workspace import Workspace

ETHIOPIC = re.compile("[\u1200-\u139f\u2d80-\u2ddf\uab00-\uab2f\U0001e7e0-\U0001e7ff]")
REQUIRED_BLOCKS = [(0x1200, 0x137F), (0x1380, 0x139F), (0x2D80, 0x2DDF), (0xAB00, 0xAB2F)]


def ipa(word: str) -> str:
    return " ".join(word_to_ipa(word))


def every_code_point():
    return [chr(cp) for lo, hi in BLOCKS for cp in range(lo, hi + 1)]


def test_every_code_point_of_the_ethiopic_blocks_leaves_no_ethiopic_in_the_ipa():
    inventory = set(make_tokenizer("phoneme").symbols)
    for ch in every_code_point():
        for text in (ch, f"ሰ{ch}ላም", f"{ch}\u135fና"):
            out = phonemize(text)
            assert not ETHIOPIC.search("".join(out)), (hex(ord(ch)), out)
            assert set(out) <= inventory, (hex(ord(ch)), set(out) - inventory)


def test_every_syllable_letter_of_the_required_blocks_is_read():
    letters = [chr(cp) for lo, hi in REQUIRED_BLOCKS for cp in range(lo, hi + 1) if syllable(chr(cp))]
    assert len(letters) > 400
    for ch in letters:
        assert word_to_ipa(ch), hex(ord(ch))


@pytest.mark.parametrize("word, expected", [
    ("ሰላም", "s ə l a m"),
    ("ሀ", "h a"), ("ሐ", "h a"), ("አ", "ʔ a"), ("ዐ", "ʔ a"), ("ኧ", "ʔ ə"),   # ə -> a after a laryngeal
    ("ሁ", "h u"), ("ቆ", "kʼ o"), ("ጨ", "t͡ʃʼ ə"), ("ኘ", "ɲ ə"), ("ዠ", "ʒ ə"), ("ፐ", "p ə"),
])
def test_consonant_then_vowel(word, expected):
    assert ipa(word) == expected


@pytest.mark.parametrize("word, expected", [
    ("ቊ", "kʼʷ i"), ("ቌ", "kʼʷ e"), ("ኲ", "kʷ i"), ("ኴ", "kʷ e"), ("ጔ", "ɡʷ e"), ("ኊ", "hʷ i"),
    ("ኌ", "hʷ e"), ("ቋ", "kʼʷ a"), ("ሏ", "lʷ a"), ("ቷ", "tʷ a"), ("ጓ", "ɡʷ a"),
])
def test_labiovelars_and_labialized_letters(word, expected):
    assert ipa(word) == expected


@pytest.mark.parametrize("word, expected", [
    ("ስም", "s ɨ m"),                 # word-initial cluster gets ɨ; never word-final
    ("ልብስ", "l ɨ b s"),
    ("ክንፍ", "k ɨ n f"),
    ("ሚስት", "m i s t"),              # a falling-sonority final cluster stays
    ("ሆስፒታል", "h o s p i t a l"),   # one 6th-order consonant between vowels: no ɨ
    ("ብርቱካን", "b ɨ r t u k a n"),
    ("እስትንፋስ", "ʔ ɨ s t ɨ n f a s"),  # three consonants: one ɨ
    ("እግርጌ", "ʔ ɨ ɡ ɨ r ɡ e"),
    ("መንግስት", "m ə n ɡ ɨ s t"),
    ("ወንዝ", "w ə n z"),
    ("ወንድም", "w ə n d ɨ m"),         # rising-sonority final cluster splits
    ("ለምን", "l ə m ɨ n"),            # ... and so do two nasals (issue 46, item 14)
    ("ያንን", "j a n ɨ n"),
    ("ምንም", "m ɨ n ɨ m"),
    ("ማን", "m a nː"),                # a long consonant is one sound: no ɨ between its halves
    ("እኅት", "ʔ ɨ h ɨ t"),             # a laryngeal closes no cluster
    ("ቍርስ", "kʼʷ ɨ r s"),
])
def test_sixth_order_vowel_follows_syllable_structure(word, expected):
    assert ipa(word) == expected


def test_held_out_wikipron_words_are_read_as_wiktionary_reads_them():
    """A floor, not a target: a syllable rule tuned on one word must not cost agreement with the held-out words
    (142 of 171 read exactly, ɾ taken as r, on 2026-11-26; bench/g2p_per.py gives the error rates)."""
    rows = [line.split("\t") for line in (ROOT / "tests/fixtures/wikipron_amh_dev.tsv").read_text(encoding="utf-8")
            .splitlines() if "\t" in line]
    same = sum(ipa(fold(word)).replace("ɾ", "r") == gold.replace("ɾ", "r") for word, gold in rows)
    assert same >= 142, f"{same} of {len(rows)}"


def test_no_word_ends_in_an_epenthetic_vowel():
    for line in sentences(200):
        words = " ".join(phonemize(line)).split("   ")
        for w in words:
            segs = [s for s in w.split() if s not in ",.?!"]
            if len(segs) > 2:
                assert segs[-1] != "ɨ" or segs[-2] in ("ʔ",), (line, w)


@pytest.mark.parametrize("word, expected", [
    ("ሰበ\u135fረ", "s ə bː ə r ə"),             # the gemination mark doubles
    ("ጥሩ\u135f", "tʼ ɨ rː u"),
    ("ሰ\u135fላ", "s ə l a"),                    # ... except word-initially
    ("ሁለተኛ", "h u l ə tː ə ɲː a"),            # ordinal -təɲɲa
    ("አማርኛ", "ʔ a m a r ɨ ɲː a"),               # -ɲɲa
    ("ልጆች", "l ɨ d͡ʒ o t͡ʃː"),                   # plural -otʃtʃ
    ("ልጆቻቸው", "l ɨ d͡ʒ o t͡ʃː a t͡ʃː ə w"),
    ("ማንኛችሁ", "m a nː ɨ ɲː a t͡ʃː ɨ h u"),     # lexicon (ማን) + suffix rules
    ("እሄዳለሁ", "ʔ ɨ h e d a lː ə h u"),         # present auxiliary -alləhu
    ("ሰበረ", "s ə bː ə r ə"),                    # C1əC2C2əC3ə perfective
    ("ተሰበረ", "t ə s ə bː ə r ə"),
    ("ለስላሳ", "l ə s l a sː a"),                 # reduplicated adjective
    ("እነሱ", "ʔ ɨ nː ə sː u"),                    # lexicon
    ("የሷ", "j ə sːʷ a"),                        # preposition swallowed እ: የ + እሷ
    ("ሰውዬ", "s ə w ɨ jː e"),
])
def test_gemination_from_lexicon_and_rules(word, expected):
    assert ipa(word) == expected


def test_laryngeals_never_geminate_and_lower_the_vowel():
    assert ipa("ሰዓት") == "s ə ʔ a t"
    assert "ː" not in ipa("ሰሐረ")


def test_phonemize_marks_word_boundaries_and_pauses():
    assert phonemize("ሰላም፣ ነው።") == ["s", "ə", "l", "a", "m", ",", " ", "n", "ə", "w", "."]
    assert phonemize("ማን ነው፧")[-1] == "?"
    assert phonemize("") == [] and phonemize("   ") == [] and phonemize("።") == []


def test_numbers_and_abbreviations_are_pronounced_through_normalization():
    out = "".join(phonemize("፲፰፻፹፯ ዶ/ር"))
    assert "ʃ" in out and "d" in out and not ETHIOPIC.search(out)


def test_latin_and_mixed_script_input():
    out = phonemize("ሰላም Google 2024 ነው!")
    assert out[-1] == "!" and "ɡ" in out and not ETHIOPIC.search("".join(out))
    assert set(out) <= set(make_tokenizer("phoneme").symbols)


def test_ten_thousand_characters():
    text = ("ኢትዮጵያ በ፲፰፻፹፯ ዓ.ም ሰላም ነበረች፤ ዶ/ር አበበ 25 ብር ከፈሉ። " * 300)[:10_000]
    out = phonemize(text)
    assert len(out) > 5000 and not ETHIOPIC.search("".join(out))


def test_all_fixture_sentences_phonemize_into_the_default_inventory():
    inventory = set(make_tokenizer("phoneme").symbols)
    lines = sentences()
    assert len(lines) == 805
    for line in lines:
        out = phonemize(line)
        assert out, line
        assert not ETHIOPIC.search("".join(out)), line
        assert set(out) <= inventory, (line, set(out) - inventory)


def test_user_dictionary_overrides_rules_and_round_trips(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    assert load_user_dict(ws) == {}
    save_user_dict(ws, {"ኢትዮጵያ": "ʔ i t ɨ j o pʼ ɨ j a", "Google": ["ɡ u ɡ ə l".split()][0]})
    user = load_user_dict(ws)
    assert ws.pronunciations.read_text(encoding="utf-8").count("\t") == 2
    assert word_to_ipa("ኢትዮጵያ", user) == "ʔ i t ɨ j o pʼ ɨ j a".split()
    assert phonemize("በኢትዮጵያ Google", user) == "b ə ʔ i t ɨ j o pʼ ɨ j a".split() + [" "] + "ɡ u ɡ ə l".split()


def test_an_abbreviation_is_read_by_its_letters_unless_the_dictionary_holds_it():
    """The normalizer spells BBC; a dictionary entry for BBC (said another way) must still be reachable."""
    assert phonemize("BBC ዜና") == "b i b i s i".split() + [" "] + "z e n a".split()
    entry = "b i b i s i j ə".split()
    assert phonemize("BBC", {"BBC": entry}) == entry
    assert phonemize("የBBC", {"BBC": entry}) == ["j", "ə"] + entry  # with a preposition, as for Amharic words
    assert set(phonemize("USA FBI WHO DNA")) <= set(make_tokenizer("phoneme").symbols)


def test_a_latin_word_glued_to_amharic_letters_is_read_and_said():
    """የGoogle ("Google's") lost its Latin part without a word: each script's part is read by its rules, as one
    word, and the warning names the Latin part so that the curator can give it an entry."""
    from utils.text import normalize

    assert phonemize("የGoogle ዜና") == ["j", "ə"] + phonemize("Google") + [" "] + "z e n a".split()
    assert phonemize("Googleን")[:len(phonemize("Google"))] == phonemize("Google")
    said = normalize("የGoogle ዜና").warnings
    assert len(said) == 1 and "read with approximate letter rules: Google." in said[0]
    entry = "ɡ u ɡ ə l".split()
    assert phonemize("የGoogle", {"Google": entry}) == ["j", "ə"] + entry


def test_a_latin_word_finds_its_dictionary_entry_in_any_case_the_exact_one_first():
    """An entry "Google" was not used for "google" (nor "google" for "Google"), and the warning asked for the other
    spelling. A Latin word falls back to its entry in another case: the exact one first, then the lowercase one;
    the G2P tab and the CLI read through convert.analyze."""
    from utils.text.convert import analyze

    google, rules = "ɡ u ɡ ə l".split(), phonemize("google")
    for written, key in (("google", "Google"), ("Google", "google"), ("GOOGLE", "Google")):
        said = analyze(f"{written} ዜና", {key: google})
        assert said.ipa == "ɡ u ɡ ə l | z e n a" and said.warnings == [], (written, key)
    assert rules != google
    assert phonemize("የgoogle", {"Google": google}) == ["j", "ə"] + google  # with a preposition too
    said = analyze("ሰላም google Yahoo", {"Google": google})
    assert len(said.warnings) == 1 and "Yahoo" in said.warnings[0] and "oogle" not in said.warnings[0]

    bbc = "b i b i s i j ə".split()
    said = analyze("BBC", {"bbc": bbc})  # an abbreviation the dictionary holds in lowercase is not spelled
    assert said.ipa == " ".join(bbc) and said.warnings == []
    both = {"Us": ["a"], "us": ["u", "s"], "US": ["j", "u"]}
    assert [word_to_ipa(w, both) for w in ("Us", "us", "US", "uS")] == [["a"], ["u", "s"], ["j", "u"], ["u", "s"]]
    assert word_to_ipa("ሰላም", {"ሰላም": ["x"]}) == ["x"] and word_to_ipa("ሠላም", {"ሰላም": ["x"]}) == ["x"]


def test_a_broken_dictionary_line_is_reported_with_its_number(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    ws.pronunciations.write_text("ሰላም\ts ə l a m\nbroken line\n", encoding="utf-8")
    with pytest.raises(StudioError, match="line 2"):
        load_user_dict(ws)


def test_unified_homophone_letters_keep_their_pronunciation():
    from utils.text.ethiopic import HOMOPHONES

    for written, unified in HOMOPHONES.items():
        assert word_to_ipa("ሰ" + written) == word_to_ipa("ሰ" + unified), written


def test_the_word_memo_and_the_checks_single_normalization_change_no_reading():
    """Re-check at 200k rows spent most of its time reading the same words again and normalizing each text twice:
    the memo gives each word's rules' own answer, as a fresh list, and the dataset checks' phonemes are phonemize's."""
    from utils.datasets.checks import check_text
    from utils.datasets.config import PrepareConfig
    from utils.text import g2p, normalize, phonemes_string

    texts = sentences()[:300]
    words = {w for s in texts for w in g2p.tokens(normalize(s).text) if w not in ".,?!"}
    for word in sorted(words):
        assert g2p.ethiopic_word(word) == list(g2p._ethiopic_word.__wrapped__(word))  # the rules, not the memo
    got = g2p.ethiopic_word("ሰላም")
    got.append("x")  # a caller changing its list changes no later answer
    assert g2p.ethiopic_word("ሰላም") == list(g2p._ethiopic_word.__wrapped__("ሰላም"))
    for text in texts:
        assert check_text(text, PrepareConfig())["phonemes"] == phonemes_string(phonemize(text))


def test_the_rules_reading_of_a_word_is_what_a_sentence_says_for_it():
    """Fill from rules read BBC letter by letter as 'b b k'; a sentence spells it by the letters' names."""
    from utils.text.g2p import rules_reading

    assert rules_reading("BBC") == phonemize("BBC") == "b i b i s i".split()
    assert rules_reading("2ኛ") == phonemize("ሁለተኛ")  # the word the number is said as
    assert rules_reading("ዓ.ም.") == [s for s in phonemize("ዓ.ም.") if s not in (" ", ".")]
    assert rules_reading("ሰላም") == word_to_ipa("ሰላም") and rules_reading("  ") == []
