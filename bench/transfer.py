"""Transfer: does a base made here, fine-tuned on Amharic, beat the same model from random weights?

    python bench/transfer.py --family matcha --quick          # 2-core CPU, tiny sizes (the base: once, then cached)
    python bench/transfer.py --family f5 --quick
    python bench/transfer.py --family f5 --size full          # the real sizes, on a GPU (the one-line change)
    python bench/transfer.py --family matcha --size test --seeds 1 2 3 4 5   # the margin tests/test_transfer.py uses

Why: three families exist to fine-tune a pretrained base, and Matcha continues from a checkpoint; a recipe that wrecks
the base (a learning rate 100x too high, a base not loaded, a symbol table re-initialised) passes every mechanical
test. The hub cannot be reached here, so the base is made here (tests/transfer_bases.py): trained through the
studio's own training on espeak-ng speech of Swahili, Spanish and English in six voices (tests/transfer_data.py),
saved in the layout the family's users download, and kept in the cache workspace. Then both starts train on Amharic
in a voice the base never heard, through `app.py train --engine FAMILY [--init BASE]`, every setting "auto" but the
schedule: the same clips, held-out sentences, steps and Griffin-Lim. Printed: the base's own held-out MCD, both
curves (held-out MCD, log-mel, the run's own evaluation), the steps each start needs to reach the scratch run's
final MCD, and the hazards that wreck a base, one row each. The last line: `transfer FAMILY: pretrained A dB,
scratch B dB after N steps`.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import common  # bench/common.py (the script's folder is on sys.path); puts the repository root there too

STEPS = {"test": 10, "tiny": 100, "full": 5000}  # fine-tune steps of each start (test: tests/test_transfer.py's)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", required=True, choices=["matcha", "f5", "mms", "omnivoice"], help="the family to measure")
    p.add_argument("--size", default="tiny", choices=["test", "tiny", "full"],
                   help="tiny: CPU sizes; full: the real sizes; test: tests/test_transfer.py's (its margins, over --seeds)")
    p.add_argument("--quick", action="store_true", help="the tiny sizes on a CPU (the same as --size tiny)")
    p.add_argument("--steps", type=int, default=None, help="fine-tune steps of each start (tiny 100, full 5000)")
    p.add_argument("--seeds", type=int, nargs="+", default=[1234], help="one comparison per seed (data order, noise)")
    p.add_argument("--cache", type=Path, default=common.OUT / "transfer-cache",
                   help="the workspace that keeps the data and each family's base between runs")
    common.add_machine_args(p)
    args = p.parse_args()
    common.start(args)

    from tests.transfer_bases import AMHARIC, BASE_DATA, SIZES, TEST_RUNS, Transfer
    from tests.transfer_data import amharic, other_languages
    from utils.workspace import Workspace

    name = "tiny" if args.quick else args.size
    size, steps = SIZES[name], args.steps or STEPS[name]
    settings = TEST_RUNS if name == "test" else {}  # the test's runs: one evaluation, no average
    ws = Workspace.open(args.cache / name)
    if not (ws.dataset_dir(AMHARIC) / "manifest.jsonl").is_file() and not ws.list_datasets():
        print(f"speaking {size.base_clips} + {size.base_val} clips of other languages and {size.clips} + {size.val} "
              "Amharic clips with espeak-ng ...", flush=True)
        other_languages(ws, BASE_DATA, size.base_clips, size.base_val)
        amharic(ws, AMHARIC, size.clips, size.val)
    t = Transfer(args.family, ws, size)
    what, unit = ("held-out MCD", "dB") if t.score == "mcd" else ("held-out audio-token loss", "nats")
    cached = t.from_hub or (t.base_folder() / "DONE").is_file()
    t0 = time.time()
    base = t.base()
    base_s = 0.0 if cached else time.time() - t0
    made = ("from the hub (the first fine-tune downloads it), against random weights of its size" if t.from_hub else
            f"{'cached' if cached else f'trained in {base_s / 60:.1f} min'}, {t.steps} steps on other languages, "
            f"their {what} {t.base_mcd():.2f} {unit}")
    print(f"# base: {base} ({made}); {common.machine()['summary']}", flush=True)

    runs = []
    for seed in args.seeds:
        t1 = time.time()
        pretrained = t.start(f"{args.family}-pretrained-{seed}", True, steps, cli=True, seed=seed, **settings)
        scratch = t.start(f"{args.family}-scratch-{seed}", False, steps, cli=True, seed=seed, **settings)
        runs.append({"seed": seed, "pretrained": pretrained, "scratch": scratch, "seconds": time.time() - t1})
        print(curve_table(pretrained, scratch, f"{t.score} {unit}"))
        print(f"steps to the scratch run's final {scratch[-1][1]:.2f} {unit}: pretrained {reached(pretrained, scratch)}, "
              f"scratch {steps}", flush=True)
    hazards = hazard_rows(t, f"{args.family}-pretrained-{args.seeds[0]}", steps)
    print(common.markdown_table([("hazard", "hazard"), ("value", "what the run did"), ("why", "why it matters")],
                                hazards))
    # what tests/test_transfer.py asserts: the pretrained curve's worst point (step 0 included) against the scratch
    # run's final MCD
    margins = [r["scratch"][-1][1] - max(m for _, m in r["pretrained"]) for r in runs]
    if len(runs) > 1:
        print(f"margin (scratch's final - pretrained's worst, {unit}) over {len(runs)} seeds: least {min(margins):.2f}, "
              f"mean {sum(margins) / len(margins):.2f}")
    common.save(f"transfer-{args.family}-{name}",
                {"family": args.family, "size": vars(size), "steps": steps, "base": str(base),
                 "base_mcd": t.base_mcd(), "base_seconds": base_s, "runs": runs, "hazards": hazards,
                 "margins": margins}, out=args.out)
    last = runs[0]
    print(f"transfer {args.family}: pretrained {last['pretrained'][-1][1]:.2f} {unit}, scratch "
          f"{last['scratch'][-1][1]:.2f} {unit} after {steps} steps" + ("" if t.score == "mcd" else f" ({what})"))


def curve_table(pretrained: list, scratch: list, score: str = "MCD dB") -> str:
    at = dict(scratch)
    rows = [{"step": s, "pretrained": m, "scratch": at.get(s)} for s, m in pretrained]
    return common.markdown_table([("step", "step"), ("pretrained", f"pretrained {score}", "{:.2f}"),
                                  ("scratch", f"scratch {score}", "{:.2f}")], rows)


def reached(pretrained: list, scratch: list) -> str:
    """The first evaluation at which the pretrained start is at or below the scratch run's final MCD."""
    goal = scratch[-1][1]
    hit = next((s for s, m in pretrained if m <= goal), None)
    return "not reached" if hit is None else f"{hit} (step 0 is the base before any step)" if hit == 0 else str(hit)


