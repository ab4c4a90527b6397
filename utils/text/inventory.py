"""The phoneme symbols of the studio's Amharic: what the G2P can output, what the phoneme tokenizer holds and what a
pronunciation-dictionary word may use. Here, below the G2P, the lexicon and the tokenizers, so that each can ask."""
from __future__ import annotations

from utils.text.ethiopic import all_syllables

PAUSE_TOKENS = (",", ".", "?", "!")
WORD_BOUNDARY = " "
VOWELS = ["ə", "u", "i", "a", "e", "ɨ", "o"]
LATIN_ONLY = ["p", "v", "d͡ʒ"]  # already Amharic; listed so loanword letters are never missing


def phoneme_inventory() -> list[str]:
    """Every segment phonemize can output: consonants (plain, labialized, geminate), vowels, pauses."""
    consonants = sorted({s.consonant.rstrip("ʷ") for s in all_syllables().values()} | {"j", "ŋ"} | set(LATIN_ONLY))
    out = [WORD_BOUNDARY, *PAUSE_TOKENS, *VOWELS]
    for c in consonants:
        out += [c, c + "ʷ", c + "ː", c + "ːʷ"]
    return out
