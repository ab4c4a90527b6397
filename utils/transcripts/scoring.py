"""The transcript-error finder: rank a dataset's (audio, transcript) pairs from most to least suspicious.

    from utils.events import run_to_end
    result = run_to_end(check_transcripts(ws, "my-voice"), printer=print)
    result["rows"][0]   # {"id", "score", "reason", ...}: the row to listen to first

Method "alignment" (works offline, on a CPU): train the tiny acoustic model briefly on the dataset
on the training engine, without its evaluation (run `<dataset>-transcript-check`), then let its aligner lay each
transcript over its audio (`signals.py`). The aligner and each clip's result are kept: a check cut off goes on
from there, and a check after a few texts were fixed aligns only the clips that changed. `cancel_check` stops a
running check from any page or process. Method "asr" transcribes the clips with the workspace's
speech recognizer and compares. "auto" uses the alignment, and the recognizer too when one is here.
The ranking is written to datasets/<name>/transcript_check.json (the Dataset tab's review list).
"""
from __future__ import annotations

import contextlib
import math
import shutil
import time
from pathlib import Path
from typing import Iterator

import numpy as np

from utils import hardware
from utils.events import Event, StudioError
from utils.jobs import check_run
from utils.workspace import Workspace, atomic_write_json, read_json

STAGE = "check"
METHODS = ("auto", "alignment", "asr")
CHECK_FILE = "transcript_check.json"
FRAMES_PER_BATCH = 2000  # mel frames per training batch on a CPU (about 20 s of audio)
MIN_STEPS, MAX_STEPS = 600, 1000  # a short training: enough for the aligner to know the sounds, not the clips


def check_path(ws: Workspace, dataset: str) -> Path:
    return ws.dataset_dir(dataset) / CHECK_FILE


def plan_steps(frames: list[int]) -> int:
    """About 60 passes over a small dataset, at least 600 steps of the aligner (fewer leave the sounds too blurred to
    tell one sentence from another, more learn the clips themselves: bench/RESULTS.md), capped: a large dataset
    teaches them in under one pass."""
    batches = max(1, math.ceil(sum(frames) / (0.8 * FRAMES_PER_BATCH)))
    return int(min(MAX_STEPS, max(MIN_STEPS, 60 * batches)))


CHECKED_KEYS = ("id", "audio", "sha1", "text", "normalized", "phonemes", "duration", "speaker", "excluded")  # what a
# check reads of a row: a 200k-row dataset's notes and measurements stay on disk


def candidate_rows(ws: Workspace, dataset: str) -> tuple[list[dict], list[dict]]:
    """(rows to score, rows left out with why): excluded rows and rows without text are not ranked."""
    from utils.datasets import load_manifest

    rows, skipped = [], []
    for r in load_manifest(ws, dataset, keys=CHECKED_KEYS):
        if r.get("excluded"):
            skipped.append({"id": r["id"], "why": "excluded"})
        elif not (r.get("normalized") or r.get("text") or "").strip():
            skipped.append({"id": r["id"], "why": "no transcript (see the drafts)"})
        else:
            rows.append(r)
    return rows, skipped


# ------------------------------------------------------------------------------ the whole check
def check_transcripts(ws: Workspace, dataset: str, method: str = "auto", steps: int | None = None,
                      device: str = "auto") -> Iterator[Event]:
    """Generator of progress events; the last carries {"method", "rows": [{"id", "score", "reason"}], ...}
    (highest score = most suspicious), also written to datasets/<dataset>/transcript_check.json."""
    from utils.transcripts import asr

    if method not in METHODS:
        raise StudioError(f"Unknown method {method!r}: use one of {', '.join(METHODS)}.")
    recognizer = asr.required(ws) if method == "asr" else asr.available(ws) if method == "auto" else None
    rows, skipped = candidate_rows(ws, dataset)
    if len(rows) < 5:
        raise StudioError(f"Dataset {dataset!r} has {len(rows)} row(s) with a transcript; the check compares "
                          "clips with each other and needs at least 5.")
    heard_on = asr.work_device(ws, device)  # the recognizer keeps off a GPU that a training run holds
    with one_check_at_a_time(ws, dataset), asr.released(recognizer, heard_on):
        # the lock before loading a recognizer: a refused second check loads nothing
        cancel_path(ws, dataset).unlink(missing_ok=True)  # a Cancel pressed before this check began is not for it
        recognizer = yield from _loadable(recognizer, method, heard_on)
        result = yield from _until_cancelled(ws, dataset, _check(ws, dataset, method, steps, device, rows, skipped,
                                                                 recognizer, heard_on))
    return result


