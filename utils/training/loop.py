"""The one training loop: every model (the Matcha acoustic model, the Vocos GAN vocoder) trains here.

Reads top to bottom like nanoGPT's train.py: run files and stop requests, the machine (device, precision,
compile, from utils.hardware via the adapter's Machine), the model the adapter builds, the measured batch
probe, resume, then the loop:

    for each step:   seed(seed, rank, step) -> lr -> the step's batches ->
                     for each phase (one optimizer: the acoustic model has one, the GAN two; a GAN step of
                     several micro-batches takes both phases per micro-batch, then both updates):
                         forward/backward of every micro-batch -> ranks agree nobody ran out of memory ->
                         average gradients (and the loss) -> unscale, clip -> finite on every rank? step : skip
                     -> EMA -> log -> evaluate the raw and the averaged weights (the better: best checkpoint)
                     -> checkpoint -> stop?

What is the same for every model lives here once: micro-batching and accumulation, out-of-memory recovery
agreed across ranks (the micro-batch halves, and grows back after a stretch of good steps), the non-finite
guard, agreed across ranks too (fp16 loss-scale calibration is not a failure; a run whose mixed precision keeps
failing goes on in fp32 from its last good weights, for good), atomic checkpoints with exact
resume (weights, optimizers, scaler, EMA, data position, the out-of-memory and non-finite counters; each rank's
noise is a function of (seed, rank, step)), data parallelism under torchrun (one flat gradient all-reduce per
phase, after the out-of-memory agreement), stop requests, heartbeat, metrics.jsonl / TensorBoard, evaluation
and best-checkpoint tracking.

What differs lives in an adapter (utils/matcha/adapter.py, utils/f5/adapter.py, utils/mms/adapter.py, utils/vocoder/training.py): how to build the
model and its data, its optimizers and phases, one micro-batch's losses, how to evaluate, what a checkpoint's
config.json says. What the loop asks of it, member by member, is the Protocol `TrainingAdapter` in
utils/family_contract.py (checked before the run starts); what it asks only of adapters that have it
(`forget_step`, `save_checkpoint`, the batch probe, ...) is that module's OPTIONAL, read through `optional`.
Test faults (out of memory, NaN, a save paused half-written) wrap the adapter (utils/training/faults.py);
nothing of them is in this loop.
"""
from __future__ import annotations

import functools
import math
import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch

from utils.events import Event, StudioError
from utils.family_contract import check_adapter, optional
from utils.jobs import TIME_BUDGET
from utils.training import checkpoint as ckpt
from utils.training import compiled, failures
from utils.training import ddp
from utils.training import optimization as opt
from utils.training.compile_watch import CompileWatch
from utils.training.eta import Eta
from utils.training.speed import run_dataset_time, say_time
from utils.training.probe import optimizer_state_ballast, probe_limit, probe_max_frames
from utils.training.runfiles import RunFiles, disk_full_message
from utils.training.words import plain, said
from utils.voice_folders import step_of
from utils.workspace import read_json, read_jsonl

# When this process began, in a process started to train (`python -m utils.training`: the Training tab's runs, a
# queued one, each torchrun rank): a start's time (metrics' start_s, said before the next Start) then counts Python's
# and torch's import too (1.75 s on this 2-core machine, more on Colab's first import). None where training is one
# thing among others (`app.py train` in the foreground, the tests): the loop's own start is taken.
PROCESS_STARTED: float | None = None


def started_to_train() -> None:
    """Say that this process was started to train (see PROCESS_STARTED)."""
    global PROCESS_STARTED
    import psutil

    PROCESS_STARTED = psutil.Process().create_time()


GROW_BACK_STEPS = 200  # good steps after an out-of-memory before a halved micro-batch is tried whole again
STATE_FORMAT = 2       # trainer_state.pt layout (1: the two trainers' own layouts, upgraded by the adapters)
# saved so that a resume keeps the grow-back timing and the count of non-finite steps in a row
COUNTERS = ("good_steps", "grow_after", "bad_steps")
# fp16 that does not train goes on in fp32 (TrainingLoop._on_skipped). Below a loss scale of 1 the scaler shrinks the
# gradients, and they still overflow: fp16's range cannot hold them (and small ones flush to zero)
FP16_MIN_SCALE = 1.0
SKIP_WINDOW, SKIP_MIN_SEEN = 20, 8  # after fp16's first update: half of the last 20 steps skipped (8 seen at least)


@dataclass
class LoopSettings:
    """The schedule of a run, in the loop's terms (each adapter maps its own config onto it)."""
    max_steps: int
    seed: int = 0
    resume: str = "auto"           # auto | none | a checkpoint folder
    log_every: int = 10
    eval_every: int = 0            # 0: only at the end
    checkpoint_every: int = 1000   # 0: only at evaluations and the end
    keep_checkpoints: int = 3
    max_bad_steps: int = 5
    ema_decay: float = 0.0         # 0: no averaged weights
    patience: int = 0              # evaluations without a better score before "overfitting"
    on_overfit: str = "warn"       # warn | stop
    eval_at_start: bool = False    # score the starting weights once (a fine-tune: the base's own score, the "before")
    eval_at_end: bool = True       # False: no evaluation at all (a throwaway run, e.g. the transcript check's aligner)
    early_evals: tuple = ()        # extra evaluations at these steps: the first samples come early
    save_untrained: bool = False   # a run stopped before its first step still leaves a checkpoint
    max_seconds: float = 0.0       # a time budget of this start: training ends there as finished (0: none)

    @classmethod
    def of_train_config(cls, cfg, ema_decay: float) -> "LoopSettings":
        """A TrainConfig run's schedule, read the same way by every text-to-speech family's adapter."""
        return cls(max_steps=cfg.max_steps, seed=cfg.seed, resume=cfg.resume, log_every=cfg.log_every,
                   eval_every=cfg.eval_every if cfg.evaluate else 0, checkpoint_every=cfg.checkpoint_every,
                   keep_checkpoints=cfg.keep_checkpoints, max_bad_steps=cfg.max_bad_steps, ema_decay=ema_decay,
                   patience=cfg.patience, on_overfit=cfg.on_overfit, eval_at_end=cfg.evaluate,
                   early_evals=opt.early_evaluations(cfg) if cfg.evaluate else (),
                   max_seconds=max(0.0, float(cfg.max_minutes or 0)) * 60,
                   # a fine-tune with a curve starts it at the base's own held-out score: one that makes the base
                   # worse is seen at its first evaluation (and said in the log, TrainingLoop._against_start)
                   eval_at_start=bool(cfg.init) and cfg.evaluate and bool(cfg.eval_every or opt.early_evaluations(cfg)))


