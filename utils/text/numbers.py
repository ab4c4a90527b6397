"""Numbers -> Amharic words: cardinals, ordinals, years, digit strings, and Ethiopic numerals.

Ethiopic numerals are additive within a group and multiplicative at ፻ (100) and ፼ (10 000):
፲፰፻፹፯ is (10+8)*100 + 80+7 = 1887, ፳፻፲፮ is 20*100 + 16 = 2016, ፻፼ is 100*10000.
The words come from assets/text/numbers.tsv.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "text"

ETHIOPIC_DIGITS = {chr(0x1369 + i): i + 1 for i in range(9)}        # ፩..፱
ETHIOPIC_TENS = {chr(0x1372 + i): (i + 1) * 10 for i in range(9)}   # ፲..፺
HUNDRED, MYRIAD = "\u137b", "\u137c"                                  # ፻ ፼
ETHIOPIC_NUMERALS = "".join(ETHIOPIC_DIGITS) + "".join(ETHIOPIC_TENS) + HUNDRED + MYRIAD
TEEN_PREFIX = "አሥራ"  # 11..19 are "ten-and one" ... "ten-and nine"
LARGE = (10**12, 10**9, 10**6, 1000)


def table_rows(name: str) -> list[list[str]]:
    """The data lines of assets/text/NAME (a TSV; "#" comments and blank lines skipped), split at tabs."""
    lines = (ASSETS / name).read_text(encoding="utf-8").splitlines()
    return [line.split("\t") for line in lines if line.strip() and not line.startswith("#")]


@lru_cache(maxsize=None)
def _table() -> tuple[dict[int, str], dict[str, str]]:
    words, ordinals = {}, {}
    for value, word, ordinal in table_rows("numbers.tsv"):
        words[int(value)] = word
        ordinals[word] = ordinal
    return words, ordinals


def cardinal(n: int) -> list[str]:
    """1887 -> ['አንድ', 'ሺህ', 'ስምንት', 'መቶ', 'ሰማንያ', 'ሰባት']."""
    words, _ = _table()
    if n < 0:
        return ["ሲቀነስ", *cardinal(-n)]
    if n < 10:
        return [words[n]]
    if n < 20:
        return [words[10]] if n == 10 else [TEEN_PREFIX, words[n - 10]]
    if n < 100:
        tens, ones = divmod(n, 10)
        return [words[tens * 10]] + ([words[ones]] if ones else [])
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return ([words[hundreds]] if hundreds > 1 else []) + [words[100]] + (cardinal(rest) if rest else [])
    for unit in LARGE:
        if n >= unit:
            if n >= unit * 1000 and unit == LARGE[0]:
                break  # beyond trillions: read digit by digit
            high, rest = divmod(n, unit)
            return cardinal(high) + [words[unit]] + (cardinal(rest) if rest else [])
    return digits(str(n))


def ordinal(n: int) -> list[str]:
    """3 -> ['ሦስተኛ']; 21 -> ['ሃያ', 'አንደኛ']: the last word takes the ordinal form."""
    _, ordinals = _table()
    out = cardinal(n)
    out[-1] = ordinals.get(out[-1], out[-1] + "ኛ")
    return out


def year(n: int) -> list[str]:
    """Years 1100-1999 are read in hundreds (1887 -> 'eighteen hundred eighty-seven'), others as numbers."""
    words, _ = _table()
    if 1100 <= n <= 1999:
        high, rest = divmod(n, 100)
        return cardinal(high) + [words[100]] + (cardinal(rest) if rest else [])
    return cardinal(n)


def digits(s: str) -> list[str]:
    """'0911' -> one word per digit (phone numbers, codes)."""
    words, _ = _table()
    return [words[int(d)] for d in s if d.isdigit()]


def ethiopic_value(numeral: str) -> int:
    """፲፰፻፹፯ -> 1887. Raises ValueError on anything that is not an Ethiopic numeral."""
    total = group = chunk = 0
    if not numeral:
        raise ValueError("empty numeral")
    for ch in numeral:
        if ch in ETHIOPIC_DIGITS:
            chunk += ETHIOPIC_DIGITS[ch]
        elif ch in ETHIOPIC_TENS:
            chunk += ETHIOPIC_TENS[ch]
        elif ch == HUNDRED:
            group += (chunk or 1) * 100
            chunk = 0
        elif ch == MYRIAD:
            total = (total + group + chunk or 1) * 10000
            group = chunk = 0
        else:
            raise ValueError(f"{ch!r} is not an Ethiopic numeral")
    return total + group + chunk
