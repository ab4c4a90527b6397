"""The whole dataset path at growing sizes: seconds per audio hour and peak memory of each stage, so a stage that
grows faster than the data shows up, and the arithmetic to 200 h.

    python bench/dataset_path.py --hours 1 3                      # a 2-core CPU: about 20 min
    python bench/dataset_path.py --hours 1 10 50 --workers 16     # a 16-core GPU machine
    python bench/dataset_path.py --hours 10 --stages transcript_check    # one stage (after preparing)

For each size: unique LJSpeech-style clips are generated (espeak-ng Amharic sentences, each copy with its own
gain, padding and noise: bench/prepare.py), then each stage runs in its own fresh process (its peak RSS is its
own): prepare (import, checks, clips, mel cache), prepare again on what raw/ holds (every clip kept: discovery, each
recording's size and time read to see it unchanged, the table written again), a new take of one row (another row's
recording put in its place: one clip made again, one row written), the music gate over every clip (`separate --dataset`, auto
backend, the gate spread over the workers), the transcript check (its aligner trained --check-steps steps, then
every clip aligned; in a process of its own as the app runs it, so its memory is the "child" column), the first
training step of a tiny Matcha run (from Start: the rows read, the batches planned, one step), and the Dataset
tab's clicks once warm (select the dataset, fix one text). Last, first_step_rows: the first step again with the
dataset's rows repeated under new ids to --rows (200k: the rows, batches and lookups of 200k clips, on the page
cache of the few thousand real ones; unique clips at 200k need ~90 GB of disk).
Results: bench/out/dataset_path-<cpu|cuda>.json.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

import common  # bench/common.py (the script's folder is on sys.path); puts the repository root there too
import prepare as prepare_bench  # bench/prepare.py: the unique-clip generator

STAGES = ("prepare", "prepare_again", "retake", "music_gate", "transcript_check", "first_step", "clicks",
          "first_step_rows")
PER_HOUR = ("prepare", "prepare_again", "music_gate", "transcript_check")  # work over every clip: s per audio hour
SPREAD = ("prepare", "music_gate")  # spread over the CPU cores (worker processes); the others run in one process


def _stage_work(name: str, ws, args: dict):
    """The stage's work as a callable, its imports done (so the clock times the work, not Python's imports)."""
    from utils.datasets import prepare
    from utils.events import run_to_end

    if name == "prepare":
        src = Path(ws.root).parent / "src"
        return lambda: f"{run_to_end(prepare(ws, 'bench', src, workers=args['workers']))['clips']} clips"
    if name == "prepare_again":  # Prepare pressed again on what raw/ holds: every clip kept, each recording's stamp read
        return lambda: f"{run_to_end(prepare(ws, 'bench', workers=args['workers']))['clips']} clips kept"
    if name == "retake":  # a new take of one row (here another row's recording): only that clip made again
        from utils.datasets import load_manifest
        from utils.datasets.retake import replace_recording

        first, other = load_manifest(ws, "bench")[:2]
        take = Path(ws.dataset_dir("bench")) / other["source"]
        return lambda: f"{run_to_end(replace_recording(ws, 'bench', first['id'], take))['clips']} clips"
    if name == "music_gate":
        from utils.separation.dataset import process_dataset

        return lambda: run_to_end(process_dataset(ws, "bench", backend="auto", workers=args["workers"]))["backend"]
    if name == "transcript_check":  # as the app runs it: in a process of its own (peak_rss_mb is the app's side)
        from utils.transcripts.scoring import check_transcripts
        from utils.workers import events_in_child

        return lambda: "%d events" % sum(1 for _ in events_in_child(check_transcripts, ws, "bench", job="check",
                                                                    steps=args["check_steps"]))
    if name in ("first_step", "first_step_rows"):
        from utils.training import TrainConfig, prepare_run, run

        cfg = TrainConfig(dataset="bench", run=name.replace("_", "-"), preset="tiny", max_steps=1, evaluate=False,
                          workspace=str(ws.root))
        return lambda: f"step {run(prepare_run(cfg))['step']}"
    from webui import dataset as tab

    def clicks() -> str:
        tab.load_view(ws, "bench")
        return tab.edit_row(ws, "bench", "b0000001", "text", "ሰላም ለሁሉም")

    tab.load_view(ws, "bench")  # a process's first view and edit import the music and text code: untimed (the app
    tab.edit_row(ws, "bench", "b0000002", "keep")  # pays it once, at its first page load)
    return clicks


def _stage(name: str, root: str, args: dict, result) -> None:
    from utils.workspace import Workspace

    work = _stage_work(name, Workspace.open(Path(root) / "ws"), args)
    t = time.perf_counter()
    result["note"] = work()
    result["seconds"] = time.perf_counter() - t
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["child_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def _in_child(name: str, root: str, args: dict) -> dict:
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        result = manager.dict()
        p = ctx.Process(target=_stage, args=(name, root, args, result))
        p.start()
        p.join()
        return dict(result) if p.exitcode == 0 else {"note": f"failed (exit {p.exitcode})"}


def repeat_rows(root: Path, n: int) -> int:
    """The prepared dataset's rows repeated under new ids up to n rows (the same clips and cache entries): the
    trainer's start at a row count the machine has no disk for as unique clips (200k rows: ~90 GB)."""
    from utils.datasets import load_manifest, save_manifest
    from utils.workspace import Workspace

    ws = Workspace.open(root)
    rows = load_manifest(ws, "bench")
    copies = -(-n // len(rows))
    save_manifest(ws, "bench", [{**r, "id": f"{r['id']}-{k}"} for k in range(copies) for r in rows][:n])
    return n


def measure(hours: float, args: dict) -> dict:
    root = tempfile.mkdtemp(prefix="bench-path-")
    try:
        clips, seconds = prepare_bench.make_dataset(Path(root) / "src", hours, args["workers"])
        record = {"hours": round(seconds / 3600, 3), "clips": clips}
        for name in STAGES:
            if name not in args["stages"] and name != "prepare":  # the others need the prepared dataset
                record[name] = {"note": "not run (--stages)"}
                continue
            if name == "first_step_rows":
                record["rows"] = repeat_rows(Path(root) / "ws", args["rows"])
            record[name] = got = _in_child(name, root, args)
            if "seconds" in got and name in PER_HOUR:
                got["s_per_hour"] = got["seconds"] / (seconds / 3600)
            print(f"{hours} h: {name} {got}", flush=True)
        return record
    finally:
        shutil.rmtree(root, ignore_errors=True)


def extrapolate(records: list[dict], cores: int, target_cores: int = 16, target_hours: float = 200.0) -> list[str]:
    """The arithmetic to 200 h on 16 cores from the largest size measured: this machine's seconds per audio hour
    times 200 h, preparation divided over the cores; the stages that run in one process (or on a GPU, which this
    machine may not have) are not scaled; the once-only stages as measured."""
    last, lines = records[-1], []
    for name in STAGES:
        got = last[name]
        if "seconds" not in got:
            lines.append(f"{name}: {got.get('note')}")
        elif name == "first_step_rows":
            lines.append(f"{name}: {got['seconds']:.1f} s as measured at {last['rows']:,} rows (repeated clips)")
        elif name not in PER_HOUR:
            lines.append(f"{name}: {got['seconds']:.1f} s as measured at {last['hours']} h (once, not per hour)")
        else:
            scale = cores / target_cores if name in SPREAD else 1.0
            how = f" x {cores}/{target_cores} cores" if name in SPREAD else " (one process: a GPU changes it)"
            lines.append(f"{name}: {got['s_per_hour']:.0f} s/h x {target_hours:.0f} h{how} = "
                         f"{got['s_per_hour'] * target_hours * scale / 60:.0f} min")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hours", type=float, nargs="+", default=[1.0, 3.0])
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--check-steps", type=int, default=100, help="the transcript check's aligner steps")
    parser.add_argument("--rows", type=int, default=200_000, help="first_step_rows: the clips' rows repeated to this")
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES),
                        help="the stages to time (preparation always runs: the others need its dataset)")
    common.add_output_args(parser)
    args = parser.parse_args()
    options = {"workers": args.workers, "check_steps": args.check_steps, "stages": args.stages, "rows": args.rows}
    records = [measure(h, options) for h in args.hours]
    rows = [{"stage": name, **{f"{r['hours']}": r[name].get("s_per_hour", r[name].get("seconds")) for r in records},
             **{f"rss {r['hours']}": r[name].get("peak_rss_mb") for r in records},
             **{f"child {r['hours']}": r[name].get("child_peak_rss_mb") for r in records},
             "note": records[-1][name].get("note")} for name in STAGES]
    columns = [("stage", "stage")] + [(f"{r['hours']}", f"s per audio h (once: s) at {r['hours']} h")
                                      for r in records] + \
              [(f"rss {r['hours']}", f"peak MB at {r['hours']} h") for r in records] + \
              [(f"child {r['hours']}", f"its largest child's peak MB at {r['hours']} h") for r in records] + \
              [("note", "note")]
    print(common.markdown_table(columns, rows))
    lines = extrapolate(records, args.workers)
    print("\nto 200 h on 16 cores:\n" + "\n".join(lines))
    common.save("dataset_path", {"records": records, "to_200h_16_cores": lines}, out=args.out)


if __name__ == "__main__":
    main()
