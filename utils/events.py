"""Progress events and user-facing errors shared by every service.

Long work is a generator of `Event`s; the UI maps them to a progress bar and a log box, the CLI
prints them. The last event of a successful run carries the result.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator


class StudioError(Exception):
    """A problem with the user's input or setup. The message names the file or row and what to do."""


def plain_text(markdown: str) -> str:
    """A message written for a Markdown box as a toast or a terminal shows it: they print text as it is, so `**`,
    backticks, `*emphasis*` and [links](...) would show as typed. The words stay; only the marks go."""
    import re

    text = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", markdown)  # [words](address) -> words
    text = re.sub(r"^#+\s*", "", text, flags=re.M)  # headings
    text = text.replace("**", "").replace("__", "").replace("`", "")
    return re.sub(r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])", r"\1", text)  # *emphasis*, not 2 * 3


@dataclass
class Event:
    stage: str
    done: int = 0
    total: int = 0
    message: str = ""
    level: str = "info"  # info | warning | error
    result: Any = field(default=None, repr=False)

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 0.0

    def format(self) -> str:
        count = f" [{self.done}/{self.total}]" if self.total else ""
        prefix = "" if self.level == "info" else f"{self.level.upper()}: "
        return f"{prefix}{self.stage}{count} {self.message}".rstrip()


def run_to_end(events: Iterable[Event], printer=None) -> Any:
    """Drain an event generator (optionally printing each event) and return the last result."""
    result = None
    for event in events:
        if printer is not None:
            printer(event.format())
        if event.result is not None:
            result = event.result
    return result


def last_result(events: Iterator[Event]) -> Any:
    return run_to_end(events)


def time_left(done: float, total: float, started: float) -> str | None:
    """The time the rest of a long job takes at its pace so far, said ("12 min"): `done` of `total` (clips, or
    seconds of audio) since time.perf_counter() read `started`; None when nothing is done yet or nothing is left."""
    if done <= 0 or done >= total:
        return None
    return say_duration((total - done) * (time.perf_counter() - started) / done)


class Countdown:
    """The time left of a long job said so that it does not jump at every line: between two readings it counts down
    with the clock, and takes the pace so far again only once that is off by more than `slack` (a fraction). Said
    from the pace alone, a check's estimate went 3, 5, 4, 8 min while the machine's other work came and went.
    `start`: the count the pace is measured from (the first step seen); `clock`: time.perf_counter's kind."""

    def __init__(self, total: float, start: float = 0.0, clock=time.perf_counter, slack: float = 0.3):
        self.total, self.start, self.clock, self.slack = total, start, clock, slack
        self.t0, self.said = clock(), None  # said: (seconds left, when said)

    def left(self, done: float) -> str | None:
        now = self.clock()
        if done <= self.start or done >= self.total:
            return None
        paced = (self.total - done) * (now - self.t0) / (done - self.start)
        counted = self.said[0] - (now - self.said[1]) if self.said else None
        if counted is None or counted <= 0 or abs(paced - counted) > self.slack * counted:
            self.said, counted = (paced, now), paced
        return say_duration(counted)


def say_duration(seconds: float) -> str:
    """How long, as progress messages say it: seconds up to a minute and a half, then minutes, then hours."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 90 * 60 else f"{seconds / 3600:.1f} h"
