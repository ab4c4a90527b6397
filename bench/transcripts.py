"""Transcript-error finder: do damaged transcripts land at the top of the ranking, and how long does it take?

    python bench/transcripts.py                         # 36 espeak-ng clips, 6 damaged, alignment method
    python bench/transcripts.py --clips 60 --every 5    # more clips, more damage
    python bench/transcripts.py --threads 2
    python bench/transcripts.py --recheck 2           # then fix 2 damaged texts and check again (Check again)
    python bench/transcripts.py --recognizer-speed      # then omniASR 300M's speed against MMS-1b-all's
    python bench/transcripts.py --parts all,aligner     # the aligner trained whole, then as the check trains it

Builds an espeak-ng Amharic dataset (voices am and am+f2, sentences of <= 60 characters) and spoils every
`--every`-th transcript in turn: swapped with a sentence the dataset does not speak, cut in half, or a sentence
added (`tests.helpers.damage_transcripts`). Then runs the check exactly as `python app.py check-transcripts`
does (`utils.transcripts.check_transcripts`, method alignment: a short tiny-model training + MAS per clip) and
prints how many damaged rows are in the top k (k = the number damaged, and 2k), the rank of each damaged row,
and the wall time (the estimate said before starting, next to the real one).
"""
from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import common  # bench/common.py (the script's folder is on sys.path); puts the repository root there too
import recognizer_speed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clips", type=int, default=36, help="clips in the dataset")
    p.add_argument("--every", type=int, default=6, help="damage every N-th transcript")
    p.add_argument("--steps", type=int, default=None, help="aligner training steps (default: sized to the data)")
    p.add_argument("--method", default="alignment", choices=["alignment", "auto", "asr"])
    p.add_argument("--keep", type=Path, default=None, help="build the workspace here and keep it")
    p.add_argument("--recheck", type=int, default=0, help="then restore this many damaged texts and check again")
    p.add_argument("--parts", default="aligner", help="the parts of the aligner that train, each in turn on the same "
                                                      "clips: aligner (the check's: no decoder) and/or all")
    p.add_argument("--recognizer-speed", action="store_true",
                   help="then time the recognizer of the asr method (bench/recognizer_speed.py): omniASR 300M, MMS")
    recognizer_speed.add_args(p)
    common.add_machine_args(p)
    args = p.parse_args()
    common.start(args)

    from tests.helpers import damage_transcripts, make_dataset, sentences
    from utils.datasets import apply_edits, load_manifest
    from utils.events import run_to_end
    from utils.transcripts import check_transcripts

    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-transcripts-"))
    t0 = time.perf_counter()
    ws = make_dataset(root, name="damaged", n_train=args.clips - 2, n_val=2, voices=("am", "am+f2"), max_chars=60)
    spares = [s for s in sentences() if len(s) <= 60][200:300]  # never spoken in the dataset
    spoken = {r["id"]: r["text"] for r in load_manifest(ws, "damaged")}
    damaged = damage_transcripts(ws, "damaged", spares, every=args.every)
    print(f"dataset: {args.clips} clips, {len(damaged)} damaged ({time.perf_counter() - t0:.0f} s to build)")

    compared, k = [], len(damaged)
    for parts in args.parts.split(","):
        result, rows, wall, said = check_once(ws, damaged, args, parts.strip())
        compared.append({"parts": parts, "wall_s": round(wall, 1),
                         "hits_top_k": sum(r["rank"] <= k for r in rows), "hits_top_2k": sum(r["rank"] <= 2 * k for r in rows),
                         "ranks": " ".join(str(r["rank"]) for r in rows)})
    if len(compared) > 1:
        print("\n" + common.markdown_table([("parts", "parts that train"), ("wall_s", "wall s", "{:.0f}"),
                                            ("hits_top_k", f"damaged in top {k}"), ("hits_top_2k", f"in top {2 * k}"),
                                            ("ranks", "their ranks")], compared))
    hits_k, hits_2k = compared[-1]["hits_top_k"], compared[-1]["hits_top_2k"]
    again = None
    if args.recheck:  # the curator fixed a few texts: the check again reuses the aligner, aligns only those
        fixed = [r["id"] for r in rows[: args.recheck]]
        apply_edits(ws, "damaged", [{"id": rid, "action": "text", "text": spoken[rid]} for rid in fixed])
        t0 = time.perf_counter()
        run_to_end(check_transcripts(ws, "damaged", method=args.method), printer=print)
        again = round(time.perf_counter() - t0, 1)
        print(f"check again after fixing {len(fixed)} texts: wall {again:.0f} s")
    speeds = (recognizer_speed.measure(args.recognizer_seconds, args.recognizer_repeats) if args.recognizer_speed
              else [])
    if speeds:  # drafts and the asr check hear every clip once: this is their speed on this machine
        print("\nThe speech recognizer (random weights, real size):\n" + recognizer_speed.report(speeds))
    common.save("transcripts", {"clips": args.clips, "damaged": k, "hits_top_k": hits_k, "hits_top_2k": hits_2k,
                                "wall_s": round(wall, 1), "recheck_s": again, "compared": compared, "estimate": said.get("estimate"), "rows": rows,
                                "ranking": result["rows"], "recognizer_speed": speeds}, out=args.out)


def check_once(ws, damaged: dict, args, parts: str):
    """The check as `app.py check-transcripts` runs it, its aligner training `parts` (a check before on these clips
    forgotten, so each trains its own); prints the damaged rows' ranks. Returns (result, rows, wall, said)."""
    from utils.events import run_to_end
    from utils.transcripts import check_transcripts, scoring

    for name in (scoring.CHECK_FILE, "transcript_check.progress.jsonl"):
        (ws.dataset_dir("damaged") / name).unlink(missing_ok=True)
    made = scoring.aligner_config
    scoring.aligner_config = lambda *a, **kw: dataclasses.replace(made(*a, **kw), options={"parts": parts})
    said = {}

    def printer(line: str) -> None:
        if "this will take about" in line:
            said["estimate"] = line
        print(line, flush=True)

    t0 = time.perf_counter()
    try:
        result = run_to_end(check_transcripts(ws, "damaged", method=args.method, steps=args.steps), printer=printer)
    finally:
        scoring.aligner_config = made
    wall = time.perf_counter() - t0
    order = [r["id"] for r in result["rows"]]
    k = len(damaged)
    rows = [{"id": rid, "damage": kind, "rank": order.index(rid) + 1,
             "score": result["rows"][order.index(rid)]["score"], "reason": result["rows"][order.index(rid)]["reason"]}
            for rid, kind in damaged.items()]
    rows.sort(key=lambda r: r["rank"])
    print(f"\nparts {parts}:\n" + common.markdown_table([("id", "row"), ("damage", "damage"), ("rank", "rank"),
                                                         ("score", "score", "{:.2f}"), ("reason", "reason")], rows))
    clean = [r for r in result["rows"] if r["id"] not in damaged]
    print(f"\n{sum(r['rank'] <= k for r in rows)} of {k} damaged rows in the top {k}, "
          f"{sum(r['rank'] <= 2 * k for r in rows)} in the top {2 * k}; highest clean row: {clean[0]['id']} score "
          f"{clean[0]['score']:.2f} ({clean[0]['reason']})")
    print(f"wall {wall:.0f} s for {len(order)} clips; {said.get('estimate', '')}")
    return result, rows, wall, said


if __name__ == "__main__":
    main()
