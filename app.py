"""Amharic TTS Studio.

    python app.py                      start the web UI (add --share on Colab / Lightning AI)
    python app.py hardware [--json]    what this machine is and the training settings it gets
    python app.py g2p "ሰላም ነው"         normalized text and IPA
    python app.py prepare SOURCE --name NAME
    python app.py replace-recording NAME ROW TAKE.wav   a new take of one row
    python app.py delete-dataset NAME [--yes]
    python app.py separate INPUT OUTPUT
    python app.py train --dataset NAME
    python app.py synth "TEXT" --voice VOICE --out FILE.wav [--speed 1.0]
    python app.py clip-voice NAME --dataset D --row ID | --clip FILE --text "..." [--accept-licence]
    python app.py export-voice RUN NAME [--vocoder V] [--onnx]
    python app.py check-transcripts --dataset NAME [--method auto|alignment|asr] [--json]
    python app.py transcribe --dataset NAME [--model ID] [--lang amh] [--json]

Every subcommand accepts --workspace DIR (default ./workspace, or $AMHARIC_TTS_WORKSPACE). Each
one is a thin call into `utils/`, the same functions the UI uses. Nothing heavy runs at import.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import sys
from pathlib import Path

from utils.environment import gpu_warning, torch_problem
from utils.events import StudioError, plain_text, run_to_end
from utils.workspace import DEFAULT_WORKSPACE, Workspace

AUTH_ENV = "AMHARIC_TTS_AUTH"
DATA_DIRS_ENV = "AMHARIC_TTS_DATA_DIRS"


# ---------------------------------------------------------------------------------------- UI
def add_ui_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                   help="interface to listen on (0.0.0.0 to reach it from other machines)")
    p.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", 7860)),
                   help="the port the page is served on (default: $GRADIO_SERVER_PORT, else 7860)")
    p.add_argument("--share", action="store_true", help="public gradio.live link (password-protected)")
    p.add_argument("--auth", default=os.environ.get(AUTH_ENV),
                   help=f"USER:PASS required to open the app (also ${AUTH_ENV})")
    p.add_argument("--max-upload-mb", type=int, default=4096, help="largest accepted upload")
    p.add_argument("--data-dir", action="append", metavar="DIR",
                   default=[d for d in os.environ.get(DATA_DIRS_ENV, "").split(os.pathsep) if d],
                   help="a folder outside the workspace (a mounted Drive, say) whose datasets the Dataset tab may "
                        f"prepare by path; repeat for more (also ${DATA_DIRS_ENV}, separated by '{os.pathsep}'). "
                        "Nothing else outside the workspace can be read from the page")


def resolve_auth(auth: str | None, share: bool) -> tuple[tuple[str, str] | None, str | None]:
    """Returns (credentials, message to print). `share`: other machines can reach the app (--share, or a
    --host other than loopback); then it never opens without a password."""
    if auth:
        user, sep, password = auth.partition(":")
        if not sep or not user or not password:
            raise StudioError("--auth must look like USER:PASS (both parts non-empty).")
        return (user, password), None
    if share:
        password = secrets.token_urlsafe(12)
        return ("studio", password), (
            "Other machines can reach this app (--share or --host), so it asks for a login:\n"
            f"    user: studio\n    password: {password}\n"
            f"(set --auth USER:PASS or ${AUTH_ENV} to choose your own)"
        )
    return None, None


def data_folders(dirs: list[str]) -> tuple[Path, ...]:
    """The owner's data folders, resolved; one that does not exist is refused by name at start."""
    folders = tuple(Path(d).expanduser().resolve() for d in dirs)
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        raise StudioError(f"--data-dir {missing[0]}: no such folder (mount the drive first, or fix the path).")
    return folders


def reachable_from_elsewhere(share: bool, host: str) -> bool:
    """A share link, or listening on an interface other machines can reach (0.0.0.0, a LAN address)."""
    return share or not (host == "localhost" or host == "::1" or host.startswith("127."))


def cmd_ui(args) -> None:
    workspace = Workspace.open(args.workspace)
    # Gradio's upload/output cache lives inside the workspace: everything served stays under it.
    os.environ.setdefault("GRADIO_TEMP_DIR", str(workspace.root / ".cache" / "gradio"))
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from webui.app import launch

    credentials, message = resolve_auth(args.auth, reachable_from_elsewhere(args.share, args.host))
    if message:
        print(message, flush=True)
    launch(workspace, host=args.host, port=args.port, share=args.share,
           auth=credentials, max_upload_mb=args.max_upload_mb, data_dirs=data_folders(args.data_dir))


# ---------------------------------------------------------------------------------- hardware
def add_hardware_command(sub) -> None:
    p = sub.add_parser("hardware", help="detected hardware and recommended training settings")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_hardware)


def cmd_hardware(args) -> None:
    from utils import hardware

    from utils import families
    from utils.transcripts import recognizers

    report = hardware.detect()
    if args.json:
        print(json.dumps({**report.to_dict(), "families": {name: dict(zip(("can_train", "why"), families.get(name)
                          .machine_verdict(report))) for name in families.names()}}, indent=2))
    else:
        print(hardware.describe(report) + "\n\n" + "\n".join(families.machine_lines(report)) + "\n"
              + recognizers.line(recognizers.choose([g.memory_gb for g in report.gpus])))


