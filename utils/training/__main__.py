"""python -m utils.training --config workspace/runs/RUN/config.json  (also under torchrun for DDP).

Exit codes: 0 finished or stopped on request (checkpoint saved), 1 failed, 2 a problem with the input."""
from __future__ import annotations

import argparse
import sys

from utils.events import StudioError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m utils.training", description="train the acoustic model")
    p.add_argument("--config", required=True, help="runs/RUN/config.json written by prepare_run / app.py train")
    args = p.parse_args(argv)
    from utils.training import run

    try:
        result = run(args.config)
    except StudioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0 if result["state"] in ("finished", "stopped") else 1


if __name__ == "__main__":
    sys.exit(main())
