"""Amharic text normalization: what is written -> what is said, as plain Amharic words.

Order matters and reads top to bottom in `normalize`: unify homophone letters, expand
abbreviations, spell all-capital Latin abbreviations by their letters' names (BBC -> ቢቢሲ, with a
warning), read ordinals (2ኛ, 2nd), dates, times, fractions (1/2, ½), phone numbers, money, percentages,
decimals, years and other numbers (Arabic and Ethiopic digits), turn punctuation into pause marks (. , ? !),
and keep other Latin-script words (with a warning) while dropping symbols nobody can pronounce (with a warning).
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection
from dataclasses import dataclass, field
from functools import lru_cache

from utils.text import numbers
from utils.text.ethiopic import HOMOPHONES, syllable

ETH = "\u1200-\u135a\u135d-\u135f\u1380-\u138f\u2d80-\u2dde\uab00-\uab2e\U0001e7e0-\U0001e7fe"
ETH_LETTER = f"[{ETH}]"
ETH_NUM = f"[{numbers.ETHIOPIC_NUMERALS}]"
JOIN = "\u2060"  # glues a prefix or suffix to the words a number becomes: በ1887 -> በአሥራ ...
PAUSES = {"።": ".", "፨": ".", "፠": ".", ".": ".", "…": ".", "፣": ",", "፤": ",", "፥": ",", "፦": ",",
          ",": ",", ";": ",", ":": ",", "،": ",", "؛": ",", "–": ",", "—": ",", "፧": "?", "?": "?",
          "؟": "?", "!": "!", "¡": "!"}
SPACES = "፡/\\-_\"'«»“”‘’„‹›()[]{}<>|*~`^·•"
SILENT = {"\u200b", "\u200c", "\u200d", "\ufeff", "\u00ad", "\u135e"}  # zero-width, BOM, vowel length
SYMBOLS = {"%": "በመቶ", "&": "እና", "+": "ሲደመር", "=": "እኩል", "°": "ዲግሪ", "@": "አት", "#": "ቁጥር",
           "$": "ዶላር", "€": "ዩሮ", "£": "ፓውንድ"}
MONTHS = ["መስከረም", "ጥቅምት", "ኅዳር", "ታኅሣሥ", "ጥር", "የካቲት", "መጋቢት", "ሚያዝያ", "ግንቦት", "ሰኔ",
          "ሐምሌ", "ነሐሴ", "ጳጉሜ"]  # Ethiopian calendar, the usual one for dates written in Amharic
PREFIXES = "በ|ለ|ከ|የ|እንደ|ስለ|ወደ|እና"


@dataclass
class Normalized:
    text: str
    warnings: list[str] = field(default_factory=list)


LATIN_WORDS = "Latin-script word(s) read with approximate letter rules: "  # then the words, then ASK_ENTRY
ASK_ENTRY = ". Add them to the pronunciation dictionary for an exact reading."
SPELLED = "Spelled letter by letter: "  # then "BBC (ቢቢሲ), ...", then SAID_AS_WORD
SAID_AS_WORD = ". An abbreviation said as a word, as NATO is, needs a pronunciation dictionary entry."
ACRONYM = re.compile(r"(?<![A-Za-z])[A-Z]{2,5}(?![A-Za-z])")  # BBC, USA, UN (a prefix or suffix may be glued on)

def tokens(normalized_text: str) -> list[str]:
    """Normalized text -> words and pause marks (how g2p reads it and the dictionary looks words up)."""
    return re.findall(r"[.,?!]|[^\s.,?!]+", normalized_text)


def fold(text: str) -> str:
    """Unify the letters Amharic pronounces alike (ሐ/ኀ -> ሀ, ሠ -> ሰ, ዐ -> አ, ፀ -> ጸ)."""
    return "".join(HOMOPHONES.get(ch, ch) for ch in text)


def dictionary_key(word: str, user_dict: Collection[str] | None) -> str | None:
    """The pronunciation dictionary's key that reads `word` (g2p, the normalizer's warnings and kept abbreviations all
    look words up here), or None. The word as written first; a Latin-script word then also matches an entry that
    differs only in case (google, Google, GOOGLE: its lowercase entry first, else the first in the dictionary). An
    Ethiopic word has no case: only as written (folded)."""
    if not user_dict:
        return None
    if word in user_dict:
        return word
    if not re.fullmatch(r"[A-Za-z]+", word):
        return None
    lower = word.lower()
    if lower in user_dict:
        return lower
    return next((key for key in user_dict if key.lower() == lower), None)


@lru_cache(maxsize=None)
def _abbreviations() -> list[tuple[re.Pattern, str]]:
    rules = [(key, expansion) for key, expansion in numbers.table_rows("abbreviations.tsv")]
    # a key also matches with its letters unified (ዐ.ም like ዓ.ም) unless that spelling is another key
    raw = {k for k, _ in rules}
    rules += [(fold(k), e) for k, e in rules if fold(k) != k and fold(k) not in raw]
    out = []
    for key, expansion in sorted(rules, key=lambda r: -len(r[0])):
        # "." and "/" are written interchangeably (ዶ/ር, ዶ.ር), with or without a space after
        body = "".join((r"[./]\s?" if c in "./" and i < len(key) - 1 else re.escape(c)) for i, c in enumerate(key))
        if key.endswith("/"):  # a name prefix: ገ/ሚካኤል -> ገብረ ሚካኤል
            pattern = rf"(?<![{ETH}/])(?P<pre>{PREFIXES})?{body}\s?(?={ETH_LETTER})"
            expansion += " "
        else:
            tail = r"\.?" if not key.endswith(".") else ""
            pattern = rf"(?<![{ETH}/])(?P<pre>{PREFIXES})?{body}{tail}(?![{ETH}/])"
        out.append((re.compile(pattern), expansion))
    return out


def _expand_abbreviations(text: str) -> str:
    if "/" not in text and "." not in text and "ኢፌዲሪ" not in text:  # the one key with neither
        return text
    for pattern, expansion in _abbreviations():
        text = pattern.sub(lambda m: (m.group("pre") or "") + expansion, text)
    return text


@lru_cache(maxsize=None)
def _abbreviation_stop() -> re.Pattern:
    # a known abbreviation (its "." and "/" interchangeable, a prefix allowed: በዓ.ም.) or a single letter, then "."
    keys = {k.rstrip(".") for k, _ in numbers.table_rows("abbreviations.tsv") if not k.endswith("/")}
    bodies = sorted({"".join("[./]" if c in "./" else re.escape(c) for c in k) for k in keys | set(map(fold, keys))},
                    key=len, reverse=True)
    return re.compile(rf"(?:(?<![{ETH}/.])(?:{PREFIXES})?(?:{'|'.join(bodies)})|(?<!{ETH_LETTER}){ETH_LETTER})\.$")


def ends_with_abbreviation(text: str) -> bool:
    """Whether the "." that ends `text` belongs to an abbreviation (ዓ.ም., ዶክ., ኪ.ሜ.), which the reader expands, so
    it does not end a sentence there."""
    return bool(_abbreviation_stop().search(text))


@lru_cache(maxsize=None)
def letter_names() -> dict[str, str]:
    """Latin capital -> its English name in Ethiopic script (assets/text/letters.tsv): B -> ቢ, S -> ኤስ."""
    return dict(numbers.table_rows("letters.tsv"))


def _spell_acronyms(text: str, keep: Collection[str], warnings: list[str]) -> str:
    """BBC -> ቢቢሲ: Amharic speakers say an all-capital abbreviation letter by letter, with the English names.
    A word in `keep` (the pronunciation dictionary) stays as written, so that its entry reads it."""
    spelled: dict[str, str] = {}

    def spell(m: re.Match) -> str:
        if dictionary_key(m.group(), keep) is not None:
            return m.group()
        spelled[m.group()] = "".join(letter_names()[c] for c in m.group())
        return spelled[m.group()]

    text = ACRONYM.sub(spell, text)
    if spelled:
        warnings.append(SPELLED + ", ".join(f"{w} ({e})" for w, e in spelled.items()) + SAID_AS_WORD)
    return text


def _words(ws: list[str]) -> str:
    return " ".join(ws)


def _int(s: str) -> int:
    return int(s.replace(",", ""))


def _value(s: str) -> int:
    return numbers.ethiopic_value(s) if s[0] in numbers.ETHIOPIC_NUMERALS else _int(s)


NUM = rf"(?:\d{{1,3}}(?:,\d{{3}})+|\d+|{ETH_NUM}+)"
# a minus sign on a number that stands alone (-5, −3.5 at a sentence's start or after a space): not a range (5-10),
# a date (12-05-2020) or a word's hyphen (COVID-19), whose dash follows a letter or a digit
MINUS = re.compile(r"(?<![\w.,/])[-\u2212](?=\d)")
MINUS_WORD = "ሲቀነስ"  # "minus", as a number below zero is read out
HOUR_WORD = ("ሰዓት", "ሰአት")  # the clock reading says it; the same word written after the time is not said again
CLOCK = re.compile(rf"(?<![\d:])([01]?\d|2[0-4]):([0-5]\d)(?![\d:])"
                   rf"(?:[ \t{JOIN}]*(?:{'|'.join(HOUR_WORD)})(?!{ETH_LETTER}))?")
# A fraction is a/b with 1 <= a < b <= 10, standing alone (no third part as in a date 12/05/2016, no digit, "/"
# or "." touching it): 24/7 or 12/30 stay numbers. A whole number a space before it makes a mixed number (2 1/2).
FRACTION = re.compile(r"(?<![\d/.,])(?:(\d+) )?(\d{1,2})[/\u2044](\d{1,2})(?![\d/]|\.\d)")
VULGAR = "\u00bc-\u00be\u2150-\u215e"  # ¼ ½ ¾ ⅐ ... ⅞


def _clock(m: re.Match) -> str:
    """10:30 -> "ten hours and thirty minutes", as written (not converted to the Ethiopian day's hours)."""
    hours, minutes = int(m.group(1)), int(m.group(2))
    out = numbers.cardinal(hours) + [HOUR_WORD[0]]
    if minutes:
        words = numbers.cardinal(minutes)
        out += ["ከ" + words[0], *words[1:], "ደቂቃ"]
    return _words(out)


def _fraction_words(a: int, b: int) -> list[str]:
    """1/2 -> ግማሽ, 1/4 -> ሩብ, else the numerator and the denominator's ordinal (3/4 -> ሦስት አራተኛ)."""
    return {(1, 2): ["ግማሽ"], (1, 4): ["ሩብ"]}.get((a, b)) or numbers.cardinal(a) + numbers.ordinal(b)


def _fraction(m: re.Match) -> str:
    a, b = int(m.group(2)), int(m.group(3))
    if not 1 <= a < b <= 10:
        return m.group(0)
    part = _fraction_words(a, b)
    if m.group(1) is None:
        return _words(part)
    whole = numbers.cardinal(int(m.group(1)))  # 2 1/2 -> ሁለት ተኩል, 1 1/4 -> አንድ ከሩብ
    return _words(whole + (["ተኩል"] if part == ["ግማሽ"] else ["ከ" + part[0], *part[1:]]))


def _unfold_vulgar(text: str) -> str:
    """½ -> 1/2 (and ¼ ¾ ⅓ ...), read then as a written fraction; 1½ becomes the mixed number 1 1/2."""
    text = re.sub(rf"(?<=\d)(?=[{VULGAR}])", " ", text)
    return re.sub(f"[{VULGAR}]", lambda m: unicodedata.normalize("NFKC", m.group()).replace("\u2044", "/"), text)


def _read_numbers(text: str) -> str:
    # ordinals: 2ኛ, ፪ኛ, 3ተኛ (the suffix may go on: 2ኛው), and the English 2nd, 21st, 10th said the same way
    text = re.sub(rf"({NUM})(?:\s?(?:ተኛ|ኛ)|(?:st|nd|rd|th)(?![A-Za-z]))",
                  lambda m: _words(numbers.ordinal(_value(m.group(1)))), text)
    text = _unfold_vulgar(text)
    text = MINUS.sub(f"{MINUS_WORD} ", text)  # -5 was read "five", its sign dropped without a word
    # a prefix or suffix written on a number stays on its first or last word
    text = re.sub(rf"(?<={ETH_LETTER})(?=[\d{numbers.ETHIOPIC_NUMERALS}])", JOIN, text)
    text = re.sub(rf"(?<=[\d{numbers.ETHIOPIC_NUMERALS}])(?={ETH_LETTER})", JOIN, text)

    def date(m: re.Match) -> str:
        day, month, year = int(m.group(1)), int(m.group(2)), m.group(3)
        if not (1 <= day <= 30 and 1 <= month <= 13):
            return m.group(0).replace("/", " ").replace(".", " ")
        y = int(year)
        return _words([MONTHS[month - 1], *numbers.cardinal(day), "ቀን", *numbers.year(y)])

    text = re.sub(r"(?<![\d.])(\d{1,2})[/.-](\d{1,2})[/.-](\d{4})(?![\d])", date, text)

    text = CLOCK.sub(_clock, text)
    text = FRACTION.sub(_fraction, text)

    def phone(m: re.Match) -> str:
        groups = re.findall(r"\d+", m.group(0))
        return ", ".join(_words(numbers.digits(g)) for g in groups)

    text = re.sub(r"(?<![\d.,])(?:\+\d[\d \-]{6,}\d|0\d{6,}|0\d{2,3}(?:[ -]\d{2,4}){2,})(?![\d])", phone, text)

    def money(m: re.Match, currency: str = "ብር") -> str:  # 50.25 ብር -> fifty birr and twenty-five cents
        out = numbers.cardinal(_int(m.group(1))) + [currency]
        cents = int((m.group(2) or "0").ljust(2, "0"))
        if cents:
            words = numbers.cardinal(cents)
            out += ["ከ" + words[0], *words[1:], "ሳንቲም"]
        return _words(out)

    money_num = r"(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d{1,2}))?"
    gap = rf"[\s{JOIN}]?"  # 100ብር is 100 ብር, not a suffix glued to the number (መቶብር)
    text = re.sub(rf"{money_num}{gap}ብር(?!{ETH_LETTER})", money, text)
    text = re.sub(rf"(?<!{ETH_LETTER})ብር{gap}{money_num}", money, text)
    for sign, currency in (("$", "ዶላር"), ("€", "ዩሮ"), ("£", "ፓውንድ")):  # $100 ዶላር says ዶላር once
        text = re.sub(rf"{re.escape(sign)}\s?{money_num}(?:{gap}{currency}(?!{ETH_LETTER}))?",
                      lambda m, c=currency: money(m, c), text)
    text = re.sub(r"(\d+)\.(\d+)", lambda m: _words(numbers.cardinal(int(m.group(1))) + ["ነጥብ"] + numbers.digits(m.group(2))), text)
    text = re.sub(r"(?<![\d])(\d+)\s?[-–]\s?(\d+)(?![\d])",
                  lambda m: _words(numbers.cardinal(int(m.group(1))) + ["እስከ"] + numbers.cardinal(int(m.group(2)))), text)
    # years: a four-digit number before ዓመተ ምሕረት / ዓመተ ዓለም (already expanded) or a date
    text = re.sub(rf"({NUM})(?=\s?(?:ዓመተ|አመተ|ኣመተ|ዓ\.ም|ዓ/ም))", lambda m: _words(numbers.year(_value(m.group(1)))), text)
    text = re.sub(NUM, lambda m: _words(numbers.cardinal(_value(m.group(0)))), text)
    text = text.replace(JOIN + " ", JOIN).replace(" " + JOIN, JOIN)
    return re.sub(rf"(\S){JOIN}(\S)", _joined, text).replace(JOIN, "")


def _joined(m: re.Match) -> str:
    """A suffix on a number's last word: 5ቱ is አምስቱ, not አምስትቱ. Where the word ends in a bare consonant and the
    suffix starts with the same one (ሁለት+ቱ, ዘጠኝ+ኙ, አስር+ሩ), the suffix's letter takes its place."""
    last, first = syllable(m.group(1)), syllable(m.group(2))
    same = last is not None and first is not None and last.vowel is None and last.consonant == first.consonant
    return m.group(2) if same else m.group(0)


def _punctuate(text: str, warnings: list[str]) -> str:
    out, unknown, latin = [], [], []
    for ch in text:
        if ch in SILENT:
            continue
        if ch in PAUSES:
            out.append(f" {PAUSES[ch]} ")
        elif ch in SYMBOLS:
            out.append(f" {SYMBOLS[ch]} ")
        elif ch.isspace() or ch in SPACES:
            out.append(" ")
        elif syllable(ch) is not None or ch in "\u135d\u135f" or ("a" <= ch.lower() <= "z"):
            out.append(ch)
        elif ch.isdigit():  # digits of other scripts (Arabic-Indic, ...)
            out.append(f" {_words(numbers.digits(str(unicodedata.digit(ch, 0))))} ")
        else:
            unknown.append(ch)
            out.append(" ")
    if unknown:
        shown = " ".join(sorted({f"{c!r} (U+{ord(c):04X})" for c in unknown}))
        warnings.append(f"Removed {len(unknown)} character(s) that have no Amharic reading: {shown}")
    tokens = "".join(out).split()
    merged: list[str] = []
    for tok in tokens:
        if tok in ".,?!":
            if not merged:
                continue  # a text never starts with a pause
            if merged[-1] in ".,?!":
                merged[-1] = max(merged[-1], tok, key=",.!?".index)
                continue
        else:  # a Latin word, or one glued to Amharic letters (የGoogle): read by the letter rules, said
            latin += re.findall(r"[A-Za-z]+", tok)
        merged.append(tok)
    if latin:
        warnings.append(LATIN_WORDS + ", ".join(dict.fromkeys(latin)) + ASK_ENTRY)
    text = ""
    for tok in merged:
        text += tok if tok in ".,?!" else (" " if text else "") + tok
    return text


def normalize(text: str, keep: Collection[str] = ()) -> Normalized:
    """Text as written -> words as spoken, with pause marks. Never raises on odd input. `keep`: the words the
    pronunciation dictionary reads (its keys), left as written for it (an abbreviation there is not spelled)."""
    warnings: list[str] = []
    text = unicodedata.normalize("NFC", text or "").replace("፡፡", "።")  # two wordspaces are a full stop
    text = re.sub(r"(?<=[A-Za-z])(?=\d)", " ", text)  # BBC1, COVID19: the number is said as a word of its own
    text = fold(_spell_acronyms(_expand_abbreviations(text), keep, warnings))
    text = _read_numbers(text)
    text = _punctuate(text, warnings)
    return Normalized(fold(text), warnings)


def without_covered(warnings: list[str], user_dict: dict | None) -> list[str]:
    """The normalizer's warnings less the words the pronunciation dictionary reads: a word given an entry is read
    exactly as written there, and a warning still asking for its entry would no longer be true."""
    out = []
    for warning in warnings:
        if user_dict and warning.startswith(LATIN_WORDS) and warning.endswith(ASK_ENTRY):
            words = [w for w in warning[len(LATIN_WORDS):-len(ASK_ENTRY)].split(", ")
                     if dictionary_key(w, user_dict) is None]
            if not words:
                continue
            warning = LATIN_WORDS + ", ".join(words) + ASK_ENTRY
        out.append(warning)
    return out