def hazard_rows(t, name: str, steps: int) -> list[dict]:
    """What wrecks a base, as the fine-tune `name` did it: its learning rate (chosen, after a batch probe on a GPU,
    after a resume), its symbol table, the EMA's starting point, the warm-up."""
    from utils.workspace import read_json, read_jsonl

    run_dir = t.ws.run_dir(name)
    config = read_json(run_dir / "config.json")
    rows = read_jsonl(run_dir / "metrics.jsonl")
    evals = [r for r in rows if "mcd" in r]
    lr = config["resolved"]["lr"]
    logged = [r for r in rows if "lr" in r]
    out = [{"hazard": "learning rate (auto)", "value": f"{lr:.2e}", "why": config["reasons"]["lr"][:160]},
           {"hazard": "learning rate after a batch probe", "value": f"{probed_lr(t, name):.2e}",
            "why": "a GPU with an automatic batch rescales the rate after its probe: it must rescale the family's own"},
           {"hazard": "learning rate after a resume", "value": resumed_lr(t, steps),
            "why": "a resumed fine-tune must go on at the rate of its schedule, not a family default"}]
    out += symbol_rows(t, name)
    first = evals[1] if len(evals) > 1 else {}
    out.append({"hazard": "EMA's starting point", "value": f"step 0 {evals[0]['mcd']:.2f} dB; step {first.get('step')}: "
                f"EMA {first.get('mcd_ema', float('nan')):.2f}, raw {first.get('mcd_raw', float('nan')):.2f} dB "
                f"(decay {config['resolved'].get('ema_decay')})",
                "why": "an average that starts from random weights would score far worse than the raw ones"})
    from utils.training import optimization as opt
    from utils.training.config import TrainConfig

    cfg = TrainConfig.from_dict(config["train"])
    out.append({"hazard": "warm-up", "value": f"{opt.warmup_updates(cfg)} updates; lr {logged[0]['lr']:.2e} at step "
                f"{logged[0]['step']}; base {evals[0]['mcd']:.2f} dB at step 0, {first.get('mcd', float('nan')):.2f} "
                f"at step {first.get('step')}",
                "why": "a full rate on the first updates can undo the base before the new symbols have settled"})
    return out


