"""Signals of every clip -> one suspicion score per clip, with the reason in plain words.

Each signal is compared with the rest of the dataset by a robust z-score (median and MAD, so the
damaged rows themselves do not move the yardstick). Only the direction that means "wrong transcript"
counts; the score is the root of the summed squares of those, so one strong sign or several weaker
ones both rise. The words come from the signals that stand out most.
"""
from __future__ import annotations

import math
import statistics

STANDS_OUT = 2.5  # robust z above which a signal is named as a reason
TOGETHER = 1.5  # a clip whose score stands out though no one signal does: the signals above this are named
# signal -> (direction that is suspicious, weight). Length counts both ways (text too long, or too short).
WEIGHTS = {"contrast": 1.0, "misfit": 0.5, "length_long": 1.0, "length_short": 1.0, "end_squeeze": 1.0, "start_squeeze": 0.7,
           "stretch": 0.7, "dur": 0.5, "cps": 0.5, "cer": 1.5}
WHERE = ("start", "middle", "end")


def robust_z(values: list[float]) -> list[float]:
    """(x - median) / (1.4826 * MAD); a floor on the spread keeps a near-constant signal from exploding."""
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values) * 1.4826
    spread = max(mad, 0.05 * abs(med), 1e-3)
    return [(v - med) / spread for v in values]


def _columns(signals: list[dict]) -> dict[str, list[float]]:
    """The signals as directional columns: bigger = more suspicious."""
    cols: dict[str, list[float]] = {}
    if "misfit" in signals[0]:
        cols["misfit"] = [s["misfit"] for s in signals]
        cols["contrast"] = [-s["contrast"] for s in signals]
        cols["length_long"] = [s["length"] for s in signals]
        cols["length_short"] = [-s["length"] for s in signals]
        for key in ("end_squeeze", "start_squeeze", "stretch", "dur"):
            cols[key] = [s[key] for s in signals]
    if all(s.get("cps") for s in signals):  # characters per second, both ways
        logs = [math.log(s["cps"]) for s in signals]
        med = statistics.median(logs)
        cols["cps"] = [abs(v - med) for v in logs]
    if all(s.get("cer") is not None for s in signals):
        cols["cer"] = [s["cer"] for s in signals]
    return cols


def score(signals: list[dict]) -> list[dict]:
    """signals: one dict per clip (keys from `signals.clip_signals`, plus "id", "cps", optional "cer").
    Returns [{"id", "score", "reason", "z": {signal: z}}] sorted from most to least suspicious."""
    if not signals:
        return []
    cols = _columns(signals)
    zs = {k: robust_z(v) for k, v in cols.items()}
    out = []
    for i, s in enumerate(signals):
        z = {k: round(zs[k][i], 2) for k in zs}
        out.append({"id": s["id"], "score": round(combined(z), 2), "reason": reason(s, z), "z": z})
    out.sort(key=lambda r: -r["score"])
    return out


def combined(z: dict[str, float]) -> float:
    """The suspicion score: the root of the summed squares of the weighted suspicious directions."""
    return math.sqrt(sum((WEIGHTS[k] * max(v, 0.0)) ** 2 for k, v in z.items()))


def reason(s: dict, z: dict[str, float]) -> str:
    """The signals that stand out for this clip, strongest first, in words a curator can act on. Several weaker
    ones can rank a clip high together (a swapped text that fits a little worse in every way): then those are said,
    as such, rather than "nothing stands out" on a clip the ranking puts near the top."""
    ranked = sorted(z.items(), key=lambda kv: -WEIGHTS[kv[0]] * kv[1])
    said = _said(s, [k for k, v in ranked if v >= STANDS_OUT])
    if said:
        return "; ".join(said[:3])
    weaker = _said(s, [k for k, v in ranked if v >= TOGETHER])
    if combined(z) >= STANDS_OUT and weaker:
        return "several weaker signs together: " + "; ".join(weaker[:2])
    return "nothing stands out"


def _said(s: dict, keys: list[str]) -> list[str]:
    return list(dict.fromkeys(w for w in (_words(k, s) for k in keys) if w))


def _words(key: str, s: dict) -> str:
    if key == "length_long":
        return "the text is much longer than the speech"
    if key == "length_short":
        return "the speech is much longer than the text: part of what is said is not written"
    if key == "cps":
        med = s.get("cps_median") or 0
        return ("the text is much longer than the speech" if s["cps"] > med
                else "the speech is much longer than the text: part of what is said is not written")
    if key == "end_squeeze":
        return "the end of the text is not heard"
    if key == "start_squeeze":
        return "the start of the text is not heard"
    if key == "stretch":
        return f"near the {WHERE[min(2, int(s['stretch_at'] * 3))]}, a long stretch of speech matches no text"
    if key == "contrast":
        return "the audio fits this text hardly better than other sentences of the dataset: it may be another clip's text"
    if key == "misfit":
        thirds = s["thirds"]
        if max(thirds) - min(thirds) > 0.5 * s["misfit"]:
            return f"the alignment is poor in the {WHERE[thirds.index(max(thirds))]}"
        return "the audio does not sound like this text anywhere (poor alignment throughout)"
    if key == "dur":
        return "the timing of the sounds is unlike the rest of the dataset"
    if key == "cer":
        return f"the speech recognizer hears something else ({s['cer']:.0%} of the characters differ)"
    return key