# -------------------------------------------------------------------------------------- list
def add_list_command(sub) -> None:
    p = sub.add_parser("list", help="what the workspace holds: datasets, runs, voices and vocoders")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_list)


def workspace_contents(ws: Workspace) -> dict:
    """Datasets (usable clips and hours, counted from their tables), runs (the Training tab's list), voices and
    vocoders: a curator on the command line had to read the workspace's folders."""
    from utils.datasets.manifest import summarize
    from utils.inference import list_vocoders
    from utils.runs.views import run_table
    from utils.voice_folders import list_voices

    datasets = [{"name": name, **{k: summarize(ws, name, [])[k] for k in ("usable_clips", "clips", "usable_hours")}}
                for name in ws.list_datasets()]
    runs = [{k: r[k] for k in ("run", "status", "step", "max_steps", "eta_s", "dataset", "preset", "doing")}
            for r in run_table(ws)]
    return {"datasets": datasets, "runs": runs, "voices": list_voices(ws), "vocoders": list_vocoders(ws)}


def cmd_list(args) -> None:
    from utils.runs.views import format_seconds
    from utils.training.speed import say_hours

    held = workspace_contents(Workspace.open(args.workspace))
    if args.json:
        print(json.dumps(held, ensure_ascii=False, indent=2))
        return
    lines = [f"datasets ({len(held['datasets'])}):"]
    lines += [f"  {d['name']}  {d['usable_clips']} usable of {d['clips']} clips, {say_hours(d['usable_hours'])}"
              for d in held["datasets"]]
    lines += [f"runs ({len(held['runs'])}):"]
    have = {d["name"] for d in held["datasets"]}
    # its dataset after a dot: "...; Resume trains on  (am, tiny)" read as one phrase
    lines += [f"  {r['run']}  {r['status']} at step {r['step']}" + (f" of {r['max_steps']}" if r.get("max_steps") else "")
              + (f", about {format_seconds(r['eta_s'])} left" if r.get("eta_s") else "")
              + f"{': ' + r['doing'] if r['doing'] else ''}"
              f" · dataset {r['dataset']}{'' if r['dataset'] in have else ' (deleted)'}, {r['preset']}"
              for r in held["runs"]]
    lines += [f"voices ({len(held['voices'])}): {', '.join(held['voices']) or '-'}",
              f"vocoders ({len(held['vocoders'])}): {', '.join(held['vocoders']) or '-'}"]
    if held["runs"]:  # the list says "Resume" as the Training tab does: the commands for it here
        lines += ["a run: go on with it (Resume): python app.py train --run RUN --continue; stop it: python app.py "
                  "stop RUN; speak with it: python app.py synth --voice RUN \"ሰላም\""]
    print("\n".join(lines))


# --------------------------------------------------------------------------------------- g2p
def add_g2p_command(sub) -> None:
    p = sub.add_parser("g2p", help="Amharic text -> normalized text and IPA")
    p.add_argument("text", nargs="?", help="Amharic text")
    p.add_argument("--words", metavar="FILE", help="one word per line -> word<TAB>IPA segments")
    p.set_defaults(func=cmd_g2p)


def cmd_g2p(args) -> None:
    from pathlib import Path

    from utils.text import load_user_dict, word_list_ipa
    from utils.text.convert import SPEAKABLE_WORDS, analyze, speakable

    user_dict = load_user_dict(Workspace(Path(args.workspace).expanduser().resolve()))
    if args.words:
        try:
            lines = sys.stdin.read().splitlines() if args.words == "-" else Path(args.words).read_text(encoding="utf-8-sig").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise StudioError(f"Cannot read the word list {args.words}: {exc}. Give a UTF-8 text file, one word a line.")
        for number, (word, segments) in enumerate(word_list_ipa(lines, user_dict), 1):
            if len(word.split()) > 1:
                print(f"warning: line {number} holds {len(word.split())} words ({word}): their sounds are printed as "
                      "one word's. Put one word a line.", file=sys.stderr)
            print(f"{word}\t{' '.join(segments)}")
        return
    if not (args.text or "").strip():
        raise StudioError('Give Amharic text (python app.py g2p "ሰላም ነው") or --words FILE.')
    reading = analyze(args.text, user_dict)  # as the G2P tab reads it: a dictionary word is not warned about
    if not speakable(args.text, user_dict):
        print(f"warning: a voice will not speak this text alone (synth refuses it): it has no {SPEAKABLE_WORDS}",
              file=sys.stderr)
    for warning in reading.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(reading.normalized)
    print(reading.ipa)


