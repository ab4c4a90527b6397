"""Amharic TTS Studio.

    python app.py                      start the web UI (add --share on Colab / Lightning AI)
    python app.py hardware [--json]    what this machine is and the training settings it gets
    python app.py g2p "ሰላም ነው"         normalized text and IPA
    python app.py prepare SOURCE --name NAME
    python app.py separate INPUT OUTPUT
    python app.py train --dataset NAME
    python app.py synth --voice NAME "TEXT" out.wav

Every subcommand accepts --workspace DIR (default ./workspace, or $AMHARIC_TTS_WORKSPACE). Each
one is a thin call into `utils/`, the same functions the UI uses. Nothing heavy runs at import.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import sys

from utils.events import StudioError, run_to_end
from utils.workspace import DEFAULT_WORKSPACE, Workspace

AUTH_ENV = "AMHARIC_TTS_AUTH"


# ---------------------------------------------------------------------------------------- UI
def add_ui_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                   help="interface to listen on (0.0.0.0 to reach it from other machines)")
    p.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", 7860)))
    p.add_argument("--share", action="store_true", help="public gradio.live link (password-protected)")
    p.add_argument("--auth", default=os.environ.get(AUTH_ENV),
                   help=f"USER:PASS required to open the app (also ${AUTH_ENV})")
    p.add_argument("--max-upload-mb", type=int, default=4096, help="largest accepted upload")


def resolve_auth(auth: str | None, share: bool) -> tuple[tuple[str, str] | None, str | None]:
    """Returns (credentials, message to print). A public link never opens without a password."""
    if auth:
        user, sep, password = auth.partition(":")
        if not sep or not user or not password:
            raise StudioError("--auth must look like USER:PASS (both parts non-empty).")
        return (user, password), None
    if share:
        password = secrets.token_urlsafe(12)
        return ("studio", password), (
            "A public share link is protected. Log in with\n"
            f"    user: studio\n    password: {password}\n"
            f"(set --auth USER:PASS or ${AUTH_ENV} to choose your own)"
        )
    return None, None


def cmd_ui(args) -> None:
    workspace = Workspace.open(args.workspace)
    # Gradio's upload/output cache lives inside the workspace: everything served stays under it.
    os.environ.setdefault("GRADIO_TEMP_DIR", str(workspace.root / ".cache" / "gradio"))
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from webui.app import launch

    credentials, message = resolve_auth(args.auth, args.share)
    if message:
        print(message, flush=True)
    launch(workspace, host=args.host, port=args.port, share=args.share,
           auth=credentials, max_upload_mb=args.max_upload_mb)


# ---------------------------------------------------------------------------------- hardware
def add_hardware_command(sub) -> None:
    p = sub.add_parser("hardware", help="detected hardware and recommended training settings")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_hardware)


def cmd_hardware(args) -> None:
    from utils import hardware

    report = hardware.detect()
    print(json.dumps(report.to_dict(), indent=2) if args.json else hardware.describe(report))


# --------------------------------------------------------------------------------------- g2p
def add_g2p_command(sub) -> None:
    p = sub.add_parser("g2p", help="Amharic text -> normalized text and IPA")
    p.add_argument("text", nargs="?", help="Amharic text")
    p.add_argument("--words", metavar="FILE", help="one word per line -> word<TAB>IPA segments")
    p.set_defaults(func=cmd_g2p)


def cmd_g2p(args) -> None:
    raise StudioError("The Amharic text frontend is not built yet.")


# ----------------------------------------------------------------------------------- prepare
def add_prepare_command(sub) -> None:
    p = sub.add_parser("prepare", help="import, check and prepare a dataset")
    p.add_argument("source", help="zip, folder, CSV/TSV, or long recording (+ .srt/.vtt)")
    p.add_argument("--name", required=True, help="dataset name (folder under workspace/datasets)")
    p.add_argument("--format", default="auto", choices=["auto", "ljspeech", "csv", "pairs", "subtitles", "long"])
    p.set_defaults(func=cmd_prepare)


def cmd_prepare(args) -> None:
    raise StudioError("Dataset preparation is not built yet.")


# ---------------------------------------------------------------------------------- separate
def add_separate_command(sub) -> None:
    p = sub.add_parser("separate", help="remove music under speech")
    p.add_argument("input", nargs="?", help="audio file")
    p.add_argument("output", nargs="?", help="where to write the speech")
    p.add_argument("--backend", default="auto", choices=["auto", "spleeter", "demucs", "dsp"])
    p.add_argument("--residual", metavar="FILE", help="also write what was removed")
    p.add_argument("--dataset", metavar="NAME", help="process every clip of a dataset instead")
    p.set_defaults(func=cmd_separate)


def cmd_separate(args) -> None:
    raise StudioError("Music removal is not built yet.")


# ------------------------------------------------------------------------------------- train
def add_train_command(sub) -> None:
    p = sub.add_parser("train", help="train or fine-tune the acoustic model")
    p.add_argument("--dataset", required=True)
    p.add_argument("--run", help="run name (default: dataset + time)")
    p.add_argument("--preset", default="small", choices=["tiny", "small", "base"])
    p.add_argument("--init", metavar="CHECKPOINT", help="fine-tune from this checkpoint folder")
    p.add_argument("--resume", default=None, help="'auto' continues the run's last checkpoint")
    p.add_argument("--max-steps", type=int)
    p.add_argument("--precision", choices=["auto", "bf16", "fp16", "fp32"], default="auto")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--grad-checkpointing", action="store_true")
    p.set_defaults(func=cmd_train)


def cmd_train(args) -> None:
    raise StudioError("Training is not built yet.")


# ------------------------------------------------------------------------------------- synth
def add_synth_command(sub) -> None:
    p = sub.add_parser("synth", help="speak Amharic text with a trained voice")
    p.add_argument("--voice", required=True, help="voice name or checkpoint folder")
    p.add_argument("text")
    p.add_argument("output")
    p.set_defaults(func=cmd_synth)


def cmd_synth(args) -> None:
    raise StudioError("Inference is not built yet.")


# -------------------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="app.py", description="Amharic TTS Studio",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--workspace", default=argparse.SUPPRESS, help="folder holding all user data")
    parser.add_argument("--workspace", default=str(DEFAULT_WORKSPACE), help="folder holding all user data")
    add_ui_arguments(parser)
    sub = parser.add_subparsers(dest="command", parser_class=lambda **kw: argparse.ArgumentParser(parents=[common], **kw))
    for add in (add_hardware_command, add_g2p_command, add_prepare_command, add_separate_command,
                add_train_command, add_synth_command):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        (args.func if args.command else cmd_ui)(args)
    except StudioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
