"""Time to quality: wall minutes of training until the held-out MCD reaches each threshold.

    python bench/time_to_quality.py                               # CPU: tiny preset, 40 espeak-ng clips, 3 min
    python bench/time_to_quality.py --preset base --minutes 20    # GPU (H100 goal: MCD <= 6 dB)
    python bench/time_to_quality.py --dataset NAME --workspace WS --thresholds 8 7 6
    python bench/time_to_quality.py --defaults                    # every setting "auto": what Start gives
    python bench/time_to_quality.py --vocoder FOLDER              # MCD through a trained vocoder, not Griffin-Lim
    python bench/time_to_quality.py --ab blanks=true,false --steps 1500   # A/B of one setting, same clips and budget

Why: speed only matters if it buys quality sooner. This runs the real trainer (utils.training: the same
code as `python app.py train`, its "auto" machine settings) on an espeak-ng Amharic corpus whose held-out
sentences are never trained on, evaluates every `--eval-every` steps (WORLD/SPTK MCD of synthesised
held-out clips through Griffin-Lim, the project's definition), and stops by the trainer's own STOP file
after `--minutes`. From metrics.jsonl it reports, per threshold, the first evaluation at or below it:
minutes since the start (data preparation, probe and evaluations included) and training-only minutes
(evaluation time taken out).
"""
from __future__ import annotations

import argparse
import re
import shutil
import tempfile
import time
from pathlib import Path

import common  # bench/common.py (the script's folder is on sys.path); puts the repository root there too

COLUMNS = [("threshold_db", "MCD <= dB"), ("step", "step"), ("minutes", "minutes (wall)", "{:.1f}"),
           ("train_minutes", "minutes (training only)", "{:.1f}"), ("mcd", "MCD then", "{:.2f}")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default=None, help="a prepared dataset with a val split (default: espeak-ng clips)")
    p.add_argument("--workspace", type=Path, default=None, help="workspace holding --dataset")
    p.add_argument("--clips", type=int, default=None, help="without --dataset: training clips (36 CPU, 780 GPU)")
    p.add_argument("--val-clips", type=int, default=None, help="without --dataset: held-out clips (4 CPU, 20 GPU)")
    p.add_argument("--preset", default=None, help="tiny (CPU default) | small | base (GPU default)")
    p.add_argument("--minutes", type=float, default=None, help="training budget (3 CPU, 20 GPU)")
    p.add_argument("--eval-every", type=int, default=None, help="steps between evaluations (100 CPU, 500 GPU)")
    p.add_argument("--eval-clips", type=int, default=None, help="held-out clips per evaluation (default 8)")
    p.add_argument("--thresholds", type=float, nargs="+", default=[12, 10, 8, 7, 6], help="MCD thresholds (dB)")
    p.add_argument("--mcd", default="world", choices=["world", "logmel"],
                   help="world: the project's MCD (bench numbers); logmel: the fast proxy (smoke runs)")
    p.add_argument("--vocoder", type=Path, default=None,
                   help="score through this vocoder folder (copied into the workspace) instead of Griffin-Lim")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (2e-3 CPU tiny, trainer default on GPU)")
    p.add_argument("--keep", type=Path, default=None, help="keep the workspace here (default: a temporary one)")
    p.add_argument("--steps", type=int, default=None, help="a step budget instead of --minutes (fair under load)")
    p.add_argument("--ab", default=None, metavar="SETTING=A,B",
                   help="the same clips and budget once per value of one training setting, e.g. blanks=true,false")
    p.add_argument("--defaults", action="store_true",
                   help="CPU too: the trainer's own defaults and auto settings (what a curator gets from Start)")
    common.add_machine_args(p)
    args = p.parse_args()

    import torch

    common.start(args)
    gpu = torch.cuda.is_available()
    preset = args.preset or ("base" if gpu else "tiny")
    minutes = args.minutes or (20.0 if gpu else 3.0)
    eval_every = args.eval_every or (500 if gpu else 100)
    tmp = None
    if not args.dataset:
        root = args.keep or Path(tempfile.mkdtemp(prefix="bench-ttq-"))
        tmp = None if args.keep else root
        n_train, n_val = args.clips or (780 if gpu else 36), args.val_clips or (20 if gpu else 4)
        print(f"speaking {n_train} + {n_val} held-out clips with espeak-ng ...", flush=True)
        args.workspace, args.dataset = common.espeak_dataset(root, n_train, n_val).root, "bench"
    # CPU: the settings of RESULTS.md's held-out tiny run; GPU: the trainer's defaults and auto settings
    small = {} if gpu or args.defaults else dict(lr=2e-3, warmup_steps=50, grad_accumulation=1,
                                                 max_frames_per_batch=2000, ema_decay=0.99)
    if args.lr:
        small["lr"] = args.lr
    if args.vocoder:  # a run may only read vocoders inside its workspace
        shutil.copytree(args.vocoder, Path(args.workspace) / "vocoders" / "bench", dirs_exist_ok=True)
        small["eval_vocoder"] = "vocoders/bench"
    else:  # not the workspace's default ("auto"): RESULTS.md's numbers are through Griffin-Lim
        small["eval_vocoder"] = "griffin-lim"
    if args.ab:
        setting, values = args.ab.split("=", 1)
        runs = [(f"{setting}={v}", {**small, setting: v}) for v in values.split(",")]
        results = [(label, *train_once(args, preset, minutes, eval_every, f"ab-{i}", extra))
                   for i, (label, extra) in enumerate(runs)]
        report_ab(args, preset, minutes, eval_every, results, tmp)
        return
    result, curve, wall, cfg = train_once(args, preset, minutes, eval_every, f"ttq-{preset}", small)
    warm = warmup(Path(args.workspace) / "runs" / cfg.run)
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    rows = []
    for thr in sorted(args.thresholds, reverse=True):
        hit = next((c for c in curve if c["mcd"] <= thr), None)
        rows.append({"threshold_db": thr, **(hit or {"step": f"not reached in {minutes:g} min"})})
    print(common.markdown_table([("step", "step"), ("minutes", "minutes", "{:.1f}"),
                                 ("mcd", "held-out MCD dB", "{:.2f}")], curve))
    print(common.markdown_table(COLUMNS, rows))
    best = min((c["mcd"] for c in curve), default=float("nan"))
    print(f"{result['step']} steps in {wall / 60:.1f} min; best MCD {best:.2f} dB; warm-up: {warm['said']}")

    def draw(fig):
        ax = fig.subplots()
        ax.plot([c["minutes"] for c in curve], [c["mcd"] for c in curve], "o-", label="held-out MCD")
        for thr in args.thresholds:
            ax.axhline(thr, color="grey", lw=0.6, ls="--")
        ax.set_xlabel("minutes since the start of the run")
        ax.set_ylabel(f"MCD (dB, WORLD/SPTK, {'vocoder' if args.vocoder else 'Griffin-Lim'})")
        ax.legend(fontsize=8)

    common.save("time_to_quality", {"preset": preset, "minutes_budget": minutes, "eval_every": eval_every,
                                    "dataset": None if tmp else args.dataset, "steps": result["step"],
                                    "wall_minutes": wall / 60, "curve": curve, "rows": rows, "warmup": warm,
                                    "train_config": cfg.to_dict()}, draw, args.out)