# ----------------------------------------------------------------------------------- prepare
def add_prepare_command(sub) -> None:
    p = sub.add_parser("prepare", help="import, check and prepare a dataset",
                       epilog="Exit status: 0 when every file given was read; 1 when the dataset was prepared but some "
                              "files given were not read (each named, with what to do); 2 when nothing was prepared.")
    p.add_argument("source", help="zip, folder, CSV/TSV, or long recording (+ .srt/.vtt)")
    p.add_argument("--name", required=True, help="dataset name (folder under workspace/datasets)")
    p.add_argument("--format", default="auto", choices=["auto", "ljspeech", "csv", "pairs", "subtitles", "long"],
                   help="how the source is laid out (auto: found from its files): ljspeech = metadata.csv + wavs/; "
                        "csv = a CSV/TSV with audio and text columns; pairs = audio files each with a .txt of the same "
                        "name; subtitles = long recordings with .srt/.vtt; long = long recordings cut at pauses")
    p.add_argument("--in-place", action="store_true", help="a folder source is read where it is (a mounted drive), "
                   "not copied into the dataset's raw/: it must stay there for the dataset to be prepared again")
    p.add_argument("--half-mels", action="store_true", help="keep the mel cache in 16-bit floats: half its size on "
                   "disk, read back within 0.01 of 32-bit")
    p.add_argument("--drop-uploads", action="store_true", help="delete raw/'s copy of the uploads once the clips are "
                   "made (a small disk); preparing again then needs the recordings given again")
    p.add_argument("--audio-column", help="a CSV/TSV's column naming each clip's audio file, where its header does not "
                   "say which (the Dataset tab's column pickers)")
    p.add_argument("--text-column", help="a CSV/TSV's column holding each clip's transcript")
    p.add_argument("--speaker-column", help="a CSV/TSV's column naming each clip's speaker (optional)")
    p.set_defaults(func=cmd_prepare)


def cmd_prepare(args) -> int:
    from utils.datasets import prepare
    from utils.datasets.config import PrepareConfig

    workspace = Workspace.open(args.workspace)
    in_place = (Path(args.source).resolve().parent,) if args.in_place else ()
    cfg = PrepareConfig(half_mels=args.half_mels, keep_uploads=not args.drop_uploads)
    columns = {k: v for k in ("audio", "text", "speaker") if (v := getattr(args, f"{k}_column"))} or None
    not_read: list[str] = []
    summary = run_to_end(uploads_not_read(prepare(workspace, args.name, args.source, fmt=args.format,
                                                  in_place=in_place, cfg=cfg, columns=columns), not_read), print)
    print(json.dumps(summary, ensure_ascii=False, indent=2))
    if not summary or not summary.get("clips"):
        raise StudioError(f"nothing usable was found in {args.source}; see "
                          f"{workspace.dataset_dir(args.name) / 'report.json'} for what was wrong with each file.")
    if not_read:  # a script's `prepare ... && train ...` must not go on as if all it gave was in the dataset
        print(f"error: {len(not_read)} of the files given {'was' if len(not_read) == 1 else 'were'} not read (each "
              f"named above with what to do); {args.name} was prepared from the rest.", file=sys.stderr)
        return NOT_ALL_READ
    return 0


NOT_ALL_READ = 1  # prepare's exit status when some files given were refused (a link, a zip's unsafe entry)


def uploads_not_read(events, into: list[str]):
    """The events, passed on; the messages of the files the import refused (read as given) collected `into`."""
    for event in events:
        if event.stage == "import" and event.level == "warning":
            into.append(event.message)
        yield event


def add_export_dataset_command(sub) -> None:
    p = sub.add_parser("export-dataset", help="write a dataset's rows to a .csv (a spreadsheet) or .jsonl file")
    p.add_argument("name", help="the dataset (a folder under workspace/datasets)")
    p.add_argument("out", help="the file to write: NAME.csv (to read or share; not read back) or NAME.jsonl "
                   "(every field; edited and put in the dataset's folder as manifest.jsonl, it replaces the rows)")
    p.set_defaults(func=cmd_export_dataset)


def cmd_export_dataset(args) -> None:
    from pathlib import Path

    from utils.datasets import export_rows

    out = Path(args.out).expanduser()
    if not out.parent.is_dir():  # a mistyped folder is said, not made
        raise StudioError(f"{out.parent} is not a folder: create it first, or give the file another path.")
    print(f"wrote {export_rows(Workspace.open(args.workspace), args.name, out)}")


def add_retake_command(sub) -> None:
    p = sub.add_parser("replace-recording", help="a new take of one row: its recording replaced (the old one kept "
                                                  "hidden beside it) and its clip made again")
    p.add_argument("name", help="the dataset (a folder under workspace/datasets)")
    p.add_argument("row", help="the row's id, as its table and export-dataset name it")
    p.add_argument("take", help="the new recording (any audio the studio reads; written as the old one's format)")
    p.set_defaults(func=cmd_retake)


def cmd_retake(args) -> int:
    from utils.datasets.retake import replace_recording

    summary = run_to_end(replace_recording(Workspace.open(args.workspace), args.name, args.row, args.take), print)
    print(json.dumps(summary, ensure_ascii=False, indent=2))
    return 0


def add_delete_dataset_command(sub) -> None:
    p = sub.add_parser("delete-dataset", help="delete a dataset folder (runs trained on it keep their checkpoints)")
    p.add_argument("name", help="the dataset (a folder under workspace/datasets)")
    p.add_argument("--yes", action="store_true", help="confirm; without it, says what would go and which runs "
                                                      "were trained on it")
    p.set_defaults(func=cmd_delete_dataset)


def cmd_delete_dataset(args) -> None:
    from utils.datasets.deletion import delete_dataset

    print(delete_dataset(Workspace.open(args.workspace), args.name, confirmed=args.yes,
                         how_to_confirm="run the same command with --yes"))


def add_stop_command(sub) -> None:
    p = sub.add_parser("stop", help="stop a run training in the background (or waiting in the queue): it finishes "
                                    "its step and saves; the same command again kills it")
    p.add_argument("run", help="the run's name (python app.py list shows them)")
    p.set_defaults(func=cmd_stop)


