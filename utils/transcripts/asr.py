"""The speech recognizer: fetched once into the workspace, then drafts, transcript checks and CER.

Default: Meta's omniASR CTC v2 (Apache-2.0), loaded by transformers as `OmniASRForCTC`: the 300M (1.3 GB), whose hub
id transformers names; the 1B only where its id is confirmed (utils/transcripts/recognizers.py says which and why),
and a fetch of an id the hub does not have takes the 300M instead, in one line. It writes
Ethiopic script for Amharic without being told the language. facebook/mms-1b-all (CC-BY-NC-4.0, with its Amharic
adapter "amh") and any other Hugging Face CTC model (Wav2Vec2ForCTC + its processor) can be named instead;
utils/transcripts/ctc.py loads and decodes either. The licence is shown wherever a recognizer is used.

Like the public Vocos (utils/vocoder/default.py): `fetch` copies the files into
workspace/recognizers/NAME/ with a LICENSE.md notice, from $AMHARIC_TTS_ASR_SOURCE (a local folder) or
the hub (never when HF_HUB_OFFLINE is set), saying the bytes received. Tests save tiny random-weight models of
both formats and go through the same loading and decoding code.

    run_to_end(fetch(ws), printer=print)                    # once, online
    run_to_end(transcribe_missing(ws, "my-voice"), print)   # drafts for clips without text
    python app.py transcribe --dataset my-voice [--model ID] [--lang amh]   # both, from the command line
"""
from __future__ import annotations

import contextlib
import gc
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Iterator

import numpy as np

from utils import hardware
from utils.events import Event, StudioError, time_left
from utils.training.speed import say_hours
from utils.hub import install_folder
from utils.transcripts import recognizers
from utils.transcripts.ctc import SAMPLE_RATE, Recognizer
from utils.workspace import Workspace, atomic_write_json, atomic_write_text, read_json

DEFAULT_MODEL = recognizers.OMNI_300M.repo  # what a machine without a GPU fetches (`default_model` asks the machine)
DEFAULT_LICENCE = recognizers.OMNI_300M.licence
MMS_MODEL = recognizers.MMS.repo
DEFAULT_LANG = "amh"  # MMS's Amharic adapter
SOURCE_ENV = "AMHARIC_TTS_ASR_SOURCE"
STAGE = "asr"
FILES = ("config.json", "preprocessor_config.json", "processor_config.json", "tokenizer_config.json", "vocab.json",
         "tokenizer.json", "special_tokens_map.json", "generation_config.json", "model.safetensors",
         "model.safetensors.index.json", "model-*-of-*.safetensors")  # wav2vec 2.0 and omniASR, one or many shards
CHOSEN = "chosen.json"  # recognizers/chosen.json: the folder name used by default
OFFLINE_REMEDY = ("copy its files (config.json, model.safetensors and the processor's files) from a machine that has "
                  "them into a folder here, and give that folder in the Recognizer box (--model FOLDER on the command "
                  "line)")


class NotOnHub(StudioError):
    """The hub answered that the recognizer asked for does not exist."""


def recognizers_dir(ws: Workspace) -> Path:
    return ws.root / "recognizers"


