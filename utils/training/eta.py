"""How long a run has left: the steps left at the pace of recent steps, plus the evaluations left at the pace of those
done. A step that built a compiled graph is warm-up, paid once, and is left out: counted, a 143 s first step made a
20,000-step run say "ETA 794h24m", and the estimate stayed inflated for ~75 steps (issue 57)."""
from __future__ import annotations

from collections import deque

RECENT_STEPS = 50  # the pace is that of the last RECENT_STEPS steps that compiled nothing


class Eta:
    def __init__(self, settings):
        """`settings`: the run's LoopSettings (max_steps, eval_every, early_evals, eval_at_end)."""
        self.s = settings
        self.steps: deque = deque(maxlen=RECENT_STEPS)
        self.evals: list[float] = []

    def step(self, seconds: float, compiled: bool) -> None:
        """A training step's seconds; `compiled`: it built a graph (not counted)."""
        if not compiled:
            self.steps.append(seconds)

    def evaluation(self, seconds: float) -> None:
        self.evals.append(seconds)

    def evaluations_left(self, step: int) -> int:
        """Evaluations after `step`: on schedule, the early ones, and the one at the end unless the last step has
        one."""
        s = self.s
        scheduled = {x for x in range(step + 1, s.max_steps + 1) if s.eval_every and x % s.eval_every == 0}
        scheduled |= {x for x in s.early_evals if step < x <= s.max_steps}
        return len(scheduled) + (s.eval_at_end and s.max_steps not in scheduled and step < s.max_steps)

    def seconds(self, step: int) -> float | None:
        """Seconds left after `step`; None until a step that compiled nothing has been timed."""
        if not self.steps:
            return None
        left = (self.s.max_steps - step) * sum(self.steps) / len(self.steps)
        if self.evals:
            left += self.evaluations_left(step) * sum(self.evals) / len(self.evals)
        return round(left, 1)