def add_dataset_arg(p) -> None:
    p.add_argument("--dataset", required=True, help="the dataset's name (python app.py list names them)")


def existing_run(args) -> Workspace:
    """The workspace, once the run args.run is found in it (else refused, saying where the names are listed)."""
    ws = Workspace.open(args.workspace)
    if not (ws.run_dir(args.run) / "config.json").exists():
        raise StudioError(f"There is no run called {args.run} (python app.py list shows the runs).")
    return ws


def cmd_stop(args) -> None:
    from utils import jobs

    print(jobs.stop(existing_run(args), args.run, again="Run the same command again", by="python app.py stop"))


def add_delete_run_command(sub) -> None:
    p = sub.add_parser("delete-run", help="delete a run: its checkpoints, curves and samples (voices exported from "
                                          "it stay)")
    p.add_argument("run", help="the run's name (python app.py list shows them)")
    p.add_argument("--yes", action="store_true", help="confirm; without it, says what would go")
    p.set_defaults(func=cmd_delete_run)


def cmd_delete_run(args) -> None:
    from utils.runs import control

    if not args.yes:
        from utils.training.checkpoint import step_folders

        ws = existing_run(args)

        kept = [p.name for _, p in step_folders(ws.run_dir(args.run) / "checkpoints")]
        raise StudioError(f"Deleting run {args.run} removes its {len(kept)} checkpoint(s) ({', '.join(kept) or 'none'})"
                          ", curves and samples; voices exported from it stay. It cannot be undone. To delete it, "
                          "run the same command with --yes.")  # refused, as delete-dataset without --yes is
    print(control.delete(Workspace.open(args.workspace), args.run))


# ---------------------------------------------------------------------------------- separate
def add_separate_command(sub) -> None:
    p = sub.add_parser("separate", help="remove music under speech")
    p.add_argument("input", nargs="?", help="audio file")
    p.add_argument("output", nargs="?", help="where to write the speech")
    p.add_argument("--backend", default="auto", choices=["auto", "spleeter", "demucs", "dsp"],
                   help="auto: the best this machine has (said before it runs); spleeter: offline, installed; "
                        "demucs: the best, its ~80 MB of weights downloaded on first use; dsp: no model, rougher")
    p.add_argument("--residual", metavar="FILE", help="also write what was removed")
    p.add_argument("--dataset", metavar="NAME", help="process every clip of a dataset instead (a run cut off goes "
                   "on where it stopped)")
    p.add_argument("--redo", action="store_true", help="with --dataset: check again the clips done before")
    p.set_defaults(func=cmd_separate)


def cmd_separate(args) -> None:
    from utils import separation
    from utils.separation import dataset

    if args.dataset and (args.input or args.output or args.residual):
        raise StudioError("Give INPUT and OUTPUT files, or --dataset NAME, not both: with --dataset every clip's "
                          "speech goes beside it in the workspace, and the files named were not read.")
    if args.dataset:
        events = dataset.process_dataset(Workspace.open(args.workspace), args.dataset, backend=args.backend,
                                         redo=args.redo)
    elif args.input and args.output:
        events = separation.separate_file(args.input, args.output, args.residual, backend=args.backend)
    else:
        raise StudioError("Give INPUT and OUTPUT files, or --dataset NAME.")
    run_to_end(events, printer=lambda line: print(line, flush=True))


# ------------------------------------------------------------------------------------- train
def add_train_command(sub) -> None:
    from utils.training.config import cli_fields

    p = sub.add_parser("train", help="train or fine-tune the acoustic model",
                       description="Train a voice on a prepared dataset. Every setting of the Optimizations tab has a "
                                   "flag below; 'auto' takes the recommendation for this machine (python app.py "
                                   "hardware shows it, with each reason).")
    for name, default, help_text, choices in cli_fields():
        flag = "--" + name.replace("_", "-")
        if isinstance(default, bool) or default == "auto" and "true" in help_text:
            # --compile alone means true; --compile false / auto also work
            p.add_argument(flag, dest=name, nargs="?", const="true", default=default, help=help_text)
        else:
            p.add_argument(flag, dest=name, default=default, choices=choices, help=help_text,
                           type=type(default) if isinstance(default, (int, float)) and not isinstance(default, bool)
                           else None)
    # unset: the Training tab's run-length-aware schedule (utils.runs.settings.eval_schedule), not a fixed 1000
    # None: not given, so the Training tab's defaults for this machine (new_run_config), or the run's own (--continue)
    # resume None: not given; "auto" given with a run of that name is --continue (one way to go on with a run)
    # max_minutes None: not given, so none for a new run, or the run's own (--continue)
    p.set_defaults(func=cmd_train, dataset=None, eval_every=None, max_steps=None, preset=None, resume=None,
                   max_minutes=None)
    p.add_argument("--continue", dest="continue_run", action="store_true",
                   help="go on with the existing run --run NAME from its newest checkpoint, with its own settings; "
                        "--max-steps above its plan trains it longer, --max-minutes sets the time limit of this start "
                        "(--resume auto says the same)")
    p.add_argument("--accept-licence", action="store_true",
                   help="with --engine f5 --init SWivid/F5-TTS: yes to the base's CC-BY-NC-4.0 licence (non-commercial "
                        "use only); with another hub base (owner/repo[:folder]), yes to the licence its model card "
                        "declares; with --engine mms --init facebook/mms-tts-amh, yes to Meta's CC-BY-NC-4.0; the "
                        "weights are downloaded once into workspace/pretrained/")
    add_queue_args(p)