@dataclass
class Phase:
    """One optimizer update inside a step: the GAN's discriminator, then its generator; the acoustic model's one."""
    name: str
    optimizer: torch.optim.Optimizer
    params: list
    clip: float = 0.0              # global norm clip; 0: measured only


@dataclass
class Context:
    """What the loop tells the adapter when it builds."""
    device: str
    dist: ddp.Dist
    log: Any
    resume_from: Path | None
    autocast: Any                  # () -> the mixed-precision context the machine chose


SIGNAL_WORDS = {signal.SIGTERM: "a stop signal: Stop pressed, or the process asked to end",
                signal.SIGINT: "Ctrl+C in the terminal"}  # in the run's message, which the Training tab shows


class StopRequest:
    """SIGTERM / SIGINT / runs/RUN/STOP / a caller's threading.Event: finish the step, save, exit cleanly."""

    def __init__(self, run_dir: Path, event: threading.Event | None = None):
        self.file = run_dir / "STOP"
        self.file.unlink(missing_ok=True)  # a request left from an earlier run does not stop this one
        self.event = event
        self.reason = ""
        self._previous = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._on_signal)

    def restore(self) -> None:
        """Give the signals back (in-process runs: the CLI, tests)."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum, frame):
        self.reason = SIGNAL_WORDS.get(signum, signal.Signals(signum).name)

    def __call__(self) -> bool:
        # the Stop button writes the STOP file, then sends SIGTERM (jobs.stop): the file names the cause the signal
        # cannot ("a stop signal: Stop pressed, or the process asked to end", for a press of Stop)
        if self.reason in ("", SIGNAL_WORDS[signal.SIGTERM]) and self.file.exists():
            self.reason = stop_asker(self.file)
        if not self.reason and self.event is not None and self.event.is_set():
            self.reason = "request"
        return bool(self.reason)


def stop_asker(request: Path) -> str:
    """Who wrote the STOP file (jobs.stop: the Stop button, or the command line's stop)."""
    try:
        said = request.read_text(encoding="utf-8").strip()
    except OSError:
        said = ""
    return "the Stop button" if said in ("", "stop requested from the UI") else said  # (the words before it said who)


def drain(events: Iterator[Event]) -> dict:
    """Run a training loop's generator to its end; its return value (the result dict)."""
    while True:
        try:
            next(events)
        except StopIteration as end:
            return end.value


def train(adapter, cfg, nan_phase: str | None = None) -> dict:
    """A family's run (or resume) to its end: {"state", "step", "last_checkpoint", "best_checkpoint", "message"}.
    The test faults a TrainConfig asks for (its fault_* fields) wrap the adapter, sized by its `padded_frames`
    (else its `size`); a run without them gets the adapter itself."""
    from utils.training.faults import with_faults

    measure = optional(adapter, "padded_frames") or adapter.size
    adapter = with_faults(adapter, cfg.fault_oom_above_frames, cfg.fault_oom_ranks, cfg.fault_nan_steps,
                          cfg.fault_pause_checkpoint_step, measure=measure, nan_phase=nan_phase)
    return drain(TrainingLoop(adapter).run())


class SkipWindow:
    """The steps fp16 skipped, telling a loss scale that is still finding its value from fp16 that does not train.
    The skips in a row from the run's first step are the calibration (a T4 starts at 65536 and halves the scale at
    each skip until the gradients fit) and never count. After the first update, a step skipped now and then is the
    scale trying a higher value; half of the last SKIP_WINDOW steps skipped is fp16 failing, even when the good
    steps between the failures keep the count of failures in a row at one."""

    def __init__(self, first_step: int):
        self.first_step, self.calibration, self.updated_from, self.skipped = first_step, 0, None, []

    def state_dict(self) -> dict:
        return {"first_step": self.first_step, "calibration": self.calibration, "updated_from": self.updated_from,
                "skipped": list(self.skipped)}

    @classmethod
    def restored(cls, state: dict | None, step: int) -> "SkipWindow":
        """The window a checkpoint kept: a resume neither takes a failing fp16 for a new calibration nor forgets the
        steps it skipped. An older checkpoint kept none: a window that starts at the resumed step."""
        window = cls(step)
        if state:
            window.first_step, window.calibration = state["first_step"], state["calibration"]
            window.updated_from, window.skipped = state["updated_from"], list(state["skipped"])
        return window

    def skip(self, at: int) -> str:
        """Step `at` was skipped: "K of the last N steps" when fp16 is not training, else ""."""
        if self.updated_from is None:
            if at == self.first_step + self.calibration:  # still skipping in a row from the first step
                self.calibration += 1
                return ""
            self.updated_from = self.first_step + self.calibration  # the first step that updated the weights
        start = max(self.updated_from, at + 1 - SKIP_WINDOW)
        self.skipped = [s for s in self.skipped if s >= start] + [at]
        seen = at + 1 - start
        failing = seen >= SKIP_MIN_SEEN and 2 * len(self.skipped) >= seen
        return f"{len(self.skipped)} of the last {seen} steps" if failing else ""


class TrainingLoop:
    def __init__(self, adapter, echo: bool = True):
        check_adapter(adapter)  # a member missing fails now, by name, not hours into a run
        self.a = adapter
        self.s: LoopSettings = adapter.settings
        self.m: opt.Machine = adapter.machine
        self.echo = echo
        self.pending: list[Event] = []

    # ------------------------------------------------------------------------------ the run
    def run(self) -> Iterator[Event]:
        """Train (or resume); yields progress events, returns {"state", "step", "message", "best_checkpoint",
        "best_mcd", "last_checkpoint"}."""
        run_dir = self.a.run_dir
        self.dist = ddp.setup(self.m.device)
        self.device = f"cuda:{self.dist.local_rank}" if self.m.device == "cuda" else self.m.device
        self.files = RunFiles(run_dir, enabled=self.dist.main, echo=self.echo)
        self.stop = StopRequest(run_dir, optional(self.a, "stop_event"))
        self.started = time.time()  # a time budget (max_seconds) counts from here: data, probe and warm-up included
        self.files.status(state="running", kind=self.a.kind, pid=os.getpid(), max_steps=self.s.max_steps,
                          eta_s=None, message="preparing data", started=time.time(),
                          **{"step": 0, "last_checkpoint": None, "best_checkpoint": None,
                             **self._kept_checkpoints(run_dir)})
        self.files.start_heartbeat()
        finished = False
        try:
            result = yield from self._run()
            finished = True
        except GeneratorExit:  # the caller stopped listening (a UI request ended): not a failure
            self.files.status(state="stopped", ended=time.time(), message="stopped by its caller")
            raise
        except BaseException as exc:
            self._record_failure(exc, run_dir)
        finally:
            self.stop.restore()
            if stop_data := optional(self.a, "stop_data"):
                stop_data()
            self.files.close()
            ddp.cleanup(self.dist, together=finished)
        return result

    def _kept_checkpoints(self, run_dir: Path) -> dict:
        """A resume keeps the best and last checkpoints its status named, where their folders are still there: the
        run list and the Inference picker show them until the next evaluation, not nothing; and the last one's step,
        which the resume goes on from (the page said "at step 0" of a run at step 150 until the model was built)."""
        if self.s.resume in ("none", "", None):
            return {}
        before = read_json(run_dir / "status.json", default={}) or {}
        kept = {}
        for key in ("best_checkpoint", "last_checkpoint"):
            folder = run_dir / "checkpoints" / Path(before.get(key) or "-").name  # the run folder may have moved
            if before.get(key) and folder.is_dir():
                kept[key] = str(folder)
        if "best_checkpoint" in kept and before.get("best_mcd") is not None:
            kept["best_mcd"] = before["best_mcd"]
        if (last := step_of(kept.get("last_checkpoint"))) is not None:
            kept["step"] = last
        return kept

    def _record_failure(self, exc: BaseException, run_dir: Path) -> None:
        full = disk_full_message(exc, run_dir, ckpt.step_folders(run_dir / "checkpoints"))
        message = full or f"{type(exc).__name__}: {exc}{failures.explain_failure(exc)}"
        try:
            self.files.status(state="failed", message=message[:2000], ended=time.time())
        except OSError:
            pass  # a full disk can refuse even this; the launcher then records the end from the exit code
        self.log(f"failed: {message}")
        if not self.dist.main:  # only rank 0 writes train.log; the rank that failed says why there too
            with open(run_dir / "train.log", "a", encoding="utf-8") as f:
                f.write(f"{time.strftime('%H:%M:%S')} failed (rank {self.dist.rank}): {message}\n")
        if full:
            raise StudioError(full) from exc
        raise exc

    def log(self, message: str, level: str = "info") -> None:
        self.files.info(message)
        self.pending.append(Event(self.a.kind, getattr(self, "step", 0), self.s.max_steps, message, level))

    def _events(self) -> Iterator[Event]:
        events, self.pending = self.pending, []
        yield from events

    # ------------------------------------------------------------------------------ set-up
    def _run(self) -> Iterator[Event]:
        a, s, m = self.a, self.s, self.m
        torch.manual_seed(s.seed)  # the same initial weights on every rank (rank 0's are broadcast anyway)
        opt.apply_backend_flags(m)  # TF32, cuDNN benchmark: process-wide switches, decided in the Machine
        checkpoints = a.run_dir / "checkpoints"
        if self.dist.main:
            for note in ckpt.recover(checkpoints):  # leftovers of a save cut short by a kill
                self.log(f"checkpoints: {note}")
        ddp.barrier(self.dist)  # the other ranks pick their resume point from what rank 0 recovered, not before it
        resume_from = ckpt.resume_point(s.resume, checkpoints)
        self.step = 0
        a.build(Context(self.device, self.dist, self.log, resume_from, lambda: opt.autocast(m)))
        check_adapter(a, built=True)
        yield from self._events()
        self.scaler = opt.grad_scaler(m)  # loss scaling for fp16 only
        self.split, self.lr_scale, self.bad_steps, self.good_lr_scale = 1, 1.0, 0, 1.0
        self.fallback = None  # {"from", "step", "why"} once mixed precision failed and the run went on in fp32
        self.winner = "ema" if s.ema_decay > 0 else "raw"  # whose weights checkpoints hold (decided at evaluations)
        # steps since the last out-of-memory, and how many a halved micro-batch waits before it grows back
        self.good_steps, self.grow_after = 0, GROW_BACK_STEPS // 2
        self.best = {"mcd": math.inf, "path": None, "since": 0}
        # the averaged weights exist before the probe, so that what it measures leaves room for them
        self.ema = ([p.detach().clone() for p in a.modules[a.inference].parameters()]
                    if s.ema_decay > 0 else None)
        if m.probe and not resume_from and optional(a, "probe_batch"):
            self._probe()  # a resumed run keeps its batch size (the data order depends on it)
        # after the probe: every probed size would be a new shape to compile
        targets = optional(a, "compile_targets", list)() if m.values.get("compile") else []
        self.watch = CompileWatch(self, targets)  # what the run says and decides about its graphs
        self.compiled = self.watch.parts
        for module in a.modules.values():  # every rank starts from rank 0's weights
            ddp.broadcast_parameters(module, self.dist)
        if self.ema is not None:  # ... and averages them from there
            torch._foreach_copy_(self.ema, [p.detach() for p in a.modules[a.inference].parameters()])
        self.fp16_skips = SkipWindow(0)  # whether fp16 trains or only calibrates (_on_skipped); a resume's goes on
        if resume_from:
            self._load_state(resume_from)
        self.splits_seen = {self.split}  # the out-of-memory pieces the compiled graphs were built for
        a.start_data(self.step)
        yield from self._describe()
        return (yield from self._loop(resume_from))

    def _probe(self) -> None:
        """The largest micro-batch that fits: real steps on batches of the longest items, then bisection. The
        optimizers' state (AdamW's two moments, made at their first step) is held as ballast meanwhile, and the
        EMA already exists: the probe measures what is left beside everything the run will hold. It tries no
        batch larger than the batch plan can use (hardware.largest_useful_micro_batch)."""
        a, m = self.a, self.m
        phase = a.phases[0]

        def try_frames(frames: int) -> None:
            losses = a.losses(a.probe_batch(frames), phase.name, -1)
            self.scaler.scale(losses["loss"]).backward()
            phase.optimizer.zero_grad(set_to_none=True)

        longest = a.probe_unit()
        limit = probe_limit(self.dist.world_size, getattr(optional(a, "cfg"), "probe_headroom", 1.0))
        if ceiling := optional(a, "probe_ceiling"):  # a budget the adapter never goes past: larger tries repeat it
            limit = min(limit, ceiling())
        self.probe_ballast = optimizer_state_ballast(a.optimizers.values(), self.device)
        try:
            fitted, _ = probe_max_frames(try_frames, min(m.max_frames_per_batch, limit), longest, limit=limit,
                                         cleanup=functools.partial(self._drop_step, phase), log=self.log)
        finally:
            self.probe_ballast = []
        # the smallest GPU's answer, agreed before any rank may refuse: a rank that fits nothing and raised alone
        # left the others in this all-reduce, and its words in its own log only
        a.apply_probe(ddp.min_int(fitted, self.dist, self.device), longest)
        if m.device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    def _load_state(self, folder: Path) -> None:
        state = self.a.upgrade_state(ckpt.load_trainer_state(folder), folder)
        for name, module_state in state["modules"].items():
            self.a.modules[name].load_state_dict(module_state)
        for name, opt_state in state["optimizers"].items():
            self.a.optimizers[name].load_state_dict(opt_state)
        if state.get("precision_fallback"):  # a run that went on in fp32 stays in fp32
            self._use_fp32(state["precision_fallback"], resumed=True)
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])  # a disabled scaler ignores it
        if self.ema is not None and state.get("ema"):
            for e, saved in zip(self.ema, state["ema"]):
                e.copy_(saved)
        self.step, self.split = int(state["step"]), state.get("split", 1)
        self.lr_scale = self.good_lr_scale = state.get("lr_scale", 1.0)
        for name in COUNTERS:  # older checkpoints have none: the values of a fresh start
            setattr(self, name, state.get(name, getattr(self, name)))
        self.best = {"since": 0, **state.get("best", self.best)}  # evaluations without a better score: patience
        self.fp16_skips = SkipWindow.restored(state.get("fp16_window"), self.step)
        self.winner = state.get("winner", self.winner)
        self.a.load_state_dict(state.get("adapter", {}))

    def _describe(self) -> Iterator[Event]:
        threads = torch.get_num_threads()  # on a CPU shared with other work, fewer run faster (bench/RESULTS.md)
        self.log(f"machine: {self.device}, {self.dist.world_size} process(es)"
                 + (f", {threads} CPU thread{'s' if threads > 1 else ''} each" if self.device == "cpu" else ""))
        for line in self.a.describe():
            self.log(f"  {line}")
        if self.dist.main:
            self.a.write_run_config()
        yield from self._events()

    # ------------------------------------------------------------------------------ the loop
    def _loop(self, resume_from: Path | None) -> Iterator[Event]:
        s, dist = self.s, self.dist
        self.files.status(message="compiling (the first steps build the model's graphs)" if self.compiled
                          else "training", step=self.step)
        self.log(f"training from step {self.step} to {s.max_steps}")
        if dist.main:  # what a start takes before its first step: said before the next Start (utils.runs.control)
            since = min(PROCESS_STARTED or self.started, self.started)
            self.files.metrics({"step": self.step, "start_s": round(time.time() - since, 2), "time": time.time()})
        if s.max_seconds:  # the curator's time limit (Colab: under the session's time left)
            self.log(f"time limit: training ends by {time.strftime('%H:%M', time.localtime(self.started + s.max_seconds))}"
                     f" ({s.max_seconds / 60:g} min after this start), then a last evaluation and a save")
        if resume_from:  # a finished run trained longer: its learning rate rises again, said rather than surprising
            self.log(f"learning rate goes on from {self.a.lr_at(self.step) * self.lr_scale:.3g} at step {self.step}: "
                     f"the cosine schedule of a {s.max_steps}-step run (a run trained longer climbs back to it), "
                     f"falling to its least at step {s.max_steps}")
        if self.compiled:  # nothing else reaches the log until the graphs are built
            self.log(f"compiling {len(self.compiled)} part(s) of the model with torch.compile: the first steps take "
                     "longer (minutes on a machine with few CPU cores); later steps run faster")
        start_step, self.last_saved, self.last_eval = self.step, (self.step if resume_from else -1), -1
        state, message, ended_by = "finished", "", None
        own = (read_json(self.a.run_dir / "status.json", {}) or {}).get("eval_s")  # this run's earlier starts'
        # else, unless a fine-tune times its own at step 0, as this dataset's earlier runs took one: a fresh run's
        # ETA left every evaluation out until its first (154 s said at step 100 of a run with 223 s left)
        earlier = None if own or (s.eval_at_start and self.step == 0) else run_dataset_time(
            self.a.run_dir, self.m.device, "eval_s")
        self.eta = Eta(s, deadline=self.started + s.max_seconds if s.max_seconds else None,
                       evaluation_s=own or earlier)
        self.start_score = None  # the base's own score before a fine-tune's first step (_against_start)
        if s.eval_at_start and self.step == 0 and dist.main:
            t0 = time.perf_counter()
            metrics = self._evaluate(0)
            self.eta.scored_start(time.perf_counter() - t0, times=1 if self.ema is None else 2)
            self.files.progress(eval_s=round(self.eta.evaluation_seconds(), 2))
            metrics.pop("mcd_per_clip", None)
            self.files.metrics({"step": 0, **metrics, "time": time.time()})
            self.log(f"before training: {_fmt(metrics)}")
            self.start_score = self.a.score(metrics)
        elif s.eval_at_start and dist.main:
            self.start_score = self._recorded_start_score()
        self.window = self._new_window()
        while self.step < s.max_steps:
            over = bool(s.max_seconds) and time.time() - self.started >= s.max_seconds
            if s.max_seconds and self.compiled:  # a graph built across the limit would end the run minutes late
                self.watch.near_deadline(self.started + s.max_seconds - time.time())
            stop, over = ddp.any_flags([self.stop(), over], dist, self.device)  # every rank ends before the same step
            if stop:
                state, message = "stopped", f"stopped by request ({self.stop.reason or 'another rank'}) at step {self.step}"
                break
            if over:  # a finished run: evaluated and saved at its end like one that trained every step
                ended_by, message = TIME_BUDGET, (f"finished at step {self.step} of {s.max_steps}: its time budget of "
                           f"{s.max_seconds / 60:g} min is spent (resume it to train on)")
                if self.step == start_step:  # nothing to evaluate: said, not a last evaluation promised and not made
                    message = (f"its time limit of {s.max_seconds / 60:g} min was spent before its first step "
                               f"(loading the data and the model took {time.time() - self.started:.0f} s): nothing "
                               "was trained; give it more minutes and start it again")
                break
            t0, graphs = time.perf_counter(), self.compiled.graphs()
            losses, grad_norms, skipped, overflow = self._step()
            self.step += 1
            built, seconds = self.compiled.graphs() - graphs, time.perf_counter() - t0
            self.eta.step(seconds, compiled=built > 0)  # a compiling step is warm-up: not the pace of the run
            if built:
                self.watch.step_done(built, seconds)
            if self.compiled and self.step == start_step + 1:
                self.log(f"first step took {seconds:.0f} s (compilation included)")
            if skipped and (message := self._on_skipped(skipped, overflow)):
                state = "failed"
                break
            self._record(losses, grad_norms, skipped)
            aside = time.perf_counter()  # evaluations and saves are not training: the speed's window skips them
            if self._evaluate_on_schedule() and s.on_overfit == "stop":
                message = (f"finished early at step {self.step}: held-out MCD has not improved for {s.patience} "
                           f"evaluations; the best checkpoint ({Path(self.best['path']).name if self.best['path'] else '-'}) "
                           "is the one to export")
                self.log(message)
                break
            if s.checkpoint_every and self.step % s.checkpoint_every == 0 and self.step != self.last_saved:
                self._save()
            self.window["t0"] += time.perf_counter() - aside
            yield from self._events()
        if state == "stopped":
            self.files.status(state="stopping", message=f"{message}: saving a checkpoint")
        return (yield from self._finish(state, message, start_step, ended_by))

    def _step(self) -> tuple[dict, dict, int, bool]:
        """One optimizer step of every phase; (losses, grad norms, phases skipped as non-finite, whether every
        skip had a finite loss: overflowing gradients only)."""
        a, m = self.a, self.m
        # each rank's noise and dropout are a function of (seed, rank, step): a resume, on any rank, continues
        # every rank's own stream exactly, with no generator state to save or hand between ranks
        torch.manual_seed(self.s.seed + 1_000_003 * self.dist.rank + 7919 * self.step)
        lr = a.lr_at(self.step) * self.lr_scale
        for optimizer in a.optimizers.values():
            for group in optimizer.param_groups:
                group["lr"] = lr
        self.window["lr"] = lr
        t_wait = time.perf_counter()
        batches = [a.next_batch() for _ in range(m.grad_accumulation)]  # the step's data, kept for a retry
        self.window["wait"] += time.perf_counter() - t_wait
        if self.split > 1 and self.good_steps >= self.grow_after:  # memory may have been a passing peak
            self.split //= 2
            self.good_steps = 0
            self.log(f"step {self.step}: {self.grow_after} steps without running out of memory: micro-batch doubled "
                     f"back (each batch now in {self.split} part{'s' if self.split > 1 else ''})")
            if self.split not in self.splits_seen:  # a resumed run's first whole batches
                self.splits_seen.add(self.split)
                self.watch.rebuild(f"batches are cut in {self.split} piece(s) again")
        losses, grad_norms, skipped, overflow = {}, {}, 0, True
        for group in self._phase_groups(batches):
            group_losses = self._accumulate(group, batches)
            for phase in group:
                phase_losses = group_losses[phase.name]
                grad_norms[phase.name], finite_loss, finite_grads = self._update(phase, phase_losses["loss"])
                skipped += not (finite_loss and finite_grads)
                overflow = overflow and finite_loss
                losses.update(phase_losses if len(a.phases) == 1 else
                              {k: v for k, v in phase_losses.items() if k != "loss"})
        self.scaler.update()  # fp16: halves the scale after an overflow, grows it slowly otherwise
        self.good_steps += 1
        if skipped == 0 and self.ema is not None:
            decay = opt.ema_decay_at(self.step, self.s)
            module = a.modules[a.inference]
            torch._foreach_lerp_(self.ema, [p.detach() for p in module.parameters()], 1.0 - decay)
        for b in batches:
            for k, v in a.counts(b).items():
                self.window["counts"][k] = self.window["counts"].get(k, 0) + v * self.dist.world_size
        if skipped == 0:  # summed on the device: float() here would make the CPU wait for the GPU every step
            for k, v in losses.items():
                self.window["losses"][k] = self.window["losses"].get(k, 0.0) + v
        return losses, grad_norms, skipped, overflow

    def _phase_groups(self, batches: list) -> list[list[Phase]]:
        """Which phases share one pass over the micro-batches. One micro-batch: each phase alone, in order (the
        GAN's generator meets the discriminator already updated, as in VITS and HiFi-GAN, and the generator's
        output is made once and kept between the phases). Several (accumulation, or a step split after running
        out of memory): every phase per micro-batch, updates after all of them, as finetune-hf-vits accumulates;
        phase by phase each micro-batch's generator output would be made twice, since keeping every one of them
        between the phases would hold the memory the split gave back."""
        phases = self.a.phases
        if len(phases) > 1 and len(batches) * self.split > 1:
            return [list(phases)]
        return [[phase] for phase in phases]

    def _accumulate(self, phases: list[Phase], batches: list) -> dict[str, dict]:
        """Forward and backward of every micro-batch for the given phases ({phase: its summed losses}); retried in
        smaller micro-batches when any rank runs out of memory. No micro-batch all-reduces by itself: a rank that
        ran out of memory would leave the others waiting in the all-reduce for ever, so the ranks first agree (one
        tiny all-reduce)."""
        a, accum = self.a, len(batches)
        while True:
            oom, totals = False, {phase.name: {} for phase in phases}
            # from zero: a guard for adapters whose loss reaches another phase's weights (the GAN freezes its
            # discriminators in the generator's phase, so it leaves none), and a retry's partial gradients
            for phase in phases:
                phase.optimizer.zero_grad(set_to_none=True)
            try:
                for b in batches:
                    size = a.size(b)
                    for piece in a.split(b, self.split):
                        weight = a.size(piece) / size / accum  # the micro-batch's share of the step
                        for phase in phases:
                            losses = a.losses(piece, phase.name, self.step)
                            self.scaler.scale(losses["loss"] * weight).backward()
                            total = totals[phase.name]
                            for k, v in losses.items():
                                total[k] = total.get(k, 0.0) + v.detach() * weight
            except Exception as exc:
                if self.compiled and not failures.is_oom(exc) and compiled.is_compile_failure(exc):  # the backward's build
                    self.compiled.failed("backward pass", exc)
                    totals = total = losses = piece = None
                    continue  # the same micro-batches again, eager: no rank needs to hear of it
                if not failures.is_oom(exc):
                    raise
                oom = True  # a flag, not the exception: its traceback holds the failed step's tensors
            stuck = oom and self.split >= max(a.size(b) for b in batches)
            any_oom, any_stuck = ddp.any_flags([oom, stuck], self.dist, self.device)
            if not any_oom:
                return totals
            totals = total = losses = piece = None  # the failed step's activations can be freed now
            self._drop_step(*phases)
            if any_stuck:
                raise StudioError(f"out of memory even with one {a.unit} per micro-batch at step {self.step}; "
                                  f"{a.oom_advice}")
            self.split, self.good_steps, self.grow_after = self.split * 2, 0, self.grow_after * 2
            where = "" if oom else " in another process"
            self.log(f"out of memory{where} at step {self.step}: micro-batch halved (each batch now in {self.split} "
                     f"parts), accumulation doubled to {accum * self.split} micro-steps per optimizer step; continuing")
            if self.split not in self.splits_seen:  # pieces of a size no graph was built for
                self.splits_seen.add(self.split)
                self.watch.rebuild(f"batches are cut in {self.split} pieces after running out of memory")

    def _drop_step(self, *phases: Phase) -> None:
        """Free what a step that ran out of memory holds, in this order: the adapter's tensors kept between phases
        (the GAN's generator output and its graph), the phases' partial gradients, then the CUDA cache, which can
        only hand back blocks no live tensor holds."""
        forget = optional(self.a, "forget_step")
        if forget is not None:
            forget()
        for phase in phases:
            phase.optimizer.zero_grad(set_to_none=True)
        if self.m.device == "cuda":
            torch.cuda.empty_cache()

    def _update(self, phase: Phase, loss: torch.Tensor) -> tuple[torch.Tensor, bool, bool]:
        """Average, unscale, clip, and step unless the loss or the gradients are not finite (then the weights and
        the optimizer state stay as they were). The loss is averaged over the ranks with the gradients, so one
        rank's non-finite loss makes every rank skip: ranks that decided apart would drift apart (or one would stop
        and leave the others waiting). The finite check is the phase's one wait for the GPU."""
        loss = ddp.average_gradients(phase.params, self.dist, loss)
        self.scaler.unscale_(phase.optimizer)  # true gradient values for clipping (no-op unless fp16)
        grad_norm = torch.nn.utils.clip_grad_norm_(phase.params, phase.clip if phase.clip > 0 else math.inf)
        finite_loss, finite_grads = torch.isfinite(torch.stack([loss.float(), grad_norm.float()])).tolist()
        if finite_loss and finite_grads:
            self.scaler.step(phase.optimizer)  # plain optimizer.step() unless fp16
        phase.optimizer.zero_grad(set_to_none=True)
        return grad_norm.detach(), finite_loss, finite_grads

    def _on_skipped(self, skipped: int, overflow: bool) -> str:
        """After a step with non-finite updates: lower the loss scale (fp16) or halve the learning rate; fp32 from
        here on when mixed precision is not training (too many steps in a row failed; in fp16 also a loss scale
        below FP16_MIN_SCALE, or half of the recent steps skipped: SkipWindow); a failure message when fp32 fails."""
        at = self.step - 1
        where = f" in {skipped} of the {len(self.a.phases)} updates" if len(self.a.phases) > 1 else ""
        # fp16: gradients that overflow under a finite loss are the scaler finding its scale (a T4 starts at
        # 65536), not a failing run; they are skipped without counting in a row
        calibrating = self.m.precision == "fp16" and overflow and self.scaler.get_scale() >= FP16_MIN_SCALE
        self.bad_steps += 0 if calibrating else 1
        fp16_failing = ""
        if self.m.precision == "fp16":
            self.log(f"step {at}: {'gradients overflowed' if calibrating else 'non-finite loss/gradients'}{where}, "
                     f"step skipped, loss scale lowered to {self.scaler.get_scale():g}")
            share = self.fp16_skips.skip(at)
            if self.scaler.get_scale() < FP16_MIN_SCALE:  # the gradients overflow fp16 even unscaled
                fp16_failing = f"non-finite loss or gradients in fp16 even with the loss scale below {FP16_MIN_SCALE:g}"
            elif share:  # failures between good steps: never many in a row, while the scale keeps halving
                fp16_failing = f"{share} had non-finite loss or gradients in fp16"
        else:
            self.lr_scale *= 0.5
            self.log(f"step {at}: non-finite loss/gradients{where}, step skipped, learning rate halved "
                     f"(x{self.lr_scale:g}); the weights were not touched")
        if self.bad_steps < self.s.max_bad_steps and not fp16_failing:
            return ""
        if self.m.precision != "fp32":  # fp16's range (or bf16's precision) is what fails: go on in fp32
            scale = f", loss scale down to {self.scaler.get_scale():g}" if self.m.precision == "fp16" else ""
            why = fp16_failing or (f"{self.bad_steps} steps in a row had non-finite loss or gradients in "
                                   f"{self.m.precision}")
            self._use_fp32({"from": self.m.precision, "step": self.step, "why": why + scale})
            return ""
        message = (f"stopped: {self.bad_steps} steps in a row had non-finite loss or gradients (step {self.step}). "
                   "The skipped updates never touched the weights, so the checkpoint holds the last good ones. "
                   "Lower the learning rate, use bf16/fp32, or check the data.")
        self.log(message)
        return message

    def _use_fp32(self, fallback: dict, resumed: bool = False) -> None:
        """Mixed precision kept failing: the run goes on in fp32 from its last good state (a skipped update never
        touched the weights or the optimizer's moments; the learning rate is put back to what it was before the
        failing steps halved it) instead of failing. Saved in every checkpoint: a resume stays in fp32."""
        self.fallback = dict(fallback)
        self.m.set("precision", "fp32", f"switched from {fallback['from']} at step {fallback['step']}: "
                   f"{fallback['why']}; the run goes on in fp32 (slower, but every number fits)")
        self.scaler = torch.amp.GradScaler(self.m.device if self.m.device in ("cuda", "cpu") else "cpu", enabled=False)
        if resumed:
            return
        self.bad_steps, self.lr_scale = 0, self.good_lr_scale
        note = (f"{fallback['why']} (step {fallback['step']}): continuing in fp32 from the last good weights; it is "
                "slower, and the run stays in fp32 from here on, also after a resume")
        self.files.status(precision_note=note)
        self.log(f"warning: {note}", "warning")
        self.watch.rebuild(f"the run went on in fp32 at step {fallback['step']}, and the graphs were built for "
                           f"{fallback['from']}")

    # ------------------------------------------------------------------------------ bookkeeping
    def _new_window(self) -> dict:
        return {"t0": time.perf_counter(), "wait": 0.0, "counts": {}, "steps": 0, "losses": {}, "lr": 0.0}

    def _record(self, losses: dict, grad_norms: dict, skipped: int) -> None:
        """metrics.jsonl every log_every steps (the only host syncs), progress for the heartbeat every step."""
        w, s = self.window, self.s
        self.bad_steps = self.bad_steps if skipped else 0
        self.good_lr_scale = self.good_lr_scale if skipped else self.lr_scale  # before a run of bad steps
        w["steps"] += 0 if skipped else 1
        if self.step % s.log_every == 0 or self.step == s.max_steps:
            # status.json first, now: the page reads the step there and in metrics.jsonl, and a heartbeat's status
            # behind the row said "at step 82" above a summary at step 90
            left = self.eta.seconds(self.step)
            self.files.status(step=self.step, eta_s=left, **self.a.progress())
            elapsed, good = time.perf_counter() - w["t0"], max(1, w["steps"])
            norms = ({"grad_norm": float(v) for v in grad_norms.values()} if len(grad_norms) == 1 else
                     {f"grad_norm_{k}": float(v) for k, v in grad_norms.items()})
            row = {"step": self.step, **self.a.progress(), **{k: float(v) / good for k, v in w["losses"].items()},
                   "lr": w["lr"], **norms, **{f"{k}_per_s": v / elapsed for k, v in w["counts"].items()},
                   "data_wait": w["wait"] / elapsed,
                   "loss_scale": self.scaler.get_scale() if self.scaler.is_enabled() else 1.0, "time": time.time(),
                   **_memory(self.m.device)}
            self.files.metrics(row)
            shown = ", ".join(f"{plain(k)} {row[k]:.3f}" for k in sorted(w["losses"], key=lambda k: k != "loss"))
            update = ", ".join(f"{plain(k)} {v:.2f}" for k, v in norms.items())
            self.log(f"step {self.step}/{s.max_steps}: errors (lower is better) {shown}; {plain('lr')} "
                     f"{w['lr']:.2e}; {update}; {row.get('samples_per_s', 0):.1f} clips a second; "
                     f"{row['data_wait']:.0%} of the time waiting for data"
                     + (f"; about {say_time(left)} left" if (left or 0) >= 1 and self.step < s.max_steps else ""))
            self.window = self._new_window()
            if line := self.watch.so_far():
                self.log(line)
        else:  # the heartbeat writes it; steps that compiled are not in the ETA, evaluations are
            self.files.progress(step=self.step, eta_s=self.eta.seconds(self.step), **self.a.progress())

    def _evaluate_on_schedule(self) -> bool:
        """Evaluate and save at eval_every (rank 0; the others wait). True on every rank when held-out quality
        has stopped improving for `patience` evaluations."""
        if not ((self.s.eval_every and self.step % self.s.eval_every == 0) or self.step in self.s.early_evals):
            return False
        t0 = time.perf_counter()
        self._check_ranks_agree()
        overfit = self._evaluate_and_save() if self.dist.main else False
        self.last_eval = self.last_saved = self.step
        ddp.barrier(self.dist)
        self.eta.evaluation(time.perf_counter() - t0)
        self.files.progress(eval_s=round(self.eta.evaluation_seconds(), 2))  # a resume's ETA counts it from its start
        return ddp.any_flag(overfit, self.dist, self.device)

    def _evaluate(self, step: int) -> dict:
        """The adapter's evaluation of the raw weights and, when there is an average, of the averaged (EMA) ones: an
        average lags on a short fine-tune and leads on a long one, so both are scored and the better one wins. Its
        metrics are the evaluation's ("mcd", samples in samples/step-N, the checkpoint's weights); both scores are
        kept ("mcd_ema", "mcd_raw"), and the other's samples in samples/step-N/<ema|raw>."""
        samples = self.a.run_dir / "samples" / f"step-{step}"
        if self.ema is None or step == 0:  # at step 0 the average is the weights themselves
            self.winner = "ema" if self.ema is not None else "raw"
            return self._evaluate_weights(step, samples, averaged=self.ema is not None)
        scored = {kind: self._evaluate_weights(step, samples / kind, averaged=kind == "ema") for kind in ("ema", "raw")}
        self.winner = min(scored, key=lambda kind: self.a.score(scored[kind]))
        for wav in (samples / self.winner).glob("*.wav"):  # the winner's samples are the step's
            wav.replace(samples / wav.name)
        shutil.rmtree(samples / self.winner, ignore_errors=True)
        both = {f"{key}_{kind}": scored[kind][key] for kind in scored for key in ("mcd", "cer") if key in scored[kind]}
        return {**scored[self.winner], **both, "weights": self.winner}

    def _evaluate_weights(self, step: int, samples: Path, averaged: bool) -> dict:
        """The adapter's evaluation with the averaged weights swapped in (`averaged`) or the raw ones as they are."""
        module = self.a.modules[self.a.inference]
        raw = None
        if averaged:
            raw = [p.detach().clone() for p in module.parameters()]
            for p, e in zip(module.parameters(), self.ema):
                p.data.copy_(e)
        try:  # eager: eval mode and synthesis lengths would each compile the graphs again, for a few calls
            with compiled.eager(self.compiled):
                return self.a.evaluate(step, samples)
        finally:
            if raw is not None:
                for p, r in zip(module.parameters(), raw):
                    p.data.copy_(r)

    def _evaluate_and_save(self) -> bool:
        """Evaluate, save, mark the best checkpoint. True when the score has not improved for `patience`
        evaluations: the model is learning its training clips rather than the voice (overfitting)."""
        step, best, t0 = self.step, self.best, time.perf_counter()
        metrics = self._evaluate(step)
        per_clip = metrics.pop("mcd_per_clip", [])
        score = self.a.score(metrics)
        improved = score < best["mcd"]
        if improved:
            best.update(mcd=score, path=str(self.a.run_dir / "checkpoints" / f"step-{step}"), since=0)
        else:
            best["since"] = best.get("since", 0) + 1
        folder = self._write_checkpoint(step)
        if improved:
            self.files.status(best_checkpoint=str(folder), best_mcd=score, overfitting=None)
        self.files.metrics({"step": step, **metrics, "eval_s": time.perf_counter() - t0, "time": time.time()})
        clips = f"; each held-out clip {', '.join(f'{x:.2f}' for x in per_clip)} dB" if per_clip else ""
        self.log(f"eval step {step}: {_fmt(metrics)}{clips}; best so far {best['mcd']:.2f} dB (lower is better)")
        self._against_start(step, score)
        if not self.s.patience or best["since"] < self.s.patience:
            return False
        note = (f"Held-out MCD has not improved for {best['since']} evaluations (best {best['mcd']:.2f} dB at "
                f"{Path(best['path']).name}): the model is learning the training clips by heart (overfitting), so more "
                "steps will not make the voice better. The best checkpoint stays marked and is what export uses.")
        self.files.status(overfitting=note)
        self.log(f"warning: {note}")
        return True

    def _recorded_start_score(self) -> float | None:
        """A resumed fine-tune's base score, as its first part recorded it at step 0: a resume compared with nothing,
        and a fine-tune made worse than its base after a Stop and Resume went unnamed."""
        path = self.a.run_dir / "metrics.jsonl"
        for row in (r for r in read_jsonl(path) if r.get("step") == 0) if path.is_file() else ():
            try:  # the evaluation's row: step 0 also has the start's time (start_s), which holds no score
                return float(self.a.score(row))
            except (KeyError, TypeError, ValueError):  # a row of another layout: nothing to compare with, as before
                continue
        return None

    def _against_start(self, step: int, score: float) -> None:
        """A fine-tune scored worse than its base before training (step 0) is named in the log and on the run's
        line, at the evaluation that shows it; a later evaluation better than the base takes the note away."""
        start = self.start_score
        if start is None:
            return
        if score <= start:
            self.files.status(start_note=None)
            return
        note = (f"held-out MCD {score:.2f} dB at step {step} is worse than the base's own {start:.2f} dB before "
                "fine-tuning: this fine-tune has made the base worse so far (a learning rate too high for it, or "
                "data far from what it knew); the base's score is the curve's first point at step 0")
        self.files.status(start_note=note)
        self.log(f"warning: {note}", "warning")

    # ------------------------------------------------------------------------------ checkpoints
    def _save(self) -> None:
        """Checkpoint (rank 0 writes, the others wait)."""
        self._check_ranks_agree()
        if self.dist.main:
            self._write_checkpoint(self.step)
        ddp.barrier(self.dist)
        self.last_saved = self.step

    def _check_ranks_agree(self) -> None:
        """Averaged gradients and one seed keep the ranks' weights identical; a drift would be a bug: say so
        rather than save a mix (one all-reduce per save, on every rank)."""
        dist = self.dist
        if not dist.enabled:
            return
        checksum = float(sum(p.detach().double().sum() for mod in self.a.modules.values() for p in mod.parameters()))
        if not ddp.same_on_all_ranks(checksum, dist, self.device):
            raise StudioError(f"The {dist.world_size} processes' weights differ at step {self.step}: stopping rather "
                              "than saving a mix. Please report this with the run's train.log.")
        self.log(f"weights identical on all {dist.world_size} processes at step {self.step}")

    def _write_checkpoint(self, step: int) -> Path:
        a = self.a
        weights = dict(a.modules[a.inference].state_dict())
        if self.ema is not None and self.winner == "ema":  # the weights the last evaluation found better
            for (name, _), e in zip(a.modules[a.inference].named_parameters(), self.ema):
                weights[name] = e
        weights.update(optional(a, "extra_weights", dict)())  # tensors inference needs beside the model (F5's prompt)
        trainer_state = {
            "format": STATE_FORMAT, "step": step, "split": self.split, "lr_scale": self.lr_scale,
            **{name: getattr(self, name) for name in COUNTERS},
            "best": dict(self.best), "fp16_window": self.fp16_skips.state_dict(),
            "modules": {name: mod.state_dict() for name, mod in a.modules.items()},
            "optimizers": {name: o.state_dict() for name, o in a.optimizers.items()},
            "scaler": self.scaler.state_dict(), "ema": self.ema, "adapter": a.state_dict(),
            "precision_fallback": self.fallback, "winner": self.winner,
        }
        if optional(a, "state_newest_only", False) and (note := ckpt.make_room(a.run_dir / "checkpoints")):
            self.log(note, "warning")
        save = optional(a, "save_checkpoint", ckpt.save_checkpoint)
        folder = save(a.run_dir / "checkpoints" / f"step-{step}", weights, a.checkpoint_config(step), trainer_state)
        ckpt.prune(a.run_dir / "checkpoints", self.s.keep_checkpoints,
                   {Path(self.best["path"])} if self.best["path"] else set(),
                   state_newest_only=optional(a, "state_newest_only", False))  # large models: one resumable copy
        self.files.status(last_checkpoint=str(folder))
        return folder

    def _finish(self, state: str, message: str, start_step: int, ended_by: str | None = None) -> Iterator[Event]:
        """The end: evaluate a finished run (unless it just did), save where we are, write the final status.
        `ended_by`: TIME_BUDGET for a run finished before its last step by its time budget (Resume trains on)."""
        s, step = self.s, self.step
        evaluate = s.eval_at_end and state == "finished" and step > start_step and self.last_eval != step
        save = evaluate or (step != self.last_saved and (step > 0 or s.save_untrained))  # a probe saves nothing
        if save:  # the same decision on every rank: each takes part in the check
            self._check_ranks_agree()
            if self.dist.main:
                self._evaluate_and_save() if evaluate else self._write_checkpoint(step)
            ddp.barrier(self.dist)
        message = message or f"finished {step} steps"
        last = ckpt.step_folders(self.a.run_dir / "checkpoints")
        if self.dist.main:
            self.files.status(state=state, step=step, eta_s=0, message=message, ended=time.time(), ended_by=ended_by,
                              best_checkpoint=self.best["path"], last_checkpoint=str(last[-1][1]) if last else None)
        self.log(message)
        yield from self._events()
        return {"state": state, "step": step, "message": message, "best_checkpoint": self.best["path"],
                "best_mcd": self.best["mcd"], "last_checkpoint": str(last[-1][1]) if last else None}


def _fmt(metrics: dict) -> str:
    """An evaluation's measures in words with their units (utils/training/words.py)."""
    return ", ".join(said(k, v) for k, v in metrics.items() if k not in ("step", "time"))


def _memory(device: str) -> dict:
    """torch's allocator view of this process, plus NVML's (what nvidia-smi shows) and GPU utilization."""
    if device != "cuda":
        return {}
    from utils.hardware import pci_bus_id, process_gpu_usage

    g = 2 ** 30
    index = torch.cuda.current_device()
    physical = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[index:index + 1]
    nvml_index = int(physical[0]) if physical and physical[0].strip().isdigit() else index
    return {"gpu_mem_allocated_gb": torch.cuda.memory_allocated() / g,
            "gpu_mem_reserved_gb": torch.cuda.memory_reserved() / g,
            "gpu_mem_peak_gb": torch.cuda.max_memory_allocated() / g,
            **process_gpu_usage(os.getpid(), nvml_index, pci_bus_id(index))}
