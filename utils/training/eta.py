"""How long a run has left: the steps left at the pace of recent steps, plus the evaluations left at the pace of those
done. A step that built a compiled graph is warm-up, paid once, and is left out: counted, a 143 s first step made a
20,000-step run say "ETA 794h24m", and the estimate stayed inflated for ~75 steps (issue 57)."""
from __future__ import annotations

import time
from collections import deque

RECENT_STEPS = 50  # the pace is that of the last RECENT_STEPS steps that compiled nothing


class Eta:
    def __init__(self, settings, deadline: float | None = None, evaluation_s: float | None = None):
        """`settings`: the run's LoopSettings (max_steps, eval_every, early_evals, eval_at_end); `deadline`: the
        time.time() its time budget ends training (then one evaluation and the save), None without one;
        `evaluation_s`: an evaluation's seconds in the run's earlier starts (a resume), until one is timed in this."""
        self.s, self.deadline, self.before = settings, deadline, evaluation_s
        self.steps: deque = deque(maxlen=RECENT_STEPS)
        self.evals: list[float] = []
        self.warm = False

    def step(self, seconds: float, compiled: bool) -> None:
        """A training step's seconds; `compiled`: it built a graph (not counted). The first step of a start is not
        counted either: it starts the data loaders and fills the caches (a 2-core CPU's first step said 1,490 s for a
        run that ended 189 s later)."""
        if self.warm and not compiled:
            self.steps.append(seconds)
        self.warm = True

    def evaluation(self, seconds: float) -> None:
        self.evals.append(seconds)

    def scored_start(self, seconds: float, times: int) -> None:
        """A fine-tune's score of its base before the first step: the evaluations ahead until one is timed, each
        scoring `times` sets of weights (an averaged and the raw one); without it a fresh run's ETA left every
        evaluation out until its first."""
        if self.before is None:
            self.before = seconds * times

    def evaluation_seconds(self) -> float | None:
        """An evaluation's seconds: the mean of this start's, else the earlier starts' (kept in status.json)."""
        return sum(self.evals) / len(self.evals) if self.evals else self.before

    def evaluations_left(self, step: int) -> int:
        """Evaluations after `step`: on schedule, the early ones, and the one at the end unless the last step has
        one. Counted, not listed: it is asked at every step of runs of 200,000 steps."""
        s, every = self.s, self.s.eval_every

        def scheduled(x: int) -> bool:
            return bool(every) and x % every == 0

        on_schedule = s.max_steps // every - step // every if every else 0
        early = {x for x in s.early_evals if step < x <= s.max_steps and not scheduled(x)}
        at_end = s.eval_at_end and step < s.max_steps and not scheduled(s.max_steps) and s.max_steps not in early
        return on_schedule + len(early) + int(at_end)

    def seconds(self, step: int, now: float | None = None) -> float | None:
        """Seconds left after `step`; None until a step that compiled nothing has been timed. A time budget that ends
        the run sooner caps it: the budget's rest and the end's one evaluation."""
        if not self.steps:
            return None
        evaluation = self.evaluation_seconds() or 0.0
        left = (self.s.max_steps - step) * sum(self.steps) / len(self.steps) + self.evaluations_left(step) * evaluation
        if self.deadline is not None:
            left = min(left, max(0.0, self.deadline - (time.time() if now is None else now)) + evaluation)
        return round(left, 1)