def add_queue_args(p) -> None:
    p.add_argument("--background", action="store_true",
                   help="queue the run as its own process (utils.jobs), on the device the Training tab would pick")
    p.add_argument("--all-gpus", action="store_true", help="with --background: every GPU (torchrun, DDP)")


def train_config(args):
    """The run's config from the flags; with no --eval-every, evaluations fit the run's length as on the
    Training tab (a 300-step run is checked every 50 steps, not once at its end)."""
    from utils.runs.settings import eval_schedule
    from utils.training.config import config_from_cli

    if not args.dataset:
        raise StudioError("train needs --dataset NAME (a folder under workspace/datasets).")
    cfg = config_from_cli(vars(args), Workspace.open(args.workspace).root)
    if args.eval_every is None:
        cfg.eval_every = eval_schedule(cfg.max_steps, cfg.eval_every)
    return cfg


def new_run_config(args):
    """train_config for a run that does not exist yet, the model size and steps the Training tab would start at
    where not given; a run name in use (one training now, or one finished) is refused, not resumed with other
    settings written over its own."""
    from utils import families
    from utils.runs import control
    from utils.runs.settings import default_steps, recommended_preset

    ws = Workspace.open(args.workspace)
    if args.preset is None and families.get(args.engine).HAS_SIZES:  # as the Training tab starts: tiny on a CPU
        args.preset = recommended_preset()
    if args.max_steps is None:
        args.max_steps = default_steps(ws)
    cfg = train_config(args)
    control.refuse_taken_name(ws, cfg.run, "add --continue to go on with its own settings (and --max-steps to train "
                                           "it longer), or pick a new --run name")
    return cfg


# what --continue takes from the flags; any other setting given is the run's own, and said not to apply
CONTINUE_TAKES = ("run", "max_steps", "max_minutes", "resume", "workspace")


def continued_run(args):
    from utils.runs import control
    from utils.training.config import cli_fields

    if not args.run:
        raise StudioError("--continue needs --run NAME: the run to go on with.")
    path = control.plan_resume(Workspace.open(args.workspace), args.run, args.max_steps, extend_unfinished=True,
                               max_minutes=args.max_minutes)
    doc = json.loads(path.read_text(encoding="utf-8"))
    own = {**doc.get("train", doc), **(doc.get("train", doc).get("options") or {})}
    ignored = [f"--{name.replace('_', '-')}" for name, default, _, _ in cli_fields()
               if name not in CONTINUE_TAKES and getattr(args, name, default) not in (default, None)
               and str(getattr(args, name)) != str(own.get(name))]
    if ignored:
        print(f"note: run {args.run} goes on with its own settings: {', '.join(ignored)} not applied (they are "
              "the run's from its start; a new --run name trains with them)", file=sys.stderr, flush=True)
    if said := control.steps_not_taken(Workspace.open(args.workspace), args.run, args.max_steps):
        print(f"note: --max-steps {args.max_steps} not applied: {said}", file=sys.stderr, flush=True)
    return path


def cmd_train(args) -> int | None:
    from utils.training import prepare_run, read_run_config, run

    check_queue_args(args, "utils.training")
    ws = Workspace.open(args.workspace)
    going_on = args.continue_run or (args.resume == "auto" and bool(args.run) and ws.run_dir(args.run).is_dir())
    config_path = (continued_run(args) if going_on else
                   prepare_run(new_run_config(args), accept_licence=args.accept_licence))
    cfg, _ = read_run_config(config_path)
    print(f"run {cfg.run}: config {config_path}", flush=True)
    from utils.runs.control import time_ahead

    for line in time_ahead(ws, cfg, going_on):  # before hours of GPU time
        print(f"what to expect: {line}", flush=True)
    if args.background:
        from utils.runs import control

        status = control.queue(Workspace.open(args.workspace), config_path, args.all_gpus)
        print(f"{status['state']} on {status['devices']}; follow {config_path.parent / 'train.log'}")
        return
    result = run(config_path)
    print(f"{result['state']}: {result['message']}; last checkpoint {result['last_checkpoint']}"
          + (f", best {result['best_checkpoint']} (MCD {result['best_mcd']:.2f} dB)" if result["best_checkpoint"] else ""))
    if result["state"] == "failed":
        raise StudioError(result["message"])
    return stopped_code(result["state"])


STOPPED = 130  # what a shell reports for Ctrl+C: `train ... && export-voice ...` goes no further with a run cut short


def stopped_code(state: str) -> int:
    """The exit status of a run that ended in `state`: 0 only when it trained every step it was given."""
    return STOPPED if state == "stopped" else 0


