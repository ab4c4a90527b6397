"""What a click costs as a dataset grows: the Dataset tab's work at 1k to 200k rows, beside what the same click
cost when the rows were one JSON-lines file rewritten per edit.

    python bench/dataset_scale.py                          # 1k, 10k, 50k, 200k rows
    python bench/dataset_scale.py --rows 1000 200000 --repeat 5

For each size a table of unique rows (real Amharic sentences, each row's own text, id, duration, speaker and a
few flags; no audio: no click here opens one) is saved as preparation saves it, then, in a fresh process like the
app's, each click is timed (median of --repeat): select the dataset (summary, both plots, the first page), open a
row, fix a text, exclude, turn to a page deep in the table, the Training tab's hours and Start's check. The
trainer's read of every row (`training_rows`, the fields it reads) is timed next, and one Re-check (every row's
text checks again, a batch behind one button) last. The transcript review's clicks run on a made-up ranking of
every row (the list, a pick, a decision, a press of Check; "first" is the list drawn once with the ranking not yet
parsed, and the first press, which hashes the ranking's texts once). "jsonl" columns
time what each edit cost before (read every row, write the whole file back). Peak memory: the process's
high-water RSS after the clicks (the app's imports included), and after the trainer's read (before the old edit is
timed).
Results: bench/out/dataset_scale-cpu.json.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import statistics
import tempfile
import time
from pathlib import Path

import common  # bench/common.py (the script's folder is on sys.path); puts the repository root there too

from tests.helpers import sentences  # noqa: E402


def make_rows(n: int) -> list[dict]:
    """n unique rows: sentence i mod len joined with a number word of i, so no two transcripts are equal."""
    import random

    texts, rnd, rows = sentences(), random.Random(n), []
    for i in range(n):
        text = f"{texts[i % len(texts)]} {i}"
        flags = ["low_snr"] if rnd.random() < 0.03 else (["rate_outlier"] if rnd.random() < 0.02 else [])
        rows.append({"id": f"clip-{i:06d}", "audio": f"audio/clip-{i:06d}.wav", "text": text, "normalized": text,
                     "phonemes": None, "duration": round(rnd.uniform(1.5, 14.0), 3), "speaker": f"s{i % 7}",
                     "split": "val" if i % 50 == 0 else "train", "flags": flags, "excluded": False,
                     "source": f"raw/wavs/clip-{i:06d}.wav", "sha1": f"{i:040x}", "music": None,
                     "notes": {f: f for f in flags}, "review": None, "metrics": {"snr_db": 30.0, "peak": 0.7}})
    return rows


def _save(root: str, n: int, result) -> None:
    from utils.datasets import save_manifest
    from utils.datasets.manifest import write_report
    from utils.workspace import Workspace, write_jsonl

    ws, rows = Workspace.open(root), make_rows(n)
    t = time.perf_counter()
    save_manifest(ws, "big", rows)
    write_report(ws, "big", [], "ljspeech")
    result["save_s"] = time.perf_counter() - t
    write_jsonl(Path(root) / "old.jsonl", rows)  # the old layout, for the side-by-side column
    result["table_mb"] = (ws.dataset_dir("big") / "manifest.sqlite").stat().st_size / 1e6
    _save_ranking(ws, rows)


def _save_ranking(ws, rows: list[dict]) -> None:
    """A transcript check's ranking of every row, as scoring._write saves it (the scores made up, most suspicious
    first): what the review list, a pick, a decision and a press of Check read."""
    import random

    from utils.transcripts.scoring import check_path
    from utils.workspace import atomic_write_json

    rnd = random.Random(len(rows))
    ranked = sorted(({"id": r["id"], "score": round(rnd.gauss(0, 1), 2), "reason": "nothing stands out", "z": {},
                      "text": r["text"]} for r in rows), key=lambda r: -r["score"])
    atomic_write_json(check_path(ws, "big"), {"dataset": "big", "method": "alignment", "created": "bench",
                                              "seconds": 0.0, "rows": ranked, "skipped": []})


def _timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _clicks(root: str, n: int, repeat: int, result) -> None:
    from utils import datasets
    from utils.datasets.manifest import require_usable, usable_hours
    from utils.workspace import Workspace, read_jsonl, write_jsonl
    from webui import dataset as tab

    ws, mid = Workspace.open(root), f"clip-{n // 2:06d}"
    fix = sentences()[3]
    clicks = {
        "select": lambda: tab.load_view(ws, "big"),
        "open_row": lambda: tab.select_row(ws, "big", mid),
        "fix_text": lambda: tab.edit_row(ws, "big", mid, "text", fix),
        "exclude": lambda: tab.edit_row(ws, "big", mid, "exclude"),
        "deep_page": lambda: tab.load_view(ws, "big", True, max(1, n // datasets.PAGE_ROWS - 1)),
        "hours": lambda: usable_hours(ws, "big"),
        "start_check": lambda: require_usable(ws, "big"),
    }
    from utils.transcripts import decide
    from webui import transcripts as panel

    review = lambda: panel.review_label(ws, "big", panel.review_frame(ws, "big"))  # noqa: E731
    result["review_first"] = _timed(review, 1)  # the ranking parsed, once per process and ranking
    check = lambda: panel.still_current(ws, "big", "alignment")  # noqa: E731
    result["check_first"] = _timed(check, 1)  # the ranking's text hashes made, once per process and ranking
    clicks.update({"review_list": review, "review_pick": lambda: panel.pick(ws, "big", mid),
                   "review_decide": lambda: decide(ws, "big", mid, "exclude"), "check_press": check})
    for name, fn in clicks.items():
        result[name] = _timed(fn, repeat)
    result["clicks_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    from utils.training.data import training_rows

    t = time.perf_counter()
    train, val = training_rows(ws, "big")
    result["read_all"] = time.perf_counter() - t
    result["read_all_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert len(train) + len(val) == n - 1  # all but the row the clicks excluded
    del train, val
    old = Path(root) / "old.jsonl"  # last: it reads every row whole
    result["jsonl_edit"] = _timed(lambda: write_jsonl(old, read_jsonl(old)), repeat)
    result["recheck"] = _timed(lambda: datasets.recheck(ws, "big"), 1)  # every row's text checks again: a batch
    result["relayout"] = _timed(lambda: _relayout(ws), 1)  # once, the first time a newer studio opens a table


def _relayout(ws) -> None:
    """The dataset opened by a studio whose table layout is newer than the file's (the layout laid out again)."""
    import sqlite3

    from utils.datasets import store

    path = ws.dataset_dir("big") / store.FILE
    with sqlite3.connect(path) as con:
        con.execute("PRAGMA user_version = 0")
    con.close()
    store.query(ws.dataset_dir("big"), "SELECT count(*) FROM rows")


