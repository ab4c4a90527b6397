"""SubRip (.srt) and WebVTT (.vtt) cues: (start s, end s, text)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from utils.events import StudioError

_TIME = r"(?:(\d+):)?(\d{1,2}):(\d{2})[.,](\d{1,3})"
_CUE_RE = re.compile(_TIME + r"\s*-->\s*" + _TIME)
_TAG_RE = re.compile(r"<[^>]+>|\{\\[^}]*\}")


@dataclass(frozen=True)
class Cue:
    start: float
    end: float
    text: str


def _seconds(h, m, s, ms) -> float:
    return int(h or 0) * 3600 + int(m) * 60 + int(s) + int(ms.ljust(3, "0")) / 1000


def read_text_file(path: Path) -> str:
    """Transcript-like text in UTF-8 (with or without BOM) or UTF-16 (with BOM)."""
    raw = Path(path).read_bytes()
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return raw.decode("utf-16")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise StudioError(f"{Path(path).name}: not UTF-8 or UTF-16 text ({exc.reason} at byte {exc.start}); "
                          "save it as UTF-8.") from exc


def parse_subtitles(path: Path) -> list[Cue]:
    """Parse cues; blocks without a time line (numbers, WEBVTT header, NOTE) are skipped."""
    text = read_text_file(path).replace("\r\n", "\n").replace("\r", "\n")
    cues = []
    for block in re.split(r"\n\s*\n", text):
        lines = [l.strip() for l in block.strip().split("\n")]
        for i, line in enumerate(lines):
            m = _CUE_RE.search(line)
            if m:
                start, end = _seconds(*m.groups()[:4]), _seconds(*m.groups()[4:])
                words = " ".join(_TAG_RE.sub("", l) for l in lines[i + 1:] if l).strip()
                if end > start and words:
                    cues.append(Cue(start, end, words))
                break
    if not cues:
        raise StudioError(f"{Path(path).name}: no subtitle cues found (expected lines like "
                          "'00:00:01,000 --> 00:00:03,500' followed by text).")
    return sorted(cues, key=lambda c: c.start)