# ------------------------------------------------------------------------------------- synth
def add_synth_command(sub) -> None:
    p = sub.add_parser("synth", help="speak Amharic text (or every line of a text file) with a trained voice")
    p.add_argument("text", nargs="?", help="the text to speak (or --file)")
    p.add_argument("output", nargs="?", help="same as --out")
    p.add_argument("--voice", required=True, help="exported voice, run name (its best checkpoint) or checkpoint folder")
    p.add_argument("--out", help="WAV to write (default speech.wav); with --file the zip to write (default: one in "
                                 "workspace/exports)")
    p.add_argument("--file", help="UTF-8 text file: one WAV per line ('id|text' names it), collected in a zip")
    p.add_argument("--speed", type=float, default=1.0, help="1.0 natural, 1.2 faster, 0.8 slower")
    p.add_argument("--speaker", help="speaker name of a multi-speaker voice (default: its first)")
    p.add_argument("--steps", type=int, default=None, help="flow steps: fewer is faster (default: the voice's "
                   "engine's own, Matcha 10, F5 32)")
    p.add_argument("--temperature", type=float, default=0.667, help="scale of the starting noise")
    p.add_argument("--vocoder", help="griffin-lim, a vocoder folder, or a hub id (default: the voice's own, else "
                   "the workspace's vocoders/vocos-mel-24khz, else Griffin-Lim)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                   help="auto stays off a GPU that a training run holds")
    p.add_argument("--seed", type=int, default=0, help="-1 for different audio every time")
    p.set_defaults(func=cmd_synth)


def zip_destination(args) -> Path | None:
    """Where `synth --file` puts its zip: --out, or the one file name given after the options (argparse takes it for
    the text); None: workspace/exports. It was ignored: the zip went to exports and the name given stayed empty."""
    if args.text and args.output:
        raise StudioError("With --file the file's lines are spoken: give no text, only where the zip goes (or --out).")
    dest = args.out or args.output or args.text
    if dest is None:
        return None
    dest = Path(dest)
    if not dest.is_dir() and dest.suffix.lower() != ".zip":
        raise StudioError(f"With --file the speech is a zip of WAVs, one a line: name a .zip or a folder, not {dest}.")
    return dest


def cmd_synth(args) -> None:
    from utils.audio import save_audio
    from utils.inference import describe, speak_file, synthesize

    ws = Workspace.open(args.workspace)
    if not args.speed > 0:  # the synthesiser says the range of any other speed out of it
        raise StudioError(f"The speed must be between 0.2x and 10x, not {args.speed:g} (--speed).")
    if not 0 <= args.temperature <= 1.5:  # the Inference tab's slider's range: past it the noise drowns the voice
        raise StudioError(f"The temperature must be between 0 and 1.5, not {args.temperature:g} (--temperature; "
                          "0.667 is the default).")
    options = dict(speaker=args.speaker, steps=args.steps, temperature=args.temperature,
                   length_scale=1.0 / args.speed, seed=None if args.seed < 0 else args.seed)
    if (args.voice or "").lower().endswith(".zip"):  # an exported voice, from this machine or another
        from utils.inference.export import import_voice

        if not Path(args.voice).expanduser().is_file():
            raise StudioError(f"{args.voice}: no such voice zip.")
        args.voice, said = import_voice(ws, Path(args.voice).expanduser())
        print(f"note: {said}", file=sys.stderr)
    if args.file:
        dest = zip_destination(args)
        result = run_to_end(speak_file(ws, args.voice, args.file, vocoder=args.vocoder, device=args.device, **options),
                            printer=print)
        made = Path(result["zip"])
        if dest is not None:
            dest = dest / made.name if dest.is_dir() else dest
            shutil.move(made, dest)
        print(f"wrote {dest or made}")
        return
    if not args.text:
        raise StudioError("Give the text to speak (in quotes) or --file with one line per WAV.")
    out = args.out or args.output or "speech.wav"
    wave, sr, info = synthesize(ws, args.voice, args.text, vocoder=args.vocoder, device=args.device, **options)
    save_audio(out, wave, sr)
    print(f"wrote {out}: " + plain_text(describe(info)))  # the line is written for the Inference tab's Markdown


# -------------------------------------------------------------------------------- clip-voice
def add_clip_voice_command(sub) -> None:
    p = sub.add_parser("clip-voice", help="an OmniVoice voice from one 5-15 s clip and its transcript (no training)",
                       description="The clip is a dataset row's (its transcript comes with it) or any audio file "
                                   "with --text. `synth --voice NAME` then speaks with it.")
    p.add_argument("name", help="the voice's name (workspace/voices/NAME)")
    p.add_argument("--dataset", help="the dataset whose row gives the clip; without --row, lists the rows that suit")
    p.add_argument("--row", help="the row's id (its clip and its transcript)")
    p.add_argument("--clip", help="an audio file instead of a row (only read; 5-15 s works best)")
    p.add_argument("--text", help="the clip's transcript, exactly what is said (a row's own is used without it)")
    p.add_argument("--accept-licence", action="store_true",
                   help="yes to the OmniVoice base's licences (CC-BY-NC-4.0 weights + Boson Higgs Audio 2 Community "
                        "License codec, non-commercial) before its one download of about 3.3 GB")
    p.set_defaults(func=cmd_clip_voice)


def cmd_clip_voice(args) -> None:
    from utils.omnivoice.clip_voice import make_clip_voice, no_row_here, suggest_rows

    ws = Workspace.open(args.workspace)
    if args.dataset and not args.row and not args.clip:
        rows = suggest_rows(ws, args.dataset)
        listed = "\n".join(f"  {r['id']}  {r['duration']:.1f} s  {r['text'][:70]}" for r in rows)
        raise StudioError(f"Give --row ID: the rows of {args.dataset} that suit a clip best (5-15 s, nearest 8 s "
                          f"first):\n{listed}" if rows else no_row_here(ws, args.dataset) + " (--clip FILE --text "
                          "'...')")
    folder = run_to_end(make_clip_voice(ws, args.name, dataset=args.dataset or "", row=args.row or "",
                                        clip=args.clip, text=args.text, accept_licence=args.accept_licence), print)
    print(f"made {folder}; speak with it: python app.py synth --voice {args.name} \"ሰላም ነው።\"")


# ------------------------------------------------------------------------------ export-voice
def add_export_command(sub) -> None:
    p = sub.add_parser("export-voice", help="copy a checkpoint (+ vocoder) into a self-contained voice folder and zip")
    p.add_argument("source", help="run name (its best checkpoint), checkpoint folder or voice")
    p.add_argument("name", help="the voice's name (voices/NAME, exports/NAME.zip)")
    p.add_argument("--vocoder", help="vocoder folder or hub id to include, or griffin-lim for none (default: the "
                   "voice's own, else the workspace's vocoders/vocos-mel-24khz)")
    p.add_argument("--onnx", action="store_true", help="also write acoustic.onnx (+ vocoder.onnx)")
    p.add_argument("--onnx-steps", type=int, default=10, help="flow steps baked into acoustic.onnx")
    p.add_argument("--overwrite", action="store_true", help="replace a voice of that name (without it: refused)")
    p.set_defaults(func=cmd_export)


def cmd_export(args) -> None:
    from utils.inference import export_voice, same_name_note

    ws = Workspace.open(args.workspace)
    folder = export_voice(ws, args.source, args.name, vocoder=args.vocoder, overwrite=args.overwrite,
                          onnx=args.onnx, onnx_steps=args.onnx_steps)
    print(f"exported {folder} and {ws.root / 'exports' / (args.name + '.zip')}."
          + same_name_note(ws, args.name))
    print((folder / "README.md").read_text(encoding="utf-8").split("## Use it", 1)[-1].strip())


# ----------------------------------------------------------------------------- train-vocoder
def add_train_vocoder_command(sub) -> None:
    p = sub.add_parser("train-vocoder", help="fine-tune (or train) the Vocos vocoder on a dataset's audio")
    add_dataset_arg(p)
    p.add_argument("--run", help="run name (default: dataset-vocoder)")
    p.add_argument("--init", metavar="VOCODER",
                   help="public Vocos folder/file (config.yaml + pytorch_model.bin), hub id, or our checkpoint")
    p.add_argument("--preset", default="mel-24khz", choices=["tiny", "small", "mel-24khz"],
                   help="generator size when training from scratch; tiny also shrinks the discriminators")
    p.add_argument("--max-steps", type=int, default=None, help="generator updates (default: 20000 on a GPU, 200 on "
                   "a CPU)")
    p.add_argument("--batch-size", type=int, default=None, help="crops per step and process (16 on a GPU, 4 on a CPU)")
    p.add_argument("--max-minutes", type=float, default=None, help="end training after this many minutes of this "
                   "start, evaluated and saved; resume trains on (default: the Optimizations tab's time limit, else none)")
    p.add_argument("--eval-every", type=int, default=500, help="steps between validation + checkpoint (0: at the end)")
    p.add_argument("--resume", default="auto", choices=["auto", "no"],
                   help="auto (default): an existing run of that name continues from its last checkpoint")
    p.add_argument("--precision", default="auto", choices=["auto", "bf16", "fp32"],
                   help="auto: bf16 autocast on a GPU that has it (ISTFT head and losses in fp32), else fp32")
    add_queue_args(p)
    p.set_defaults(func=cmd_train_vocoder)


def cmd_train_vocoder(args) -> int | None:
    from utils.runs import control
    from utils.vocoder.training import train_vocoder

    ws = Workspace.open(args.workspace)
    check_queue_args(args, "utils.vocoder.training")
    overrides = {"eval_every": args.eval_every, "checkpoint_every": args.eval_every, "precision": args.precision,
                 "resume": "auto" if args.resume == "auto" else None}
    if args.batch_size:
        overrides["batch_size"] = args.batch_size
    if args.max_minutes is not None:
        overrides["max_minutes"] = args.max_minutes
    if args.background:  # --init here must be a vocoder inside the workspace, as in the Training tab
        status = control.start_vocoder_training(ws, args.dataset, args.init or "", args.preset, args.run or "",
                                                args.max_steps, args.all_gpus, overrides)
        print(f"run {status['run']}: {status['state']} on {status['devices']}; "
              f"follow {ws.run_dir(status['run']) / 'train.log'}")
        return
    cfg = control.vocoder_config(ws, args.dataset, "", args.preset, args.run or f"{args.dataset}-vocoder",
                                 args.max_steps, {**overrides, "init": args.init})  # a folder anywhere, or a hub id
    folder = run_to_end(train_vocoder(ws, cfg), printer=print)
    print(f"vocoder checkpoint: {folder}")
    from utils.jobs import read_status

    return stopped_code(read_status(ws.run_dir(cfg.run)).get("state", ""))


# ------------------------------------------------------------------------- check-transcripts
def add_check_transcripts_command(sub) -> None:
    p = sub.add_parser("check-transcripts", help="rank a dataset's clips by how likely their transcript is wrong",
                       description="Highest score = most suspicious. Written to datasets/NAME/transcript_check.json "
                                   "(the Dataset tab's review list).")
    add_dataset_arg(p)
    p.add_argument("--method", default="auto", choices=["auto", "alignment", "asr"],
                   help="alignment: a short training of the tiny voice model, then its aligner (offline, CPU); "
                        "asr: the workspace's speech recognizer; auto: alignment, plus the recognizer when present")
    p.add_argument("--steps", type=int, default=None, help="aligner training steps (default: sized to the dataset)")
    p.add_argument("--json", action="store_true", help="the ranking as JSON on stdout (progress on stderr)")
    p.set_defaults(func=cmd_check_transcripts)


def progress_to_stderr(json_out: bool):
    """With --json, stdout carries only the JSON: progress lines (the trainer's log too) go to stderr."""
    import contextlib

    return contextlib.redirect_stdout(sys.stderr) if json_out else contextlib.nullcontext()


def cmd_check_transcripts(args) -> None:
    from utils.transcripts import check_transcripts

    ws = Workspace.open(args.workspace)
    with progress_to_stderr(args.json):
        result = run_to_end(check_transcripts(ws, args.dataset, method=args.method, steps=args.steps),
                            printer=lambda line: print(line, flush=True))
    rows = [{"id": r["id"], "score": r["score"], "reason": r["reason"]} for r in result["rows"]]
    if args.json:
        print(json.dumps({"dataset": args.dataset, "method": result["method"], "rows": rows}, ensure_ascii=False,
                         indent=2))
        return
    width = max(len(r["id"]) for r in rows)
    print(f"{'id':<{width}}  score  reason")
    for r in rows:
        print(f"{r['id']:<{width}}  {r['score']:5.2f}  {r['reason']}")


# -------------------------------------------------------------------------------- transcribe
def add_transcribe_command(sub) -> None:
    p = sub.add_parser("transcribe", help="machine drafts, with their confidence, for clips without a transcript",
                       description="Drafts go to datasets/NAME/transcript_drafts.json, never over a curator's text; "
                                   "the Dataset tab lists them for review, least confident first.")
    add_dataset_arg(p)
    p.add_argument("--model", help="recognizer to fetch once and use: a Hugging Face id or a folder (default: the "
                                   "installed one, else $AMHARIC_TTS_ASR_SOURCE, else this machine's omniASR CTC: "
                                   "`app.py hardware` says which; facebook/mms-1b-all with --lang amh)")
    p.add_argument("--lang", help="language adapter of a multi-language (MMS-style) model, e.g. amh")
    p.add_argument("--json", action="store_true", help="the drafts as JSON on stdout (progress on stderr)")
    p.add_argument("--redo", action="store_true", help="draft again the clips this recognizer already drafted")
    p.set_defaults(func=cmd_transcribe)


def cmd_transcribe(args) -> None:
    from utils.transcripts import asr

    ws = Workspace.open(args.workspace)
    with progress_to_stderr(args.json):
        if asr.untranscribed(ws, args.dataset):  # every clip with text: no recognizer fetched (1.3 GB) to draft none
            run_to_end(asr.ensure(ws, args.model, args.lang), printer=lambda line: print(line, flush=True))
        run_to_end(asr.transcribe_missing(ws, args.dataset, redo=args.redo),
                   printer=lambda line: print(line, flush=True))
    drafts = asr.draft_rows(ws, args.dataset)
    if args.json:
        print(json.dumps([{k: d[k] for k in ("id", "confidence", "draft")} for d in drafts], ensure_ascii=False,
                         indent=2))
        return
    for d in drafts:
        print(f"{d['id']}  {d['confidence']:.2f}  {d['draft']}")


def check_queue_args(args, module: str) -> None:
    if args.all_gpus and not args.background:
        raise StudioError(f"--all-gpus runs the training as a queued job: add --background (or launch it yourself: "
                          f"torchrun --nproc_per_node N -m {module} --config workspace/runs/RUN/config.json).")


# -------------------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="app.py", description="Amharic TTS Studio",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    common = argparse.ArgumentParser(add_help=False)
    where = ("folder holding all user data: datasets, runs, voices (default: $AMHARIC_TTS_WORKSPACE, else "
             "./workspace under the folder the command is run from)")
    common.add_argument("--workspace", default=argparse.SUPPRESS, help=where)
    parser.add_argument("--workspace", default=str(DEFAULT_WORKSPACE), help=where)
    add_ui_arguments(parser)
    sub = parser.add_subparsers(dest="command", parser_class=lambda **kw: argparse.ArgumentParser(parents=[common], **kw))
    for add in (add_hardware_command, add_list_command, add_g2p_command, add_prepare_command, add_export_dataset_command,
                add_retake_command, add_delete_dataset_command, add_separate_command,
                add_train_command, add_stop_command, add_delete_run_command, add_synth_command,
                add_clip_voice_command, add_export_command, add_train_vocoder_command,
                add_check_transcripts_command, add_transcribe_command):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:  # Ctrl+C while torch imports (a second or two) is a stop too, not a traceback
        if problem := torch_problem():
            print(f"error: {problem}", file=sys.stderr)
            return 2
        if warning := gpu_warning():
            print(f"warning: {warning}", file=sys.stderr)
        code = (args.func if args.command else cmd_ui)(args)
    except StudioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return STOPPED
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