ADAPTERS = {"matcha": "utils.matcha.adapter:MatchaAdapter", "f5": "utils.f5.adapter:F5Adapter",
            "mms": "utils.mms.adapter:MmsAdapter", "omnivoice": "utils.omnivoice.adapter:OmniVoiceAdapter"}


def probed_lr(t, name: str) -> float:
    """The rate the fine-tune `name` would train at on a GPU once its batch probe measured the batch: its adapter as
    the run builds it on a GPU machine, then the rescaling apply_probe does (what once put Matcha's rate back into
    default F5 fine-tunes)."""
    from utils import hardware
    from utils.hardware import GPUInfo, HardwareReport
    from utils.training import optimization as opt
    from utils.training.config import read_run_config

    cfg, _ = read_run_config(t.ws.run_dir(name) / "config.json")
    gpu = HardwareReport(gpus=[GPUInfo(0, "NVIDIA L4", 22.0, "8.9")], cpu_count=8, ram_gb=32, disk_free_gb=100)
    machine = adapter_of(cfg, gpu).machine
    opt.set_effective_batch(machine, cfg, 1, {"lr_batch_scale": hardware.Setting(1.0, "one process")})
    return machine.lr


def schedule_lr(cfg, peak: float, step: int) -> float:
    """The rate the family's own schedule gives `step` of an uninterrupted run of cfg.max_steps (Matcha and F5 decay
    by a cosine, MMS keeps VITS's constant rate): its adapter's lr_at, as the loop reads it."""
    from utils import hardware

    adapter = adapter_of(cfg, hardware.detect(cfg.workspace))
    adapter.machine.lr = peak
    return adapter.lr_at(step)


def adapter_of(cfg, report):
    """The run's family adapter as a run on `report`'s machine builds it (its settings resolved, no model yet)."""
    import importlib

    module, cls = ADAPTERS[cfg.engine].split(":")
    return getattr(importlib.import_module(module), cls)(cfg, report)


RESUME_STEPS = 20  # the resume check's run: half, then the rest after a resume


def resumed_lr(t, steps: int) -> str:
    """A fine-tune of half of RESUME_STEPS, then `app.py train --continue --max-steps RESUME_STEPS`: the rate at the
    first resumed step against the schedule the first part was resolved with (what an uninterrupted run trains at)."""
    from utils.training.config import read_run_config
    from utils.workspace import read_json, read_jsonl
    from tests.helpers import cli

    steps = min(steps, RESUME_STEPS)
    half = max(1, steps // 2)
    run = f"{t.family}-resume-check"
    t.start(run, True, half, cli=True, log_every=1)
    peak = read_json(t.ws.run_dir(run) / "config.json")["resolved"]["lr"]
    done = cli("--workspace", str(t.ws.root), "train", "--run", run, "--continue", "--max-steps", str(steps),
               timeout=24 * 3600)
    if done.returncode != 0:
        return f"the resume failed: {done.stderr[-300:]}"
    cfg, _ = read_run_config(t.ws.run_dir(run) / "config.json")
    used = next(r["lr"] for r in read_jsonl(t.ws.run_dir(run) / "metrics.jsonl")
                if r.get("step") == half + 1 and "lr" in r)
    planned = schedule_lr(cfg, peak, half)
    return (f"{used:.2e} at step {half + 1} after a resume at step {half}; {planned:.2e} is the schedule's "
            f"({'the same' if abs(used - planned) <= 1e-6 * planned else 'DIFFERENT'})")


def symbol_rows(t, name: str) -> list[dict]:
    """The fine-tune's symbol table against the base's: the base's symbols at their ids, the new ones, and how far
    the known symbols' rows of the text table moved (cosine to the base's rows at the run's end)."""
    base_symbols, symbols, cos = t.symbols(name)
    kept = symbols[: len(base_symbols)] == base_symbols
    added = symbols[len(base_symbols):]
    return [{"hazard": "symbol table", "value": f"{len(base_symbols)} base symbols "
             f"{'kept at their ids' if kept else 'MOVED'}; {len(added)} added ({' '.join(added[:12])}"
             f"{' ...' if len(added) > 12 else ''})",
             "why": "a new language adds symbols; the ones the base knows must keep their ids and rows"},
            {"hazard": "known symbols' rows", "value": f"cosine to the base's rows after the run: mean "
             f"{float(cos.mean()):.3f}, least {float(cos.min()):.3f}",
             "why": "rows re-initialised (or read in another order) would be near 0: the base's text knowledge lost"}]


if __name__ == "__main__":
    main()
