"""What is wrong with a row: text checks (one transcript at a time) and dataset checks (all rows).

Audio checks (unreadable, duration, silence, clipping, SNR) are measured while the clip is made,
in `clips.py`; this module turns transcripts and the whole table into flags and messages.
"""
from __future__ import annotations

import hashlib
import statistics

from utils.datasets.config import EXCLUDING_FLAGS, FLAG_HELP, PrepareConfig

ETHIOPIC_RANGES = ((0x1200, 0x139F), (0x2D80, 0x2DDF), (0xAB00, 0xAB2F))
# What the frontend reads besides Ethiopic letters: spaces, digits and the punctuation it turns into pauses.
READABLE_EXTRA = set(" 0123456789.,?!:;'\"-()/%") | set("፡።፣፤፥፦፧፨")


def is_ethiopic(ch: str) -> bool:
    o = ord(ch)
    return any(a <= o <= b for a, b in ETHIOPIC_RANGES)


def lost_letters(text: str) -> bool:
    """A transcript whose letters a spreadsheet's save replaced with '?': no letter, and '?' most of what is left."""
    kept = [c for c in text if not c.isspace()]
    return not any(c.isalpha() for c in kept) and kept.count("?") >= max(3, len(kept) // 2)


def check_text(text: str, cfg: PrepareConfig, user_dict: dict | None = None) -> dict:
    """{"normalized", "phonemes", "notes": {flag: message}} for one transcript ("normalizer" holds
    the normalizer's warnings and is not a flag). `user_dict`: the pronunciation dictionary, whose words are read
    as it says (and not warned about)."""
    out = {"normalized": "", "phonemes": None, "notes": {}}
    notes = out["notes"]
    text = (text or "").strip()
    if not text:
        notes["missing_text"] = "no transcript (transcribe it, or exclude the row)"
        return out
    letters = [c for c in text if c.isalpha()]
    share = sum(map(is_ethiopic, letters)) / len(letters) if letters else 0.0
    if lost_letters(text):
        notes["non_ethiopic"] = ("the transcript is question marks where its letters were: the file was saved in a "
                                 "code page without Amharic letters (Excel's \"CSV (Comma delimited)\"). Save it "
                                 "again as \"CSV UTF-8\" (or Unicode Text) and prepare the dataset again")
    elif share < cfg.min_ethiopic:
        notes["non_ethiopic"] = ("the transcript is not written in Ethiopic script (fidel)" if share == 0 else
                                 f"only {share:.0%} of the letters are Ethiopic script") + \
            ": write what the clip says in Amharic letters (Save text), or exclude the row"
    try:
        from utils.text import normalize, phonemes_string
        from utils.text.normalize import LATIN_WORDS
        from utils.text.normalize import without_covered
        from utils.text.g2p import phonemize_normalized

        norm = normalize(text, user_dict or ())  # read as training and speaking read it: with the dictionary
        out["normalized"] = norm.text
        warnings = without_covered(norm.warnings, user_dict)
        removed = [w for w in warnings if str(w).startswith("Removed")]  # chars with no Amharic reading
        if removed:
            notes["unknown_chars"] = "; ".join(removed)
        said = [str(w) for w in warnings if w not in removed
                and not ("non_ethiopic" in notes and str(w).startswith(LATIN_WORDS))]  # one advice: write it in fidel
        if said:
            notes["normalizer"] = "normalizer: " + "; ".join(said)
        out["phonemes"] = phonemes_string(phonemize_normalized(norm.text, user_dict))
    except ImportError as exc:  # frontend missing entirely: a setup problem, not a data problem
        raise RuntimeError(f"the Amharic text frontend (utils.text) cannot be imported: {exc}") from exc
    except Exception as exc:
        notes["text_error"] = f"text frontend failed: {exc}"
        return out
    unknown = sorted({c for c in out["normalized"] if not is_ethiopic(c) and c not in READABLE_EXTRA
                      and not c.isspace() and not (c.isascii() and c.isalpha())})  # Latin: read by letter rules
    if unknown and "unknown_chars" not in notes:
        notes["unknown_chars"] = "characters the frontend cannot read: " + " ".join(repr(c) for c in unknown[:20])
    return out


def speaking_rate(row: dict) -> float | None:
    """Characters (no spaces) per second of the normalized text."""
    chars = len("".join((row.get("normalized") or "").split()))
    return chars / row["duration"] if chars and row.get("duration") else None


TEXT_FLAGS = ("missing_text", "non_ethiopic", "unknown_chars", "text_error", "normalizer")
TABLE_FLAGS = ("duplicate_audio", "duplicate_text", "rate_outlier")
# A shorter line ("ሰላም", "አመሰግናለሁ") is said again and again in any honest dataset; a whole sentence twice is more
# often a transcript pasted onto the wrong clip.
SAME_TEXT_MIN_WORDS = 3


def flags_of(notes: dict) -> list[str]:
    return [k for k in notes if k != "normalizer"]


def dataset_checks(rows: list[dict], cfg: PrepareConfig) -> None:
    """Flags that need the whole table: duplicate audio and transcripts, and speaking-rate outliers.
    Rows carry "notes" {flag: message}; updates notes and flags in place."""
    for r in rows:
        for flag in TABLE_FLAGS:
            r["notes"].pop(flag, None)
    first_by_sha: dict[str, str] = {}
    for r in rows:
        if not r.get("sha1"):  # not known (a table written by hand or by an older studio): equal to no other
            continue
        if r["sha1"] in first_by_sha:
            r["notes"]["duplicate_audio"] = f"same audio as {first_by_sha[r['sha1']]}"
        else:
            first_by_sha[r["sha1"]] = r["id"]
    mark_same_texts(rows)
    rates = [v for r in rows if (v := row_rate(r))]
    med = statistics.median(rates) if len(rates) >= 5 else None
    for r in rows:
        mark_rate(r, med, cfg)
        r["flags"] = flags_of(r["notes"])


def text_hash(text: str | None) -> int:
    """A transcript as a signed 64-bit number (blake2b): texts compared by reading an index of the table, not every
    row's JSON (a check or an edit at 200k rows). Spaces do not count: "ሰላም  ነው" typed with two is the same text."""
    words = " ".join((text or "").split())
    return int.from_bytes(hashlib.blake2b(words.encode("utf-8"), digest_size=8).digest(), "big", signed=True)


def same_text_key(row: dict) -> int | None:
    """text_hash of a transcript long enough that a second row with it is worth a look; None for a short one."""
    text = row.get("text") or ""
    return text_hash(text) if len(text.split()) >= SAME_TEXT_MIN_WORDS else None


def mark_same_texts(rows: list[dict]) -> None:
    """Note each row (in table order) whose transcript an earlier row has word for word. Not excluding: two takes of
    a sentence are fine, a transcript pasted onto the wrong clip is not, and only listening tells. A copy of the
    audio is left to duplicate_audio, which says more."""
    first: dict[int, str] = {}
    for r in rows:
        r.setdefault("notes", {}).pop("duplicate_text", None)
        key = same_text_key(r)
        if key is None:
            continue
        if key not in first:
            first[key] = r["id"]
        elif "duplicate_audio" not in r["notes"]:
            r["notes"]["duplicate_text"] = (f"the same transcript as {first[key]}: listen to both; if this clip says "
                                            "something else, type what it says and press Save text (two takes of "
                                            "one sentence are fine)")


NO_RATE = ("missing_text", "silent", "cut_short")  # no transcript, no speech, or part of it: a rate says nothing


def row_rate(row: dict) -> float | None:
    """The row's speaking rate, None for a row without a transcript or without (all) its speech (its notes say so, or
    its flags before any): a silent clip was also a rate outlier, two flags for one fault."""
    said = row.get("notes", row.get("flags") or ())
    return None if any(f in said for f in NO_RATE) else speaking_rate(row)


def mark_rate(row: dict, median: float | None, cfg: PrepareConfig) -> None:
    """Flag the row when its speaking rate is far from the dataset's median (None: too few rows to tell)."""
    row["notes"].pop("rate_outlier", None)
    v = row_rate(row)
    if median is not None and v and not median / cfg.rate_factor <= v <= median * cfg.rate_factor:
        row["notes"]["rate_outlier"] = f"{v:.1f} characters/s, the dataset's median is {median:.1f}"


def default_excluded(flags: list[str]) -> bool:
    return any(f in EXCLUDING_FLAGS for f in flags)


def describe_flag(flag: str) -> str:
    return FLAG_HELP.get(flag, flag)
