"""torch.compile of a model's parts, made so that it can never end a run, and with shapes chosen on purpose.

Why this module exists: the first GPU run of the studio died a minute in, inside Inductor, while it rebuilt a graph
for a new batch shape with symbolic sizes (`torch/_inductor/tiling_utils.py`, a dynamic recompile). Compilation is
an optimisation; a failure of it must cost speed, not a run. So:

- every compiled part runs through `GuardedCall`: whatever its compiled call raises (Inductor, Triton, a backend),
  the same call is redone eager. If eager raises too, the model itself is at fault and that error goes on; if eager
  works, compilation was the fault: every guarded part runs eager from then on and `on_failure` is told once (the
  engine logs it, and writes it into config.json's reasons and the run's status). Out-of-memory errors pass through
  untouched: the loop halves the micro-batch for those. A failure in the backward pass (whose graph Inductor
  builds at the first backward) is recognised by `is_compile_failure` and handled by the loop the same way.
- shapes are static (`dynamic=False`): Inductor's symbolic-size code paths, where the crash was, never run. The
  batches take their shapes from a small fixed set (utils/training/shapes.py), and the number of graphs is bounded
  (`MAX_GRAPHS` per part; a shape beyond it runs eager with dynamo's own warning).
- the bound is really per part: Dynamo counts a function's graphs on its code object, and `module._call_impl` is one
  code object for every module (two parts of one class shared one budget: the first used it up and the second ran
  eager). Each part is compiled through a function with a code object of its own (`own_code`).
- each graph is counted where it is built (the backend is wrapped): `on_building(part, shape)` is told as a graph
  starts compiling (the run's status says so), `on_graph(part, shape, seconds)` once the call that built it is over.
- `freeze()`: shapes a part has run compiled keep their graphs, a new one runs eager: near a time limit a graph
  that takes minutes to build would end the run minutes late (or cut it before its last evaluation).
"""
from __future__ import annotations

import contextlib
import time
import traceback
import types

import torch

from utils.training.failures import is_oom

OPTIONS: dict = {}  # extra torch.compile arguments: tests count compilations, or make them fail, with a backend
MAX_GRAPHS = 32     # graphs per compiled part (shapes); bench/compile_shapes.py counts what an epoch needs
COMPILER_PATHS = ("/torch/_inductor/", "/torch/_dynamo/", "/torch/_functorch/", "/triton/")


def options() -> dict:
    """Static shapes unless a caller (a test) says otherwise: no symbolic sizes, no surprise recompiles."""
    return {"dynamic": False, **OPTIONS}


def is_compile_failure(exc: BaseException) -> bool:
    """An error raised from inside the compiler stack (Dynamo, AOT autograd, Inductor, Triton), not from the model's
    own code run eagerly: the compiled backward is built at the first backward, outside any GuardedCall."""
    if isinstance(exc, torch.OutOfMemoryError):
        return False
    seen = exc
    while seen is not None:
        if type(seen).__module__.startswith(("torch._dynamo", "torch._inductor", "triton")):
            return True
        frames = traceback.extract_tb(seen.__traceback__)
        if any(p in f.filename.replace("\\", "/") for f in frames for p in COMPILER_PATHS):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def first_line(exc: BaseException) -> str:
    """What went wrong, in one line: the backend's own error where Dynamo wrapped it ("backend='inductor' raised:")."""
    exc = getattr(exc, "inner_exception", None) or exc
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


def own_code(module: torch.nn.Module, name: str):
    """A function that calls `module`, with a code object of its own (named after the part): Dynamo keeps its graphs,
    and counts them against the recompile limit, per code object."""
    def call(*args, **kwargs):
        return module._call_impl(*args, **kwargs)

    code = call.__code__.replace(co_name=f"compiled_{name.replace('.', '_')}")
    return types.FunctionType(code, call.__globals__, code.co_name, None, call.__closure__)


def shape_of(args: tuple) -> str:
    """The first tensor argument's shape, '16x100x704': what a part's graph is specialised on, for the log."""
    first = next((a for a in args if torch.is_tensor(a)), None)
    return "x".join(map(str, first.shape)) if first is not None else "-"