def train_once(args, preset: str, minutes: float, eval_every: int, run_name: str, settings: dict):
    """One run of the real trainer on the bench data, ended by its time budget of `minutes` (max_minutes: evaluated
    once more at its end, as a curator's run; or by `--steps`); returns (result, curve of held-out MCD per
    evaluation, wall seconds, TrainConfig)."""
    from utils.training import TrainConfig, prepare_run, run
    from utils.workspace import read_jsonl

    import torch

    gpu = torch.cuda.is_available()
    # --defaults: the step count the Training tab offers (its schedule and EMA follow it); else unbounded
    max_steps = args.steps or ((20_000 if gpu else 2000) if args.defaults else 1_000_000)
    if args.defaults and gpu and not args.steps and "compile" not in settings:
        settings = {**settings, "compile": compile_without_limit(args, preset, max_steps)}
    cfg = TrainConfig.from_dict(dict(  # from_dict: a family's own setting (--ab blanks=...) by name too
        workspace=str(args.workspace), dataset=args.dataset, run=run_name, preset=preset, max_steps=max_steps,
        resume="none", eval_every=eval_every, checkpoint_every=eval_every, eval_clips=args.eval_clips or 8,
        sample_clips=1, mcd=args.mcd, log_every=max(10, eval_every // 5), keep_checkpoints=1,
        max_minutes=0 if args.steps else minutes, **settings))
    shutil.rmtree(Path(args.workspace) / "runs" / cfg.run, ignore_errors=True)  # metrics.jsonl of this run only
    config_path = prepare_run(cfg)
    budget = f"{args.steps} steps" if args.steps else f"{minutes:g} min"
    print(f"# {common.model_size(preset)}, {budget} budget, eval every {eval_every} steps, {settings}; "
          f"{common.machine()['summary']}", flush=True)
    t0 = time.time()
    result = run(config_path)
    wall = time.time() - t0
    evals = [r for r in read_jsonl(config_path.parent / "metrics.jsonl") if "mcd" in r]
    spent_eval, curve = 0.0, []
    for r in evals:
        spent_eval += r.get("eval_s", 0.0)
        curve.append({"step": r["step"], "minutes": (r["time"] - t0) / 60, "mcd": r["mcd"],
                      "train_minutes": (r["time"] - t0 - spent_eval) / 60})
    return result, curve, wall, cfg


def compile_without_limit(args, preset: str, max_steps: int) -> str:
    """What `compile: auto` decides for a curator's run of `max_steps` steps without a time limit: the bench's budget
    is a time limit, under which auto would decide for a run of that many minutes instead (utils/training/
    compile_pays.py), and this lane measures the first minutes of the default run."""
    from utils import hardware
    from utils.training import TrainConfig
    from utils.training import optimization as opt

    m = opt.resolve(TrainConfig(workspace=str(args.workspace), dataset=args.dataset, preset=preset,
                                max_steps=max_steps), hardware.detect(args.workspace))
    print(f"# compile as auto decides for a {max_steps}-step run without a time limit: {m.reasons['compile']}",
          flush=True)
    return "true" if m.compile else "false"


def warmup(run_dir: Path) -> dict:
    """What the run spent before it trained at speed, from its own files: seconds from Start to its first metrics line
    after a step (a loss or an evaluation: data, probe, compilation and the first steps included), the first step's
    seconds and the graphs compiled (when it compiled), and what the log says of them."""
    from utils.workspace import read_json, read_jsonl

    rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "time" in r and r.get("step")]  # losses, evals
    started = (read_json(run_dir / "status.json", default={}) or {}).get("started")
    log = (run_dir / "train.log").read_text(encoding="utf-8") if (run_dir / "train.log").exists() else ""
    first = re.search(r"first step took (\d+) s", log)
    graphs = re.findall(r"torch.compile: (\d+) graph", log)
    out = {"first_log_step": rows[0]["step"] if rows else None,
           "first_log_s": rows[0]["time"] - started if rows and started else None,
           "first_step_s": int(first.group(1)) if first else None, "graphs": int(graphs[-1]) if graphs else 0}
    said = (f"step {out['first_log_step']} logged {out['first_log_s']:.0f} s after Start" if out["first_log_s"]
            else "no step logged")
    if out["first_step_s"] is not None:
        said += f"; the first step took {out['first_step_s']} s (compilation included), {out['graphs']} graph(s) built"
    return {**out, "said": said}