# ------------------------------------------------------------------------------ cancelling
def cancel_path(ws: Workspace, dataset: str) -> Path:
    return ws.dataset_dir(dataset) / ".transcript-check.cancel"


def cancel_check(ws: Workspace, dataset: str) -> str:
    """Ask the dataset's running check to stop, from any page or process (the check runs in a process of its own
    and looks for the request at each training poll, each clip and each event); what it did is kept."""
    if not dataset or not check_running(ws, dataset):
        raise StudioError(f"No transcript check of {dataset or 'this dataset'} is running.")
    cancel_path(ws, dataset).touch()
    return f"Cancelling the check of {dataset}: it stops within seconds. {what_is_kept(ws, dataset)}"


def stop_if_cancelled(ws: Workspace, dataset: str) -> None:
    if cancel_path(ws, dataset).exists():
        cancel_path(ws, dataset).unlink(missing_ok=True)
        raise StudioError(f"The check of {dataset} was cancelled. {what_is_kept(ws, dataset)}")


def what_is_kept(ws: Workspace, dataset: str) -> str:
    """What a cancelled check leaves for the next one, as it is on disk: an aligner a check finished training (an
    unfinished training is removed) and the clips it aligned (the progress log), else nothing."""
    from utils.transcripts.progress import stamp

    header, lines = progress_log(ws, dataset).read()
    aligner = Path(header["checkpoint"]) if header.get("checkpoint") else None
    if aligner is None or not aligner.is_dir() or stamp(aligner) != header.get("aligner"):
        return ("No aligner had finished training, so nothing of it is kept: the next check trains one from the "
                "start.")
    return (f"Kept: the trained aligner and the {len(lines)} clip(s) it aligned; Check transcripts goes on from "
            "there.")


def _until_cancelled(ws: Workspace, dataset: str, events: Iterator[Event]):
    """`yield from events`, stopped at the first event after a Cancel (the stage's own cleanup runs first)."""
    try:
        while True:
            try:
                event = next(events)
            except StopIteration as done:
                return done.value
            stop_if_cancelled(ws, dataset)
            yield event
    finally:
        events.close()