class GuardedCall:
    """A module's compiled `__call__` (module._compiled_call_impl) that falls back to eager instead of raising, and
    counts the graphs its backend builds."""

    def __init__(self, module: torch.nn.Module, name: str, group: "CompiledParts"):
        self.module, self.name, self.group = module, name, group
        self.graphs, self.shape = 0, "-"
        self.shapes: set[str] = set()  # input shapes this part ran compiled (their graphs are built)
        opts = options()
        backend = opts.pop("backend", "inductor")
        self.backend = torch._dynamo.lookup_backend(backend) if isinstance(backend, str) else backend
        self.compiled = torch.compile(own_code(module, name), backend=self.counting, **opts)

    def counting(self, graph, example_inputs):
        """The backend, told first: a graph of this part starts compiling."""
        self.graphs += 1
        self.group.on_building(self.name, self.shape)
        return self.backend(graph, example_inputs)

    def __call__(self, *args, **kwargs):
        if self.group.failure is None and not (self.group.frozen and shape_of(args) not in self.shapes):
            before, t0, self.shape = self.graphs, time.perf_counter(), shape_of(args)
            try:
                out = self.compiled(*args, **kwargs)
            except Exception as exc:
                if is_oom(exc):
                    raise
                out = self.module._call_impl(*args, **kwargs)  # the model's own error, if it has one, goes on
                self.group.failed(self.name, exc)
                return out
            self.shapes.add(self.shape)
            if self.graphs > before:
                self.group.on_graph(self.name, self.shape, time.perf_counter() - t0)
            return out
        return self.module._call_impl(*args, **kwargs)


def part_names(parts: list, modules: dict) -> list[str]:
    """'encoder', 'decoder.estimator', ...: each compiled part by its name in the adapter's modules, for the log."""
    names = {id(mod): name for root in modules.values() for name, mod in root.named_modules() if name}
    return [names.get(id(part), type(part).__name__) for part in parts]


class CompiledParts:
    """The compiled parts of one model: compiled in place (state_dict keys stay clean), failing together."""

    def __init__(self, modules: list, names: list[str] | None = None, on_failure=None, on_building=None,
                 on_graph=None):
        self.modules = list(modules)
        self.names = names or [type(m).__name__ for m in self.modules]
        self.on_failure = on_failure or (lambda name, exc: None)
        self.on_building = on_building or (lambda name, shape: None)  # a graph starts compiling
        self.on_graph = on_graph or (lambda name, shape, seconds: None)  # ... and the call that built it is over
        self.failure: str | None = None  # "<part>: <the exception's first line>" once compilation failed
        self.frozen = False  # True: no new graph is built; a shape not run compiled yet runs eager
        if self.modules:  # per code object, so per part (own_code)
            raise_limit("recompile_limit", "cache_size_limit", MAX_GRAPHS)
            raise_limit("accumulated_recompile_limit", "accumulated_cache_size_limit", MAX_GRAPHS)
        self.calls = [GuardedCall(module, name, self) for module, name in zip(self.modules, self.names)]
        for module, call in zip(self.modules, self.calls):
            module._compiled_call_impl = call

    def __len__(self) -> int:
        return 0 if self.failure else len(self.modules)

    def __bool__(self) -> bool:
        return bool(len(self))

    def __iter__(self):
        return iter(self.modules)

    def failed(self, name: str, exc: BaseException) -> None:
        """Compilation failed in `name`: every part runs eager from now on; said once."""
        if self.failure is not None:
            return
        self.failure = f"{name}: {first_line(exc)}"
        self.stop()
        self.on_failure(name, exc)

    def stop(self) -> None:
        """Every part runs eager from now on (a failure, or a budget spent)."""
        self.failure = self.failure or "stopped"
        for module in self.modules:
            module._compiled_call_impl = None

    def freeze(self) -> None:
        """No new graphs from now on: each part keeps those it built, and a shape it has not run compiled runs eager."""
        self.frozen = True

    def has_room(self, graphs_each: int) -> bool:
        """Whether every part may still build `graphs_each` more graphs (MAX_GRAPHS a part)."""
        return all(call.graphs + graphs_each <= MAX_GRAPHS for call in self.calls)

    def graphs(self) -> int:
        """Graphs compiled since these parts were set up (every shape and every graph break is one)."""
        return sum(call.graphs for call in self.calls)

    def graphs_by_part(self) -> dict[str, int]:
        return {call.name: call.graphs for call in self.calls}


def raise_limit(name: str, older_name: str, value: int) -> None:
    """Dynamo's limit on graphs a function may have, at least `value` (named cache_size_limit before torch 2.7;
    the requirements allow 2.5, and an unknown name is an AttributeError)."""
    config = torch._dynamo.config
    for key in (name, older_name):
        if hasattr(config, key):
            setattr(config, key, max(getattr(config, key), value))
            return


@contextlib.contextmanager
def eager(modules):
    """Run modules compiled in place without their compiled graphs for a while: evaluation and inference switch to
    eval mode and meet new lengths, each of which would be compiled again (minutes each on a small machine) for a
    few calls."""
    saved = [(mod, mod.__dict__.get("_compiled_call_impl")) for mod in modules]
    for mod, _ in saved:
        mod._compiled_call_impl = None
    try:
        yield
    finally:
        for mod, compiled in saved:
            mod._compiled_call_impl = compiled