def report_ab(args, preset, minutes, eval_every, results, tmp) -> None:
    """Side by side: held-out MCD of each setting at every evaluation step (same clips, same budget)."""
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    labels = [label for label, *_ in results]
    by_step: dict[int, dict] = {}
    for label, _, curve, _, _ in results:
        for c in curve:
            by_step.setdefault(c["step"], {"step": c["step"]})[label] = c["mcd"]
    summary = [{"setting": label, "steps": result["step"], "minutes": wall / 60,
                "best": min((c["mcd"] for c in curve), default=float("nan")),
                "last": curve[-1]["mcd"] if curve else float("nan")} for label, result, curve, wall, _ in results]
    print(common.markdown_table([("step", "step")] + [(lb, f"MCD dB, {lb}", "{:.2f}") for lb in labels],
                                [by_step[k] for k in sorted(by_step)]))
    print(common.markdown_table([("setting", "setting"), ("steps", "steps"), ("minutes", "minutes", "{:.1f}"),
                                 ("best", "best MCD dB", "{:.2f}"), ("last", "last MCD dB", "{:.2f}")], summary))

    def draw(fig):
        ax = fig.subplots()
        for label, _, curve, _, _ in results:
            ax.plot([c["step"] for c in curve], [c["mcd"] for c in curve], "o-", label=label)
        ax.set_xlabel("step")
        ax.set_ylabel("held-out MCD (dB, WORLD/SPTK, Griffin-Lim)")
        ax.legend(fontsize=8)

    common.save(f"ab_{args.ab.split('=')[0]}", {"preset": preset, "minutes_budget": minutes, "steps_budget": args.steps,
                                                "eval_every": eval_every, "summary": summary,
                                                "curves": {label: curve for label, _, curve, _, _ in results}},
                draw, args.out)


if __name__ == "__main__":
    main()