@contextlib.contextmanager
def one_check_at_a_time(ws: Workspace, dataset: str):
    """One check of a dataset at a time, in this app or from the command line: a second would delete the first's
    aligner run under it. The lock is the operating system's, so a check that died leaves none behind."""
    import fcntl

    with open(ws.dataset_dir(dataset) / ".transcript-check.lock", "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StudioError(f"A transcript check of dataset {dataset!r} is already running (in this app or from "
                              "the command line): its ranking appears when it ends; start another after it.") from None
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def check_running(ws: Workspace, dataset: str) -> bool:
    """Whether a transcript check of the dataset runs now (in this app or from the command line): it holds the
    dataset's check lock."""
    try:
        with one_check_at_a_time(ws, dataset):
            return False
    except StudioError:
        return True


def _check(ws: Workspace, dataset: str, method: str, steps: int | None, device: str, rows: list[dict],
           skipped: list[dict], recognizer: Path | None, heard_on: str) -> Iterator[Event]:
    """The check itself, once the request is known to be sound (see check_transcripts)."""
    from utils.transcripts import asr
    from utils.transcripts.ranking import score

    started = time.time()
    signals = {r["id"]: {"id": r["id"], "cps": _cps(r)} for r in rows}
    problems: dict[str, str] = {}
    used = []
    if method in ("auto", "alignment"):
        found = yield from _alignment(ws, dataset, rows, steps, device)
        for rid, s in found["signals"].items():
            signals[rid].update(s)
        problems.update(found["problems"])
        used.append("alignment")
    if method == "asr" or (method == "auto" and recognizer is not None):
        heard = yield from asr.compare_with_transcripts(ws, dataset, [r for r in rows if r["id"] not in problems],
                                                        heard_on, recognizer)
        for rid, cer in heard.items():
            signals[rid]["cer"] = cer
        used.append("asr")
    scored = [s for rid, s in signals.items() if rid not in problems]
    med = float(np.median([s["cps"] for s in scored if s.get("cps")] or [0]))
    for s in scored:
        s["cps_median"] = med
    ranked = score(scored)
    top = (ranked[0]["score"] if ranked else 0.0) + 1.0
    ranked = [{"id": rid, "score": round(top, 2), "reason": why, "z": {}} for rid, why in problems.items()] + ranked
    checked = {r["id"]: r.get("text") or "" for r in rows}
    for r in ranked:
        r["text"] = checked[r["id"]]  # what was checked: the review list marks a row whose text changed since
    result = _write(ws, dataset, "+".join(used), ranked, skipped, time.time() - started)
    # the progress log stays: the next check reuses its aligner and aligns only the clips changed since
    yield Event(STAGE, 1, 1, f"{len(ranked)} clips ranked in {result['seconds']:.0f} s; most suspicious first in "
                             f"{check_path(ws, dataset)}", result=result)
    return result


def _loadable(folder: Path | None, method: str, device: str):
    """The recognizer folder the check will use (None: alignment only), loaded now so that one that cannot load
    stops "asr" at once, and turns "auto" into alignment alone with a warning, before minutes of training."""
    from utils.transcripts import asr

    problem = asr.load_problem(folder, device) if folder is not None else None
    if problem and method == "asr":
        raise StudioError(problem)
    if problem:
        yield Event(STAGE, 0, 0, f"{problem}; checking by alignment alone", level="warning")
        return None
    return folder


def _cps(row: dict) -> float | None:
    from utils.datasets.checks import speaking_rate

    return speaking_rate(row)


def _write(ws: Workspace, dataset: str, method: str, ranked: list[dict], skipped: list[dict], seconds: float) -> dict:
    """The ranking file; decisions the curator already made on these rows are carried over."""
    old = {r["id"]: r.get("decision") for r in (read_json(check_path(ws, dataset), default={}) or {}).get("rows", [])}
    for r in ranked:
        if old.get(r["id"]):
            r["decision"] = old[r["id"]]
    result = {"dataset": dataset, "method": method, "created": time.strftime("%Y-%m-%d %H:%M"),
              "seconds": round(seconds, 1), "rows": ranked, "skipped": skipped}
    atomic_write_json(check_path(ws, dataset), result)
    return result


# ------------------------------------------------------------------------------ alignment route
def progress_log(ws: Workspace, dataset: str):
    """The clips an unfinished check has aligned, and the aligner it trained (utils.transcripts.progress)."""
    from utils.transcripts.progress import Progress

    return Progress(ws.dataset_dir(dataset) / "transcript_check.progress.jsonl")


def _alignment(ws: Workspace, dataset: str, rows: list[dict], steps: int | None, device: str):
    """Train the aligner (say how long first), then align every clip; a check cut off before goes on with its
    trained aligner and the clips it aligned. Returns {"signals", "problems"}."""
    from utils.datasets.features import feature_frames
    from utils.events import say_duration
    from utils.transcripts.progress import stamp

    log = progress_log(ws, dataset)
    checkpoint, done = _resumable(log, steps, rows)
    if checkpoint is None:
        frames = [feature_frames(ws, dataset, r) for r in rows]
        steps = steps or plan_steps(frames)
        yield Event(STAGE, 0, 0, "measuring how fast this machine trains the aligner")
        seconds = estimate_seconds(len(rows), max(frames), steps, device)
        yield Event(STAGE, 0, 0, f"this will take about {say_duration(seconds)} (an estimate from a few training "
                                 f"steps timed just now; other work on this machine slows it): a {steps}-step training"
                                 f" of the tiny voice model on {len(rows)} clips, then aligning each clip")
        checkpoint = yield from train_aligner(ws, dataset, steps, device)
        log.start({"checkpoint": str(checkpoint), "aligner": stamp(checkpoint), "steps": steps})
    else:
        left = sum(1 for r in rows if done.get(r["id"], {}).get("key") != row_key(r))
        yield Event(STAGE, 0, 0, f"going on with the aligner this dataset's last check trained: {len(rows) - left} "
                                 f"of {len(rows)} clips are aligned as they are now (their results are kept); {left} "
                                 "to align (new, changed since, or not reached when a check was cut off)")
    try:
        return (yield from align_all(ws, dataset, rows, checkpoint, device, done=done, keep=log.append))
    finally:
        release_gpu_memory()


def _resumable(log, steps: int | None, rows: list[dict]) -> tuple[Path | None, dict[str, dict]]:
    """(the aligner an earlier check trained, {row id: its saved result}): a check cut off after its training, or a
    finished one (a re-check after fixing a few texts). (None, {}) when there is none, `steps` asks for another
    training, its checkpoint is no longer the one it saved, or most clips it aligned have changed since (a dataset
    prepared anew: an aligner trained on other audio or texts is trained afresh)."""
    from utils.transcripts.progress import stamp

    header, lines = log.read()
    path = Path(header["checkpoint"]) if header.get("checkpoint") else None
    if path is None or (steps and header.get("steps") != steps) or not path.is_dir() or \
            stamp(path) != header.get("aligner"):
        return None, {}
    done = {line["id"]: line for line in lines}
    changed = sum(1 for r in rows if r["id"] in done and done[r["id"]].get("key") != row_key(r))
    return (None, {}) if 2 * changed > len(rows) else (path, done)


def row_key(row: dict) -> str:
    """What a clip's alignment depends on (its audio and its text): a saved result with another key is stale."""
    import hashlib
    import json

    what = [row.get("sha1") or row.get("audio"), row.get("text"), row.get("normalized"), row.get("phonemes")]
    return hashlib.sha1(json.dumps(what, ensure_ascii=False).encode("utf-8")).hexdigest()[:16]


def release_gpu_memory() -> None:
    """Hand the GPU memory this process cached for the aligner back to the driver: the app's process must not sit on
    memory that a queued training run needs."""
    import gc

    import torch

    if hardware.has_cuda():
        gc.collect()
        torch.cuda.empty_cache()


def align_all(ws: Workspace, dataset: str, rows: list[dict], checkpoint: Path, device: str = "auto",
              done: dict[str, dict] | None = None, keep=None):
    """Every row's alignment signals under a trained checkpoint. Returns {"signals", "problems"}; a problem is
    a row the aligner cannot lay out at all (no readable sounds, more sounds than frames), said in words.
    `done` {row id: saved result}: rows whose saved result still holds (same row_key) are not aligned again;
    `keep(results)` is given each batch of new results as it is made (the check's progress log)."""
    from utils.datasets import features
    from utils.events import Countdown
    from utils.transcripts.signals import codebook

    done = done or {}
    model, config = _load(checkpoint, device)
    frontend = _frontend(config, rows)
    speakers = config.get("speakers") or ["default"]
    mean, std = model.cfg.mel_mean, model.cfg.mel_std
    encoded = [(r, frontend.encode_row(r)) for r in rows]
    sounds = codebook(model, [(t, _speaker(speakers, r)) for r, t in encoded if t])
    by_length = sorted((len(t), i) for i, (_, t) in enumerate(encoded) if t)
    out, problems, new = {}, {}, []
    todo = [i for i, (r, _) in enumerate(encoded) if done.get(r["id"], {}).get("key") != row_key(r)]
    countdown = Countdown(len(todo))
    for r, _ in encoded:
        saved = done.get(r["id"])
        if saved and saved.get("key") == row_key(r):
            (problems if "problem" in saved else out)[r["id"]] = saved.get("problem") or saved["signals"]
    try:
        for n, i in enumerate(todo, 1):
            stop_if_cancelled(ws, dataset)
            r, tokens = encoded[i]
            mel = (features(ws, dataset, r) - mean) / std
            line = {"id": r["id"], "key": row_key(r)}
            if not tokens:
                line["problem"] = problems[r["id"]] = "the text has no readable Amharic sounds"
            elif mel.shape[-1] < (2 * len(tokens) + 1 if model.cfg.add_blank else len(tokens)):
                line["problem"] = problems[r["id"]] = ("the text is far longer than the speech (more sounds than the "
                                                       "clip has frames)")
            else:
                others = [encoded[j][1] for j in _neighbours(by_length, i, len(tokens))]
                line["signals"] = out[r["id"]] = _align_one(model, tokens, mel, _speaker(speakers, r), sounds, others)
            new.append(line)
            if n % SAVE_EVERY == 0 or n == len(todo):
                if keep is not None:
                    keep(new)
                new = []
                left = countdown.left(n)
                yield Event(STAGE, len(rows) - len(todo) + n, len(rows), "aligning each transcript to its audio"
                            + (f" (about {left} left)" if left else ""))
    finally:  # cut off (a closed page): the results made since the last batch are kept too
        if keep is not None:
            keep(new)
    return {"signals": out, "problems": problems}


SAVE_EVERY = 20  # clips aligned between two saves of the check's progress (and two progress events)
CONTRAST_TEXTS = 3  # other transcripts each clip is also aligned with: its own must fit clearly better


def _neighbours(by_length: list[tuple[int, int]], i: int, n: int) -> list[int]:
    """The other rows whose transcripts are closest in length to row i's (n symbols), ties in the order of
    `by_length` (sorted by length, then row). Looked up by bisection in the sorted list: sorting every row's
    distance for each clip cost O(N log N) a clip, hours at 200k clips."""
    import bisect

    want = CONTRAST_TEXTS + 1  # row i itself may be among the nearest
    pos = bisect.bisect_left(by_length, (n, -1))
    nearest = sorted(abs(length - n) for length, _ in by_length[max(0, pos - want):pos + want])
    if not nearest:
        return []
    reach = nearest[min(want, len(nearest)) - 1]  # every row at this distance or nearer is a candidate
    lo, hi = bisect.bisect_left(by_length, (n - reach, -1)), bisect.bisect_right(by_length, (n + reach, 1 << 62))
    window = by_length[lo:hi]
    near = sorted(window, key=lambda li: abs(li[0] - n))
    return [j for _, j in near if j != i][:CONTRAST_TEXTS]


def _speaker(speakers: list[str], row: dict) -> int:
    speaker = row.get("speaker", "default")
    return speakers.index(speaker) if speaker in speakers else 0


def _align_one(model, tokens, mel: np.ndarray, speaker: int, sounds, others: list[list[int]]) -> dict:
    """The clip's signals, and how much better its own transcript fits it than other transcripts of its length
    ("contrast": near 0 when the own text fits no better than someone else's, i.e. it is not what was said)."""
    import torch

    from utils.transcripts.signals import clip_signals

    y = torch.from_numpy(np.asarray(mel, np.float32)).to(next(model.parameters()).device)
    out = clip_signals(model.align(tokens, y, speaker), y, sounds)
    limit = y.shape[-1] // 2 - 1 if model.cfg.add_blank else y.shape[-1]
    fits = [float(model.align(t, y, speaker)["frame_nll"].mean()) for t in others if len(t) <= limit]
    # relative to what is left to explain (the loss above that of a perfect fit), on a log scale
    residual = max(out["nll"] - 0.5 * math.log(2 * math.pi), 1e-6)
    out["contrast"] = math.log(max((np.mean(fits) - out["nll"]) / residual, 0.01)) if fits else 0.0
    return out


def _load(checkpoint: Path, device: str):
    from utils.training import load_checkpoint

    return load_checkpoint(checkpoint, device=hardware.cuda_or_cpu(device))


def _frontend(config: dict, rows: list[dict]):
    """The checkpoint's own symbol table (the trainer's Frontend, read-only use; it moved from data.py)."""
    try:
        from utils.training.frontend import Frontend
    except ImportError:
        from utils.training.data import Frontend

    return Frontend.create(config["frontend"]["kind"], rows, saved=config["frontend"])


START_S = 3.0  # the trainer's start-up and last checkpoint: measured 1-2 s for 18-36 clips on 2 CPU cores


def estimate_seconds(n_clips: int, longest: int, steps: int, device: str = "auto") -> float:
    """Measured, not guessed: time a few training steps and one alignment of the tiny model at this dataset's
    batch shape on this machine, then scale by the steps and clips (plus the trainer's start-up)."""
    import torch

    dev = hardware.cuda_or_cpu(device)
    with torch.random.fork_rng(devices=[torch.device(dev).index or 0] if dev.startswith("cuda") else []):
        # the caller's random stream is left as it was
        torch.manual_seed(0)
        step_s, align_s = _time_tiny_model(longest, dev)
    return START_S + steps * step_s + n_clips * (1 + CONTRAST_TEXTS) * align_s


def _time_tiny_model(longest: int, dev: str) -> tuple[float, float]:
    """(seconds per training step, seconds per alignment) of the tiny model at this batch shape, in the precision
    the aligner's trainer will use on this device (bf16 or fp16 autocast on a GPU), its memory handed back after."""
    try:
        return _timed_steps(longest, dev)
    finally:
        release_gpu_memory()


def _timed_steps(longest: int, dev: str) -> tuple[float, float]:
    import torch

    from models.matcha import MatchaConfig, MatchaTTS
    from utils.training import TrainConfig
    from utils.training import optimization as opt

    machine = opt.resolve(TrainConfig(preset="tiny", device=dev, compile="false", probe="false",
                                      max_frames_per_batch=FRAMES_PER_BATCH, grad_accumulation=1))
    model = MatchaTTS(MatchaConfig.preset_config("tiny", n_symbols=80, add_blank=True)).to(dev)
    per = int(math.ceil(longest / 4) * 4)
    batch = max(1, FRAMES_PER_BATCH // per)
    n_tok = max(2, per // 8)
    tokens = torch.randint(1, 80, (batch, n_tok), device=dev)
    mels = torch.randn(batch, 100, per, device=dev)
    lens = torch.full((batch,), n_tok), torch.full((batch,), per)
    optimizer = torch.optim.AdamW(model.parameters(), 1e-4)
    sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)  # a GPU step ends when it has run
    times, started = [], time.perf_counter()
    while len(times) < 7 and (len(times) < 3 or time.perf_counter() - started < 10.0):
        t0 = time.perf_counter()
        with opt.autocast(machine):
            loss = model(tokens, lens[0], mels, lens[1], decoder=False)["loss"]  # as the aligner trains
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        sync()
        times.append(time.perf_counter() - t0)
    # the fastest step after the first: what a step costs when the machine is free (the first ones, and others'
    # work on a shared machine, only ever add time; the real training then takes somewhat longer, not less)
    model.eval()
    model.align(tokens[0], mels[0])  # the first call pays one-time costs
    sync()
    t0 = time.perf_counter()
    model.align(tokens[0], mels[0])
    sync()
    return min(times[1:]), time.perf_counter() - t0


ALIGNER_EMA = 0.99  # the aligner's weights averaged over its last ~100 steps: the ranking hangs less on where it stops


def aligner_config(ws: Workspace, dataset: str, steps: int, device: str = "auto"):
    """The short training's settings: the tiny model at a fixed batch of FRAMES_PER_BATCH frames on any device, eager
    (compiling would cost more than these few hundred steps), no probe (the batch is fixed), no evaluation, and only
    the parts an alignment uses (the text encoder and its durations: no decoder, ~9x faster steps on a CPU), their
    average kept (ALIGNER_EMA)."""
    from utils.training import TrainConfig

    return TrainConfig(workspace=str(ws.root), dataset=dataset, run=check_run(dataset), preset="tiny",
                       max_steps=steps, lr=2e-3, warmup_steps=min(50, steps // 10), eval_every=0,
                       checkpoint_every=steps, keep_checkpoints=1, mcd="logmel", eval_clips=1, sample_clips=0,
                       ode_steps=2, eval_vocoder="griffin-lim", resume="none", ema_decay=ALIGNER_EMA, patience=0,
                       log_every=max(10, steps // 10), device=device, compile="false", probe="false",
                       max_frames_per_batch=FRAMES_PER_BATCH, grad_accumulation=1, evaluate=False,
                       options={"parts": "aligner"})


def train_aligner(ws: Workspace, dataset: str, steps: int, device: str = "auto"):
    """The short training, as a training run of its own process through the job queue (utils.jobs): the app's
    process keeps no GPU memory of it and none of its process-wide switches (TF32, cuDNN), and on a GPU it waits
    for a run that holds the GPU instead of sharing its memory. Its status.json becomes progress events. Returns
    the checkpoint folder. The run folder is this check's own and is started afresh."""
    from utils import jobs
    from utils.events import Countdown
    from utils.training import prepare_run

    name = check_run(dataset)
    shutil.rmtree(ws.run_dir(name), ignore_errors=True)  # a check never resumes an older check's weights
    cfg = aligner_config(ws, dataset, steps, device)
    path = prepare_run(cfg)
    gpu = device == "cuda" or (device == "auto" and hardware.has_cuda())
    # one thread on a CPU: the aligner's small ops gain ~20 % from a second core, and lose 2x when another program
    # holds it (a browser, another training: 100x with two of them, bench/RESULTS.md)
    jobs.start(ws, name, path, devices="cuda:0" if gpu else "cpu", cpu_threads=0 if gpu else 1)
    shown, status, countdown = (-1, ""), {}, None
    try:
        while (status := jobs.reconcile(path.parent)).get("state") in jobs.ACTIVE:
            stop_if_cancelled(ws, dataset)
            step = int(status.get("step") or 0)
            waiting = status.get("state") == "queued" and status.get("message", "").startswith("waiting")
            if (step, waiting) != shown:
                shown = (step, waiting)
                countdown = countdown or (Countdown(steps, start=step) if step else None)  # paced from the first step
                left = countdown and countdown.left(step)
                yield Event(STAGE, step, steps, f"{status['message']} (the aligner waits its turn)" if waiting
                            else "training the aligner on this dataset" + (f" (about {left} left)" if left else ""))
            time.sleep(0.5)
    finally:  # cancelled, or the caller went away (a closed page, Ctrl-C): the training stops with it, not behind
        # its back, and its folder goes (no later check resumes an unfinished training: it starts afresh, above).
        # Removed only once its processes have ended: nothing writes in it any more, and they hold no device lock
        if status.get("state") in jobs.ACTIVE and _stop_and_wait(ws, name):
            shutil.rmtree(ws.run_dir(name), ignore_errors=True)
    if status.get("state") != "finished" or not status.get("last_checkpoint"):
        raise StudioError(f"The aligner's training did not finish ({status.get('state')}: "
                          f"{status.get('message', '')[:400]}); see {path.parent / 'train.log'}.")
    return Path(status["last_checkpoint"])


def _stop_and_wait(ws: Workspace, name: str, patience_s: float = 60.0, kill_s: float = 10.0) -> bool:
    """Ask the aligner's trainer to stop (it saves and exits), and wait for it; kill it if it does not end. True once
    its launcher and trainer have ended (the launcher holds the device's lock until then)."""
    from utils import jobs

    run_dir = ws.run_dir(name)

    def running() -> bool:  # the trainer says "stopped" a moment before its processes end
        status = jobs.reconcile(run_dir)
        return status.get("state") in jobs.ACTIVE or any(jobs.pid_alive(status.get(k)) for k in ("pid", "launcher_pid"))

    jobs.stop(ws, name)
    deadline = time.time() + patience_s
    while running() and time.time() < deadline:
        if not (run_dir / "STOP").exists():  # asked as the trainer started: its start cleared the request
            jobs.stop(ws, name)
        time.sleep(0.2)
    if running():
        jobs.stop(ws, name)  # a second Stop kills the process group
        deadline = time.time() + kill_s
        while running() and time.time() < deadline:
            time.sleep(0.2)
    return not running()
