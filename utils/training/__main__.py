"""python -m utils.training --config workspace/runs/RUN/config.json  (also under torchrun for DDP).

Exit codes: 0 finished or stopped on request (checkpoint saved), 1 failed, 2 a problem with the input."""
from __future__ import annotations

import argparse
import os
import sys

from utils.events import StudioError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m utils.training", description="train a voice model")
    p.add_argument("--config", required=True, help="runs/RUN/config.json written by prepare_run / app.py train")
    args = p.parse_args(argv)
    from utils.training import run
    from utils.training.loop import started_to_train

    started_to_train()
    try:
        result = run(args.config)
    except StudioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0 if result["state"] in ("finished", "stopped") else 1


def leave(code: int) -> None:
    """Exit with `code`. A rank of a torchrun run leaves without the interpreter's teardown: its work is saved and
    its process group gone, but gloo's threads can still abort the exit ("terminate called without an active
    exception", seen under load), and torchrun would report a finished run as failed."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    leave(main())
