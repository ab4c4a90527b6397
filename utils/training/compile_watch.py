"""What a training run says and decides about its compiled parts (utils/training/compiled.py).

- while a graph compiles (a minute or more, the step counter standing still), the run's status says "compiling graph
  k of ~n (part)", n being the run's batch shapes times its compiled parts; each graph built gets a log line with its
  part, input shape and seconds.
- a fallback that changes what the steps run (fp32 after mixed precision failed: every graph is specialised on the
  autocast state; smaller pieces after an out-of-memory: a new batch shape) makes the graphs built so far useless.
  They are built again where each part's budget (MAX_GRAPHS) has room for them, said in the log; else compiling
  stops, and config.json and the status say why. Before, the graphs were thrown away in silence, the budget was
  usually spent, and the rest of the run went eager while config.json still said `compile: true`.
- a compilation that fails is said once, and the run goes on uncompiled.
- near a time limit (max_minutes), once less time is left than a graph took to build in this run, no new graph is
  built: a new shape runs eager, and the run ends on time with its last evaluation.
"""
from __future__ import annotations

from utils.family_contract import optional
from utils.training import compiled


class CompileWatch:
    def __init__(self, loop, targets: list):
        """`loop`: the TrainingLoop (its log, files, machine, adapter, step); `targets`: the modules to compile."""
        self.loop, self.expected, self.logged = loop, None, 0
        self.graph_s: list[float] = []  # what each graph of this run took to build (its step's seconds, shared)
        self.parts = compiled.CompiledParts(targets, compiled.part_names(targets, loop.a.modules), self.failed,
                                            self.building, self.built)

    def shapes(self) -> int:
        """The run's batch shapes (its adapter's `batch_shapes`), 0 where unknown."""
        shapes = optional(self.loop.a, "batch_shapes")
        return (shapes() or 0) if shapes else 0

    def of_about(self) -> str:
        """' of ~n': the graphs this run should build in all, where known."""
        if self.expected is None:
            self.expected = self.shapes() * len(self.parts.modules)
        return f" of ~{max(self.expected, self.parts.graphs())}" if self.expected else ""

    def building(self, part: str, shape: str) -> None:
        self.loop.files.status(message=f"compiling graph {self.parts.graphs()}{self.of_about()} ({part})")

    def built(self, part: str, shape: str, seconds: float) -> None:
        self.loop.log(f"torch.compile: graph {self.parts.graphs()}{self.of_about()} built for the {part} (input "
                      f"{shape}) in {seconds:.1f} s")

    def step_done(self, graphs: int, seconds: float) -> None:
        """A step built `graphs` graphs in `seconds` (their backward passes' compilation included, which the log's
        lines leave out): the status goes back to training, and the adapter keeps what a graph cost."""
        loop = self.loop
        loop.files.status(message="training")
        self.graph_s += [seconds / graphs] * graphs
        if loop.dist.main and (keep := optional(loop.a, "graphs_built")):
            keep(graphs, seconds)

    def near_deadline(self, seconds_left: float) -> None:
        """Build no new graph once less time is left before the time limit than the slowest graph of this run took."""
        if not self.parts or self.parts.frozen or not self.graph_s or seconds_left >= max(self.graph_s):
            return
        self.parts.freeze()
        self.loop.log(f"torch.compile: {seconds_left:.0f} s are left before the time limit, less than a graph took "
                      f"to build here ({max(self.graph_s):.0f} s): a batch shape not compiled yet runs uncompiled")

    def so_far(self) -> str:
        """A line on the graphs built so far when there are new ones, else ''."""
        graphs = self.parts.graphs()
        if not self.parts or graphs == self.logged:
            return ""
        self.logged = graphs
        parts = ", ".join(f"{name} {n}" for name, n in self.parts.graphs_by_part().items())
        return (f"torch.compile: {graphs} graph(s) built so far ({parts}; static shapes; each part compiles at most "
                f"{compiled.MAX_GRAPHS}, later shapes run uncompiled)")

    def rebuild(self, why: str) -> None:
        """The steps now run something the graphs were not built for (`why`): build them again within each part's
        budget, or stop compiling."""
        if not self.parts:
            return
        shapes, used = self.shapes(), max(self.parts.graphs_by_part().values())
        if self.parts.has_room(shapes):
            self.of_about()  # what was expected before, then as many again
            self.expected += shapes * len(self.parts.modules)
            self.loop.log(f"torch.compile: {why}: the compiled graphs are built again, up to {shapes} a part "
                          f"({used} of the {compiled.MAX_GRAPHS} a part may build are used)")
            return
        self.parts.stop()
        self.off(f"compiling the model for speed (torch.compile) stopped at step {self.loop.step}: {why}, and "
                 f"building its {shapes} graph(s) a part again would pass the {compiled.MAX_GRAPHS} a part may build "
                 f"({used} used); the run continues uncompiled (slower, same results)")

    def failed(self, part: str, exc: BaseException) -> None:
        """torch.compile failed (CompiledParts redid the call eager): the run goes on uncompiled."""
        self.off(f"compiling the model for speed (torch.compile) failed at step {self.loop.step} in the {part} "
                 f"({compiled.first_line(exc)}); the step was redone without it and the run continues uncompiled "
                 "(slower, same results)")

    def off(self, note: str) -> None:
        """Compiling is over for this run: said once, in the log, config.json's reasons and the run's status."""
        loop = self.loop
        loop.m.set("compile", False, note)
        loop.files.status(compile_note=note, message="training")
        loop.log(f"warning: {note}", "warning")
        if loop.dist.main:
            loop.a.write_run_config()
