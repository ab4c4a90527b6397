"""Amharic grapheme-to-phoneme: normalized words -> IPA segments.

Per word, in order:
1. the user's pronunciation dictionary (exact word, or the word after a one-letter preposition);
2. each letter -> consonant + vowel (utils.text.ethiopic), the gemination mark U+135F doubles;
3. gemination, which the script does not write: the lexicon in assets/text/gemination.tsv, else
   morphological rules (suffixes -ɲɲa, -təɲɲa, -tʃtʃɨhu, -otʃtʃ, the -alləhu auxiliary, the
   C1əC2C2əC3ə perfective, ʔɨnnə- plurals);
4. the 6th-order ɨ by syllable structure: a 6th-order letter is a bare consonant and ɨ is inserted
   only where a consonant has no syllable to join (word-initial clusters, three-consonant clusters,
   word-final clusters whose sonority does not fall, two obstruents aside: ክንፍ, ልብስ, but ለምን -> ləmɨn),
   never word-finally;
5. ə -> a after a laryngeal (h, ʔ): ሀ, ሐ, ኀ, አ, ዐ are read ha, ʔa (ኧ keeps ə).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from utils.text.ethiopic import GEMINATION_MARKS, LARYNGEALS, syllable, with_order
from utils.text.inventory import PAUSE_TOKENS, WORD_BOUNDARY
from utils.text.lexicon import gemination_lexicon
from utils.text.normalize import dictionary_key, fold, normalize, tokens

PREPOSITIONS = ("የ", "በ", "ለ", "ከ", "እንደ", "ስለ", "ወደ", "እስከ", "ያለ", "ሲ", "ስ", "እየ", "የሚ", "ሊ")
SUFFIXES = ("ን", "ም", "ና", "ው", "ዋ", "ኛ", "ችሁ", "ቸው", "ችን", "ዎች", "ዎቹ", "ነት", "ነው", "ናቸው", "ሽ", "ህ")
CH_ROW = set("ቸቹቺቻቼችቾቿ")
SONORITY = {"j": 5, "w": 5, "l": 4, "r": 4, "m": 3, "n": 3, "ɲ": 3, "ŋ": 3,
            "f": 2, "v": 2, "s": 2, "z": 2, "ʃ": 2, "ʒ": 2, "h": 2}
LATIN = [("sh", "ʃ"), ("ch", "t͡ʃ"), ("th", "t"), ("ph", "f"), ("ng", "n ɡ"), ("qu", "k w"), ("ck", "k"),
         ("ee", "i"), ("oo", "u"), ("a", "a"), ("b", "b"), ("c", "k"), ("d", "d"), ("e", "e"), ("f", "f"),
         ("g", "ɡ"), ("h", "h"), ("i", "i"), ("j", "d͡ʒ"), ("k", "k"), ("l", "l"), ("m", "m"), ("n", "n"),
         ("o", "o"), ("p", "p"), ("q", "k"), ("r", "r"), ("s", "s"), ("t", "t"), ("u", "u"), ("v", "v"),
         ("w", "w"), ("x", "k s"), ("y", "j"), ("z", "z")]


@dataclass
class Letter:
    char: str
    consonant: str
    vowel: str | None      # None: 6th order
    palatal: bool = False
    doubled: bool = False

    @property
    def order(self) -> int:
        return {"ə": 1, "u": 2, "i": 3, "a": 4, "e": 5, None: 6, "o": 7}[self.vowel]


def _letters(word: str) -> list[Letter]:
    out: list[Letter] = []
    for ch in word:
        if ch in GEMINATION_MARKS:
            if out:
                out[-1].doubled = True
            continue
        s = syllable(ch)
        if s is not None:
            out.append(Letter(ch, s.consonant, s.vowel, s.palatal))
    return out


# ------------------------------------------------------------------------------ gemination
def _candidates(chars: str):
    """(offset, stem) pairs to look up: the word, the word after a preposition (with the እ or አ
    that the preposition swallowed put back: የሷ = የ + እሷ, ላለ = ለ + አለ), each with a suffix off."""
    yield 0, chars
    for prefix in PREPOSITIONS:
        if chars.startswith(prefix) and len(chars) > len(prefix):
            rest = chars[len(prefix):]
            yield len(prefix), rest
            yield len(prefix) - 1, "እ" + rest
    for prefix in ("ለ", "በ", "ከ", "የ"):
        if len(chars) > 1 and chars[0] == with_order(prefix, 4):
            yield 0, "አ" + chars[1:]


def _is_suffix_chain(s: str) -> bool:
    """Is `s` a run of known suffixes (ኛ + ችሁ, ን + ም, ...)?"""
    return not s or any(s.startswith(x) and _is_suffix_chain(s[len(x):]) for x in SUFFIXES if x)


def _lexicon_lookup(chars: str) -> tuple[int, int, frozenset[int]] | None:
    """(start, end, doubled indices) of a lexicon word found inside `chars`, or None."""
    lexicon = gemination_lexicon()
    for offset, rest in _candidates(chars):
        for cut in range(len(rest), 0, -1):
            if not _is_suffix_chain(rest[cut:]):
                continue
            stem = rest[:cut]
            # a possessive/definite vowel suffix rewrites the last letter: ልጅ + -u -> ልጁ
            candidates = [stem]
            if syllable(stem[-1]) is not None and syllable(stem[-1]).vowel == "u":
                candidates.append(stem[:-1] + with_order(stem[-1], 6))
            for candidate in candidates:
                if candidate in lexicon:
                    doubled = frozenset(i + offset for i in lexicon[candidate] if i + offset >= 0)
                    return max(offset, 0), offset + len(stem), doubled
    return None


def _rule_gemination(letters: list[Letter]) -> set[int]:
    chars = "".join(l.char for l in letters)
    n, out = len(letters), set()
    for i, l in enumerate(letters):
        nxt = chars[i + 1:]
        if i > 0 and l.char in "ኛኞ":                                   # -ɲɲa adjectives, ordinals, languages
            out.add(i)
        if l.char == "ተ" and nxt.startswith("ኛ") and i > 0 and letters[i - 1].order != 6:
            out.add(i)                                                  # ordinal -təɲɲa: ሁለተኛ
        if l.char in CH_ROW and i > 0:
            if nxt.startswith("ሁ"):                                      # 2nd plural -tʃtʃɨhu
                out.add(i)
            elif letters[i - 1].order == 7:                             # plural -otʃtʃ: ልጆች, ልጆቹ
                out.add(i)
            elif letters[i - 1].order == 4 and (l.char in "ቸቻ" or nxt[:1] in ("ን", "ሁ")):
                out.add(i)                                              # -atʃtʃəw, -atʃtʃɨn
        if (l.char in "ለላሉ" and i >= 2 and letters[i - 1].order == 4
                and (nxt in ("ሁ", "ች", "ን", "ሽ", "ችሁ") or (l.char == "ሉ" and not nxt))):
            out.add(i)                                                  # present auxiliary -alləhu, -allu
        if l.char in "ዬዮ" and i == n - 1 and i > 0 and letters[i - 1].order == 6:
            out.add(i)                                                  # vocative -ɨjje, -ɨjjo
    if (n == 4 and letters[1].order == 6 and letters[0].consonant == letters[2].consonant
            and letters[1].consonant == letters[3].consonant and letters[3].order != 6):
        out.add(3)                                                      # reduplicated adjectives: ለስላሳ, ቀዝቃዛ
    m = re.fullmatch(r"(ተ|አ|አስ)?(.)(.)(.)(ች)?", chars)                 # C1əC2C2əC3ə perfective
    if m and n >= 3:
        start = len(m.group(1) or "")
        r1, r2, r3 = letters[start: start + 3]
        # (not CəCəCu: ነገሩ "the matter" is as common as ወሰዱ "they took")
        if (r1.order == 1 and r2.order == 1 and r3.order == 1
                and r1.consonant not in LARYNGEALS and r2.consonant not in LARYNGEALS
                and not (start == 0 and r1.char == "ተ")):  # ተመኘ is the passive ተ + a 2-consonant root
            out.add(start + 1)
    for prefix in ("", *PREPOSITIONS[:8]):                             # ʔɨnnə-: እነሱ, እናት, እና
        if chars.startswith(prefix + "እ") and chars[len(prefix) + 1: len(prefix) + 2] in ("ነ", "ና"):
            out.add(len(prefix) + 1)
            break
    return out


def _geminate(letters: list[Letter]) -> None:
    chars = "".join(l.char for l in letters)
    found = _lexicon_lookup(chars)
    rules = _rule_gemination(letters)
    if found:
        start, end, doubled = found
        rules = {i for i in rules if i < start or i >= end} | set(doubled)
    for i in rules:
        if letters[i].consonant not in LARYNGEALS:
            letters[i].doubled = True


# ------------------------------------------------------------------------------- syllables
@dataclass
class Seg:
    sym: str
    vowel: bool
    gem: int = 0            # 1: first half of a geminate, 2: second half
    lowers: bool = True     # ə that may become a next to a laryngeal (not ኧ)
    bound: bool = False     # the j of a palatalized letter (ፘ rʲa): part of the consonant before it


def _son(seg: Seg) -> int:
    return SONORITY.get(seg.sym.rstrip("ʷ"), 1)


def _final_ok(a: Seg, b: Seg) -> bool:
    """May a and b end a word together (ሚስት, ክንፍ) or must ɨ split them (አምሳግር -> ...gɨr)?"""
    if a.gem == 2 or a.sym in LARYNGEALS:  # እኅት -> ʔɨ.hɨt
        return False
    if a.gem == 1:                         # the two halves of one long consonant: ማን -> manː
        return True
    if a.sym == "w" and _son(b) >= 3:      # the definite -w takes ɨ before -n, -m: እርሻውን -> ...wɨn
        return False
    # sonority must fall, or both be obstruents (ልብስ); two nasals or two liquids split: ለምን -> ləmɨn, ያንን -> janɨn
    return _son(a) > _son(b) or (_son(a) <= 2 and _son(b) <= 2)


def _epenthesis(segs: list[Seg]) -> list[Seg]:
    after: set[int] = set()                       # indices of consonants that get an ɨ after them
    i, n = 0, len(segs)
    while i < n:
        if segs[i].vowel:
            i += 1
            continue
        j = i
        while j < n and not segs[j].vowel:
            j += 1
        cluster, left, right = [k for k in range(i, j) if not segs[k].bound], i > 0, j < n
        if right:
            mid = cluster[:-1]
        else:
            k = 2 if len(cluster) >= 2 and _final_ok(segs[cluster[-2]], segs[cluster[-1]]) else 1
            rest = cluster[:-k]
            if not rest and not left:             # a word of consonants only: ንት -> nɨt, ስ -> sɨ
                after.add(cluster[0])
                mid = []
            elif rest:
                after.add(rest[-1])               # onset + ɨ for the final coda: ስምንት -> ...mɨnt
                mid = rest[:-1]
            else:
                mid = []
        if not left and mid:
            after.add(mid[0])                     # a word never starts with a cluster
            mid = mid[1:]
        has_coda = False
        for idx, c in enumerate(mid):
            nxt = segs[mid[idx + 1]] if idx + 1 < len(mid) else None
            if has_coda or segs[c].sym in LARYNGEALS:   # ማህበር -> ma.hɨ.bər
                after.add(c)
                has_coda = False
            elif nxt is not None and segs[c].gem != 1 and (_son(nxt) > _son(segs[c]) or nxt.gem == 1):
                after.add(c)                      # እግርጌ -> ʔɨ.gɨr.ge: the sonorant takes the coda
            else:
                has_coda = True
        i = j
    out = []
    for idx, s in enumerate(segs):
        out.append(s)
        if idx in after and idx + 1 < n and segs[idx + 1].bound:
            after.add(idx + 1)  # the ɨ goes after the consonant's palatal glide
        elif idx in after:
            out.append(Seg("ɨ", True, lowers=False))
    return out


def _laryngeal(segs: list[Seg]) -> None:
    for i, s in enumerate(segs):
        if not (s.vowel and s.sym == "ə" and s.lowers):
            continue
        if i > 0 and segs[i - 1].sym.rstrip("ʷ") in LARYNGEALS:  # ሀ, አ, ዐ are read ha, ʔa (but ነህ stays nəh)
            s.sym = "a"


def _merge(segs: list[Seg]) -> list[str]:
    out = []
    for s in segs:
        if s.gem == 2:
            continue
        if s.gem == 1:
            base = s.sym[:-1] if s.sym.endswith("ʷ") else s.sym
            out.append(base + "ː" + ("ʷ" if s.sym.endswith("ʷ") else ""))
        else:
            out.append(s.sym)
    return out


def ethiopic_word(word: str) -> list[str]:
    """One Ethiopic word (already normalized) -> IPA segments. Memoised: the rules and the lexicon are fixed, and
    words repeat (38% of the words in the 805 sample sentences are repeats; far more over a 200k-row dataset,
    whose Re-check spent most of its ~1 ms a row here)."""
    return list(_ethiopic_word(word))


@lru_cache(maxsize=1 << 17)
def _ethiopic_word(word: str) -> tuple[str, ...]:
    letters = _letters(word)
    if not letters:
        return ()
    if not any(l.doubled for l in letters):  # the writer's own gemination marks win over our guesses
        _geminate(letters)
    letters[0].doubled = False  # nothing precedes a word-initial consonant to close with it
    segs: list[Seg] = []
    for l in letters:
        if l.doubled:
            segs += [Seg(l.consonant, False, 1), Seg(l.consonant, False, 2)]
        else:
            segs.append(Seg(l.consonant, False))
        if l.palatal:
            segs.append(Seg("j", False, bound=True))
        if l.vowel is not None:
            segs.append(Seg(l.vowel, True, lowers=l.char != "ኧ"))
    segs = _epenthesis(segs)
    _laryngeal(segs)
    return tuple(_merge(segs))


def latin_word(word: str) -> list[str]:
    """Approximate letter rules for a Latin-script word (normalize() has already warned)."""
    w, out = word.lower(), []
    while w:
        for graph, ipa in LATIN:
            if w.startswith(graph):
                out += ipa.split()
                w = w[len(graph):]
                break
        else:
            w = w[1:]
    return out


def word_to_ipa(word: str, user_dict: dict[str, list[str]] | None = None) -> list[str]:
    """A single normalized word -> IPA segments; the user dictionary overrides the rules."""
    word = fold(word)
    if user_dict:
        if (key := dictionary_key(word, user_dict)) is not None:
            return list(user_dict[key])
        for prefix in ("የ", "በ", "ለ", "ከ"):
            if word.startswith(prefix) and (key := dictionary_key(word[len(prefix):], user_dict)) is not None:
                return ethiopic_word(prefix) + list(user_dict[key])
    if re.fullmatch(r"[A-Za-z]+", word):
        return latin_word(word)
    if re.search(r"[A-Za-z]", word):  # የGoogle, Googleን: each script's part read by its own rules, as one word
        return [s for part in re.findall(r"[A-Za-z]+|[^A-Za-z]+", word) for s in word_to_ipa(part, user_dict)]
    return ethiopic_word(word)


def phonemize(text: str, user_dict: dict[str, list[str]] | None = None) -> list[str]:
    """Text -> IPA segments; " " between words, pauses as ",", ".", "?", "!"."""
    return phonemize_normalized(normalize(text, user_dict or ()).text, user_dict)


def rules_reading(word: str) -> list[str]:
    """How a sentence reads `word` without a dictionary entry: normalized first (BBC -> b i b i s i, 2ኛ -> ሁለተኛ), as
    Inference does, so that an entry written from it (keyed by the word as typed) starts from what is heard."""
    return [s for s in phonemize(word) if s != WORD_BOUNDARY and s not in PAUSE_TOKENS]


def phonemize_normalized(normalized_text: str, user_dict: dict[str, list[str]] | None = None) -> list[str]:
    """phonemize() of a text normalize() already read (the dataset checks keep both: normalized once, not twice)."""
    out: list[str] = []
    for tok in tokens(normalized_text):
        if tok in PAUSE_TOKENS:
            if out:
                out.append(tok)
            continue
        segments = word_to_ipa(tok, user_dict)
        if not segments:
            continue
        if out:
            out.append(WORD_BOUNDARY)
        out += segments
    return out


def phonemes_string(segments: list[str]) -> str:
    """Segments -> the manifest form: space-separated segments, "|" between words."""
    return " ".join("|" if s == WORD_BOUNDARY else s for s in segments)


def parse_phonemes(s: str) -> list[str]:
    return [WORD_BOUNDARY if t == "|" else t for t in s.split()]


def word_list_ipa(lines, user_dict: dict[str, list[str]] | None = None):
    """One word a line -> (word, segments) per line, in order (the CLI's --words and the bench).
    A line that normalizes to several words (a number) gets all their segments, without boundaries."""
    for line in lines:
        word = line.strip()
        yield word, [s for s in phonemize(word, user_dict) if s not in PAUSE_TOKENS and s != WORD_BOUNDARY]