def _in_child(target, *args) -> dict:
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        result = manager.dict()
        p = ctx.Process(target=target, args=(*args, result))
        p.start()
        p.join()
        if p.exitcode:
            raise SystemExit(f"{target.__name__}{args} failed with exit code {p.exitcode}")
        return dict(result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[1000, 10000, 50000, 200000])
    parser.add_argument("--repeat", type=int, default=5)
    common.add_output_args(parser)
    args = parser.parse_args()
    records = []
    for n in args.rows:
        with tempfile.TemporaryDirectory() as root:
            record = {"rows": n, **_in_child(_save, root, n), **_in_child(_clicks, root, n, args.repeat)}
        records.append(record)
        print(f"{n} rows done: select {record['select']:.3f} s, fix a text {record['fix_text']:.3f} s", flush=True)
    columns = [("rows", "rows"), ("table_mb", "table MB"), ("save_s", "save all s"), ("select", "select s"),
               ("open_row", "open row s"), ("fix_text", "fix text s"), ("exclude", "exclude s"),
               ("deep_page", "deep page s"), ("hours", "hours s"), ("start_check", "Start check s"),
               ("review_first", "review list first s"), ("review_list", "review list s"),
               ("review_pick", "review pick s"), ("review_decide", "review decide s"),
               ("check_first", "Check press first s"), ("check_press", "Check press s"),
               ("jsonl_edit", "jsonl edit s (before)"), ("clicks_rss_mb", "UI peak RSS MB"), ("recheck", "Re-check s"),
               ("relayout", "table laid out again s (once)"),
               ("read_all", "trainer read s"), ("read_all_rss_mb", "trainer read peak RSS MB")]
    print(common.markdown_table(columns, records))

    def draw(fig):
        ax = fig.subplots()
        for key, label in (("select", "select a dataset"), ("fix_text", "fix a text"), ("deep_page", "a deep page"),
                           ("jsonl_edit", "one edit before (JSON lines rewritten)")):
            ax.plot([r["rows"] for r in records], [r[key] for r in records], marker="o", label=label)
        ax.axhline(1.0, color="grey", linestyle=":", label="1 s goal")
        ax.set(xscale="log", yscale="log", xlabel="rows in the dataset", ylabel="seconds a click")
        ax.legend(fontsize=8)

    common.save("dataset_scale", {"records": records}, draw, out=args.out)


if __name__ == "__main__":
    main()