def _complete(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any((folder / f).is_file() for f in (
        "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"))


def available(ws: Workspace) -> Path | None:
    """The recognizer folder the studio uses: the one last fetched, else any complete one; None when none."""
    root = recognizers_dir(ws)
    chosen = (read_json(root / CHOSEN, default={}) or {}).get("name")
    if chosen and _complete(root / chosen):
        return root / chosen
    found = sorted(p for p in root.glob("*") if p.is_dir() and not p.name.startswith(".") and _complete(p))
    return found[0] if found else None


def notice(folder: Path) -> dict[str, str]:
    """Source, licence, language and fetch date of an installed recognizer (its studio.json)."""
    return read_json(Path(folder) / "studio.json", default={}) or {}


def required(ws: Workspace, button: str = "the Dataset tab's Get recognizer button") -> Path:
    """The recognizer folder, or a refusal that says how to get one (`button`: as status_line's)."""
    folder = available(ws)
    if folder is None:
        raise StudioError("No speech recognizer is in this workspace: " + how_to_get(button))
    return folder


def default_model() -> recognizers.Known:
    """The recognizer `fetch` takes when none is named: this machine's choice (recognizers.for_this_machine)."""
    return recognizers.for_this_machine()[0]


def how_to_get(button: str = "the Dataset tab's Get recognizer button") -> str:
    """Plain words, no Markdown: the line is shown in Markdown panels and in plain log boxes and terminals alike.
    `button`: where the button is, as the page saying it sees it."""
    model = default_model()
    return (f"connect to the internet and fetch one ({button}, or "
            f"python app.py transcribe --dataset NAME, which fetches it once, then drafts): for this machine "
            f"{model.repo} (licence {model.licence}, about {model.download_gb} GB); or give "
            "a folder holding a downloaded copy in the Recognizer box (--model FOLDER).")


def status_line(ws: Workspace, button: str = "the Dataset tab's Get recognizer button") -> str:
    """One plain line for the tabs: which recognizer and its licence, or what would enable one (`button`: where the
    Get recognizer button is, seen from where the line is shown: the Dataset tab named itself)."""
    folder = available(ws)
    if folder is None:
        return ("No speech recognizer in this workspace, so there are no machine drafts and no character error "
                "rate. To enable them, " + how_to_get(button))
    about = notice(folder)
    return (f"Speech recognizer: {about.get('source', folder.name)}"
            + (f" (language {about['lang']})" if about.get("lang") else "")
            + f", licence {about.get('licence', 'as supplied by you')}"
            + (f", fetched {about['fetched']}" if about.get("fetched") else "") + ".")


# ------------------------------------------------------------------------------------ fetching
def _safe_name(source: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in source.strip("/").split("/")[-1]) or "recognizer"


def fetch(ws: Workspace, source: str | None = None, lang: str | None = None,
          licence: str | None = None) -> Iterator[Event]:
    """Copy a recognizer into recognizers/NAME/ (once) and make it the one used; the last event carries the folder.

    source: a local folder (a saved OmniASRForCTC or Wav2Vec2ForCTC with its processor) or a hub id; default
    $AMHARIC_TTS_ASR_SOURCE, else this machine's omniASR (`default_model`). lang: the MMS adapter to use ("amh" for
    facebook/mms-1b-all; None for models of one language or none, such as omniASR)."""
    source = str(source or os.environ.get(SOURCE_ENV) or default_model().repo)
    if lang is None and source == MMS_MODEL:
        lang = DEFAULT_LANG
    target = recognizers_dir(ws) / _safe_name(source)
    if not _complete(target) or (lang and notice(target).get("lang") != lang):  # another language: reinstall
        local = Path(source).expanduser()
        if local.is_dir():
            folder = local
            refuse_non_recognizer(folder)
        else:
            yield Event(STAGE, 0, 0, f"downloading {source} from the Hugging Face hub (once)"
                        + (f", licence {recognizers.known(source).licence}" if recognizers.known(source) else ""))
            try:
                folder = yield from _download(source, lang)
            except NotOnHub:
                fallback = (recognizers.known(source) or recognizers.OMNI_300M).fallback
                if not fallback:
                    raise
                yield Event(STAGE, 0, 0, f"the hub has no {source}: fetching {recognizers.known(fallback).title} "
                                         f"({fallback}) instead")
                return (yield from fetch(ws, fallback, lang, licence))
        chosen = _language(folder, source, lang)
        if chosen != lang and not local.is_dir():
            folder = yield from _download(source, chosen)  # the adapter of the language found in its vocabulary
        lang = chosen
        yield Event(STAGE, 0, 0, "checking that the recognizer loads")
        _install(folder, target, {"source": source, "lang": lang or "",
                                  "licence": licence or _licence(folder, source),
                                  "fetched": time.strftime("%Y-%m-%d %H:%M")})
    atomic_write_json(recognizers_dir(ws) / CHOSEN, {"name": target.name})
    yield Event(STAGE, 1, 1, status_line(ws), result=target)


def ensure(ws: Workspace, source: str | None = None, lang: str | None = None) -> Iterator[Event]:
    """The recognizer to use: the installed one, unless another model or language is asked for (then fetched once,
    a language alone from the installed model's own source); with none installed, `fetch`'s default."""
    folder = available(ws)
    if folder is not None and not source and not lang:
        yield Event(STAGE, 1, 1, status_line(ws), result=folder)
        return
    if not source and folder is not None:
        source = notice(folder).get("source") or str(folder)
    return (yield from fetch(ws, source, lang))


def _download(repo_id: str, lang: str | None) -> Iterator[Event]:
    """The model's files (and MMS's one adapter, not its thousand) from the hub, saying the bytes received;
    returns the hub cache's folder."""
    from huggingface_hub import snapshot_download

    from utils.hub import download_error, downloading, hub_offline, not_on_hub

    patterns = list(FILES) + ["pytorch_model.bin", "README.md"] + ([f"adapter.{lang}.safetensors"] if lang else [])
    size = recognizers.known(repo_id)
    try:
        return Path((yield from downloading(
            lambda progress: snapshot_download(repo_id, allow_patterns=patterns, local_files_only=hub_offline(),
                                               tqdm_class=progress),
            STAGE, size.download_gb * 1000 if size else None, "recognizer-download")))
    except Exception as exc:
        error = download_error(f"the recognizer {repo_id}", exc, OFFLINE_REMEDY)
        raise (NotOnHub(str(error)) if not_on_hub(exc) else error) from exc


def languages(folder: Path) -> list[str]:
    """The languages of a multi-language (MMS-style) recognizer: the keys of its nested vocab.json; [] for a model
    of one language, whose vocab.json maps symbols straight to ids."""
    vocab = read_json(Path(folder) / "vocab.json", default={}) or {}
    return sorted(k for k, v in vocab.items() if isinstance(v, dict))


def _language(folder: Path, source: str, lang: str | None) -> str | None:
    """The adapter to use. A multi-language model without one would decode with its default (English for MMS):
    Amharic when it has it, else refuse, naming the flag, rather than install a recognizer of the wrong script."""
    known = languages(folder)
    if known and lang is None and DEFAULT_LANG in known:
        return DEFAULT_LANG
    if known and lang not in known:
        raise StudioError(f"{source} holds {len(known)} languages ({', '.join(known[:8])}"
                          f"{', ...' if len(known) > 8 else ''}): name one with --lang"
                          + (f"; {lang!r} is not among them" if lang else "") + ".")
    if lang and not known:
        raise StudioError(f"{source} is a model of one language: leave out --lang {lang}.")
    return lang


def _licence(folder: Path, source: str) -> str:
    """The licence a model card declares (its README's front matter), the default's known one, else unknown."""
    if recognizers.known(source):
        return recognizers.known(source).licence
    try:
        head = (Path(folder) / "README.md").read_text(encoding="utf-8").split("---")[1]
        for line in head.splitlines():
            if line.strip().lower().startswith("license:"):
                return line.split(":", 1)[1].strip()
    except (OSError, IndexError):
        pass
    return "unknown: check the model card before using its output"


RECOGNIZER_FILES = {"config.json": ("config.json",),  # what a saved CTC model holds: one of each
                    "the weights": ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json"),
                    "the processor": ("preprocessor_config.json", "processor_config.json")}


def refuse_non_recognizer(folder: Path) -> None:
    """A folder given as a recognizer that lacks what a saved CTC model has (a folder of audio, a half copy) is
    named with what it lacks: loading it ended on the library's own error about a temporary copy."""
    missing = [what for what, names in RECOGNIZER_FILES.items()
               if not any((folder / n).is_file() for n in names)]
    if missing:
        raise StudioError(f"{folder} holds no speech recognizer: it lacks {', '.join(missing)} (a recognizer saved "
                          "with transformers' save_pretrained has config.json, model.safetensors and "
                          "preprocessor_config.json beside its vocabulary). Give the folder that holds them, or a "
                          "Hugging Face model id.")


def _install(folder: Path, target: Path, about: dict) -> None:
    """Copied into the workspace with its licence and checked to load and decode (utils.hub makes the folder whole
    or not at all, as for the vocoder); a recognizer there already is replaced by the new one. One that does not
    load is refused by the name it was given, not the temporary copy's."""
    def fill(tmp: Path) -> None:
        for f in Path(folder).iterdir():
            if f.is_file() and not f.name.startswith("."):
                shutil.copyfile(f, tmp / f.name)  # copyfile: the hub cache holds symlinks
        atomic_write_json(tmp / "studio.json", about)
        atomic_write_text(tmp / "LICENSE.md", f"Source: {about['source']}\nLicence: {about['licence']}\n"
                                              f"Fetched: {about['fetched']}\n")
        try:
            Recognizer(tmp, "cpu").transcribe([np.zeros(SAMPLE_RATE // 2, np.float32)])  # loads and decodes
        except StudioError:
            raise
        except Exception as exc:
            said = str(exc).replace(str(tmp), about["source"]).split("\n")[0][:300]
            raise StudioError(f"{about['source']} did not load as a speech recognizer ({type(exc).__name__}: "
                              f"{said}); nothing was installed.") from exc

    install_folder(target, fill, _complete, replace=True)


# ------------------------------------------------------------------------------------ decoding
_LOADED: dict = {}
_LOCK = threading.Lock()


def load(folder: Path, device: str = "auto") -> Recognizer:
    """One loaded recognizer per (folder, device) until `unload` (a 1 B model loads in seconds)."""
    device = hardware.cuda_or_cpu(device)
    key = (str(Path(folder).resolve()), device)
    with _LOCK:
        if key not in _LOADED:
            _LOADED[key] = Recognizer(Path(folder), device)
        return _LOADED[key]


def unload(folder: Path, device: str) -> None:
    """Forget a loaded recognizer so its memory goes back (a training run needs its GPU between evaluations;
    the next evaluation loads it again, seconds for the 1 B default)."""
    import torch

    with _LOCK:
        _LOADED.pop((str(Path(folder).resolve()), device), None)
    if device.startswith("cuda"):
        gc.collect()  # the model's tensors go once nothing refers to them; only then can the cache give them back
        torch.cuda.empty_cache()


def work_device(ws: Workspace, device: str = "auto") -> str:
    """Where recognition in the app's own process runs: `auto` is the GPU unless a training run holds or waits for
    it (its memory is the run's; the CPU is slower but takes nothing from it)."""
    from utils import jobs

    if device != "auto":
        return device
    return "cuda" if hardware.has_cuda() and not jobs.gpu_runs(ws) else "cpu"


@contextlib.contextmanager
def released(folder: Path | None, device: str):
    """Recognition work in the app's process, after which a recognizer on the GPU is let go (a queued training run
    needs its memory; the next work loads it again in seconds)."""
    try:
        yield
    finally:
        if folder is not None and device.startswith("cuda"):
            unload(folder, device)


def load_problem(folder: Path, device: str = "auto") -> str | None:
    """None when the recognizer loads (it stays loaded for the work that follows); else why not, in one line."""
    try:
        load(folder, device)
    except StudioError as exc:
        return str(exc)
    except Exception as exc:  # a damaged or incomplete folder raises whatever its loader raises
        return f"The speech recognizer in {folder} does not load ({failure(exc)})"
    return None


def failure(exc: BaseException) -> str:
    """"Type: first line of the message": one line for a log, whatever a loader or a model raised."""
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"


def _wave(ws: Workspace, dataset: str, row: dict) -> np.ndarray:
    from utils.audio import load_audio

    return load_audio(ws.dataset_dir(dataset) / row["audio"], sample_rate=SAMPLE_RATE)[0]


def transcribe_rows(ws: Workspace, dataset: str, rows: list[dict], batch_size: int | None = None,
                    device: str = "auto", folder: Path | None = None, keep=None):
    """Generator of progress events; returns {row id: (text, confidence)}. Batches of similar length on a GPU;
    one clip at a time on a CPU, which works but is slow (it says so, with the time measured so far). `folder`:
    the recognizer the caller already chose (default: the workspace's). `keep(results so far)` is called every
    KEEP_EVERY_S seconds, so a long run cut off keeps what it heard."""
    rec = load(folder or required(ws), device)
    gpu = rec.device.startswith("cuda")
    batch_size = batch_size or (16 if gpu else 1)
    if not gpu:
        yield Event(STAGE, 0, len(rows), "no GPU: recognising on the CPU works but is slow (a GPU is many times "
                                         "faster)", level="warning")
    ordered = sorted(rows, key=lambda r: r.get("duration") or 0)  # similar lengths share a batch: little padding
    total_s = sum(r.get("duration") or 0 for r in rows)
    out, t0, audio_s, kept = {}, time.perf_counter(), 0.0, time.perf_counter()
    for start in range(0, len(ordered), batch_size):
        batch = ordered[start:start + batch_size]
        waves = [_wave(ws, dataset, r) for r in batch]
        for r, result in zip(batch, rec.transcribe(waves)):
            out[r["id"]] = result
        audio_s += sum(len(w) for w in waves) / SAMPLE_RATE
        speed = audio_s / max(time.perf_counter() - t0, 1e-6)
        left = time_left(audio_s, total_s, t0)  # the shortest clips come first: an upper bound, early
        yield Event(STAGE, len(out), len(rows), f"recognising speech ({speed:.1f} s of audio per second"
                    + (f"; about {left} left)" if left and len(out) < len(rows) else ")"))
        if keep is not None and time.perf_counter() - kept >= KEEP_EVERY_S:
            keep(out)
            kept = time.perf_counter()
    return out


KEEP_EVERY_S = 60.0  # a long recognition run saves what it heard this often


# ------------------------------------------------------------------------------------ drafts
def drafts_path(ws: Workspace, dataset: str) -> Path:
    return ws.dataset_dir(dataset) / "transcript_drafts.json"


def untranscribed(ws: Workspace, dataset: str) -> list[dict]:
    """Rows with no transcript at all: the only rows a machine draft is ever made for."""
    from utils.datasets import get_rows
    from utils.datasets.manifest import store_query

    ids = [i for (i,) in store_query(ws, dataset, "SELECT id FROM rows WHERE has_text = 0 ORDER BY pos")]
    found = get_rows(ws, dataset, ids)  # read alone: the Dataset tab lists drafts on every dataset it shows
    return [found[i] for i in ids]


def transcribe_missing(ws: Workspace, dataset: str, batch_size: int | None = None, device: str = "auto",
                       redo: bool = False) -> Iterator[Event]:
    """Machine drafts for clips without text, into transcript_drafts.json (the manifest is not touched: a draft
    becomes the row's text only when the curator accepts or edits it). A clip whose audio this recognizer already
    drafted keeps its draft unless `redo` (on a CPU a draft costs about its own length). The last event carries
    the drafts."""
    rows = untranscribed(ws, dataset)
    if not rows:
        yield Event(STAGE, 1, 1, "every clip has a transcript: nothing to draft", result={"rows": {}})
        return
    folder = required(ws)
    about = notice(folder)
    drafts = (read_json(drafts_path(ws, dataset), default={}) or {}).get("rows", {})
    todo = rows if redo else [r for r in rows if not _drafted(drafts.get(r["id"]), r, about)]
    hours = sum(r.get("duration") or 0.0 for r in todo) / 3600
    yield Event(STAGE, 0, len(rows), f"{len(todo)} clip(s) to draft ({say_hours(hours)} of audio)" + (
        f"; {len(rows) - len(todo)} keep the draft this recognizer made of the same audio (it would write the same "
        "again; a run cut off goes on from there)" if len(todo) < len(rows) else ""))
    device = work_device(ws, device)
    by_id = {r["id"]: r for r in todo}

    def keep(heard: dict) -> dict:  # the drafts so far, saved: a run cut off keeps them and drafts only the rest
        for rid, (text, confidence) in heard.items():
            drafts[rid] = {"text": text, "confidence": round(confidence, 3), "machine_draft": True,
                           "model": about.get("source", ""), "lang": about.get("lang", ""),
                           "sha1": by_id[rid].get("sha1"), "created": time.strftime("%Y-%m-%d %H:%M")}
        saved = {"licence": about.get("licence", ""), "rows": drafts}
        atomic_write_json(drafts_path(ws, dataset), saved)
        return saved

    with released(folder, device):
        heard = (yield from transcribe_rows(ws, dataset, todo, batch_size, device, folder, keep)) if todo else {}
    result = keep(heard)
    yield Event(STAGE, len(rows), len(rows), f"{len(todo)} machine draft(s) made, {len(rows) - len(todo)} kept; "
                                             "review them least confident first", result=result)


def _drafted(draft: dict | None, row: dict, about: dict) -> bool:
    """A draft made by this recognizer (source and language adapter) of this very audio: a clip prepared again
    from changed audio, or a recognizer installed with another language, drafts again."""
    return bool(draft and about.get("source") and row.get("sha1") and draft.get("sha1") == row["sha1"]
                and draft.get("model") == about["source"] and draft.get("lang", "") == about.get("lang", ""))


def draft_rows(ws: Workspace, dataset: str) -> list[dict]:
    """Drafts of rows that still have no text, least confident first: {"id", "draft", "confidence", "path"}.
    A row the curator has since given text drops out (its draft is never shown over the curator's words)."""
    drafts = (read_json(drafts_path(ws, dataset), default={}) or {}).get("rows", {})
    ds_dir = ws.dataset_dir(dataset)
    out = [{"id": r["id"], "draft": drafts[r["id"]]["text"], "confidence": drafts[r["id"]]["confidence"],
            "path": str(ds_dir / r["audio"])} for r in untranscribed(ws, dataset) if r["id"] in drafts]
    return sorted(out, key=lambda d: d["confidence"])


# ------------------------------------------------------------------------------------ checking
def compare_with_transcripts(ws: Workspace, dataset: str, rows: list[dict], device: str = "auto",
                             folder: Path | None = None):
    """Generator of events; returns {row id: character error rate of the recognizer against the transcript}.
    What the recognizer heard is kept (datasets/<name>/transcript_check.heard.jsonl) as it goes: a check cut off,
    or a later check after texts were fixed, hears again only clips whose audio or recognizer changed."""
    from utils.transcripts.cer import cer
    from utils.transcripts.progress import Progress

    folder = folder or required(ws)
    about = notice(folder)
    log, by_id = Progress(ws.dataset_dir(dataset) / "transcript_check.heard.jsonl"), {r["id"]: r for r in rows}
    header, lines = log.read()
    recognizer = {"model": about.get("source", ""), "lang": about.get("lang", "")}
    if header != recognizer:
        log.start(recognizer)  # another recognizer hears otherwise: what the last one heard is forgotten
        lines = []
    heard = {line["id"]: (line["text"], line["confidence"]) for line in lines
             if line["id"] in by_id and line.get("sha1") and line["sha1"] == by_id[line["id"]].get("sha1")}
    todo = [r for r in rows if r["id"] not in heard]
    if heard:
        yield Event(STAGE, len(heard), len(rows), f"{len(heard)} clip(s) heard before by this recognizer (same audio)"
                                                  f"; {len(todo)} to recognise")
    kept: set[str] = set(heard)

    def keep(results: dict) -> None:  # appends what was heard since the last call
        log.append([{"id": i, "sha1": by_id[i].get("sha1"), "text": text, "confidence": round(float(conf), 3)}
                    for i, (text, conf) in results.items() if i not in kept])
        kept.update(results)

    if todo:
        fresh = yield from transcribe_rows(ws, dataset, todo, device=device, folder=folder, keep=keep)
        keep(fresh)
        heard.update(fresh)
    texts = {r["id"]: r.get("normalized") or r.get("text") or "" for r in rows}
    return {rid: cer(texts[rid], text) for rid, (text, _) in heard.items()}


EVAL_BATCH = 8  # clips recognised per forward pass at a training evaluation
_FLOOR: dict = {}  # (recognizer, dataset, (clip id, audio hash)...) -> CER on those recordings: once per process


def intelligibility(ws: Workspace, waves: list[np.ndarray], sample_rate: int, texts: list[str],
                    device: str = "auto", recorded: tuple[str, list[dict]] | None = None) -> dict:
    """{"cer": mean character error rate of the recognizer on synthesised speech, "cer_recorded": the same on the
    held-out recordings of the same sentences (`recorded`: dataset and rows), the floor: what it gets wrong on
    real speech of this speaker} ({} without a recognizer). The recordings never change during a run, so they
    are heard once. On a GPU the recognizer is let go afterwards, even when it failed, so the training that called
    it gets its memory back."""
    from utils.audio import resample

    folder = available(ws)
    if folder is None or not waves:
        return {}
    rec = load(folder, device)
    with released(folder, rec.device):
        try:
            out = {"cer": _mean_cer(rec, [resample(np.asarray(w, np.float32), sample_rate, SAMPLE_RATE)
                                          for w in waves], texts)}
            if recorded:
                dataset, rows = recorded
                key = (str(folder), dataset, tuple((r["id"], r.get("sha1") or r.get("audio")) for r in rows))
                if key not in _FLOOR:
                    _FLOOR[key] = _mean_cer(rec, [_wave(ws, dataset, r) for r in rows],
                                            [r.get("normalized") or r.get("text") or "" for r in rows])
                out["cer_recorded"] = _FLOOR[key]
        finally:
            rec = None  # the last reference: unloading can free the model only without it
    return out


def _mean_cer(rec, waves: list[np.ndarray], texts: list[str]) -> float:
    """Mean CER of 16 kHz waves against their texts, recognised in batches of similar length."""
    from utils.transcripts.cer import cer

    order = sorted(range(len(waves)), key=lambda i: len(waves[i]))
    heard: dict[int, str] = {}
    for start in range(0, len(order), EVAL_BATCH):
        batch = order[start:start + EVAL_BATCH]
        heard.update({i: text for i, (text, _) in zip(batch, rec.transcribe([waves[i] for i in batch]))})
    return float(np.mean([cer(texts[i], heard[i]) for i in range(len(waves))]))
