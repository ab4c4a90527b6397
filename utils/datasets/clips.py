"""Make one training clip (runs in a worker process): decode, downmix, resample, trim, normalize,
write, measure; optionally compute its mel features while the audio is still in memory.

Loudness normalization: the RMS of the *active* frames (20 ms frames within `trim_db` of the
loudest) is brought to `target_dbfs` (-23 dBFS by default), and the gain is capped so the peak stays
under `peak_dbfs` (-1 dBFS). Measuring only active frames keeps pauses from changing the gain; it is
a simple stand-in for EBU R128 that needs no extra package. Silent clips get no gain.
"""
from __future__ import annotations

import functools
import hashlib
import io
import os
import time
from pathlib import Path

import numpy as np
import soundfile as sf

from utils.audio import resample, unreadable, wav_bytes
from utils.datasets import vad
from utils.datasets.checks import check_text
from utils.datasets.config import PrepareConfig
from utils.datasets.disk import wav_cut_short

LOW_RATE = 16_000  # Hz: a recording made at less (a telephone's 8 kHz) is flagged low_sample_rate

def _hms(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


@functools.lru_cache(maxsize=2)
def _dictionary(path: str | None, stamp: str) -> dict:
    """The pronunciation dictionary a preparation reads with, loaded once per worker (a task names it by path
    and stamp: the dictionary itself would be pickled with each of 200k tasks)."""
    if not path or not stamp:
        return {}
    from utils.text.lexicon import read_user_dict

    return read_user_dict(Path(path))


def write_file(path: Path, data: bytes) -> None:
    """Temporary name then rename: a crash never leaves half a clip under the final name. No fsync per
    clip (it costs more than the rest of the work); the resume log is written after the rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def open_info(path: Path, name: str):
    """sf.info with a message naming the file; reads only the header (cheap for a 3-hour file)."""
    if not path.exists():
        return None, f"{name}: file not found."
    if path.stat().st_size == 0:
        return None, f"{name}: the file is empty (0 bytes): export or copy the recording again, or leave it out."
    try:
        info = sf.info(str(path))
    except Exception as exc:
        return None, unreadable(name, exc)
    if info.frames <= 0 or info.samplerate <= 0:
        return None, f"{name}: the file holds no audio samples."
    return info, None


def clipped_share(data: np.ndarray, subtype: str) -> float:
    """The share of samples held at full scale. Floating-point audio has no full scale at 1.0 (a float WAV peaking at
    4.0 is whole, and the gain brings it down: it was called clipped): there it is the file's own peak."""
    full = 0.999 * max(1.0, float(np.max(np.abs(data)))) if subtype in ("FLOAT", "DOUBLE") and data.size else 0.999
    return float(np.mean(np.abs(data) >= full))


def process_clip(task: dict) -> dict:
    """task: id, src, source, start, end, out, text, cfg (dict), dictionary ((path, stamp) of the pronunciation
    dictionary), mel_dir/mel_cfg (optional). Returns the measured row fields, or {"error": message}."""
    cfg = PrepareConfig.from_dict(task["cfg"])
    src, name = Path(task["src"]), task["source"]
    t0 = time.perf_counter()
    info, error = open_info(src, name)
    if error:
        return {"id": task["id"], "error": error}
    start = task.get("start") or 0.0
    end = task.get("end") or info.frames / info.samplerate
    if end - start > cfg.max_clip_file:
        return {"id": task["id"], "error": f"{name}: {_hms(end - start)} long, too long for one clip (limit "
                f"{_hms(cfg.max_clip_file)})" + long_advice(task, cfg) + "."}
    try:
        data, sr = sf.read(str(src), start=int(start * info.samplerate), stop=int(end * info.samplerate),
                           dtype="float32", always_2d=True)
    except Exception as exc:
        return {"id": task["id"], "error": f"{name}: decoding failed ({str(exc)[:120]}); the file is corrupt."}
    if len(data) == 0:
        return {"id": task["id"], "error": f"{name}: the file holds no audio samples."}
    t1 = time.perf_counter()
    clipped = clipped_share(data, info.subtype)
    mono = resample(data.mean(axis=1), sr, cfg.sample_rate)
    t2 = time.perf_counter()
    db = vad.frame_db(mono, cfg.sample_rate)
    snr = vad.snr_estimate(db)
    a, b = vad.trim_bounds(db, cfg.sample_rate, len(mono), cfg.trim_db, cfg.trim_pad)
    clip = mono[a:b]
    cdb = vad.frame_db(clip, cfg.sample_rate)
    active = cdb[cdb > cdb.max() - cfg.trim_db]
    active_dbfs = float(10 * np.log10(np.mean(10 ** (active / 10)))) if len(active) else -200.0
    silent = active_dbfs < cfg.silence_dbfs
    peak = float(np.max(np.abs(clip))) if len(clip) else 0.0
    gain_db = 0.0 if silent or peak == 0 else min(cfg.target_dbfs - active_dbfs, cfg.peak_dbfs - 20 * np.log10(peak))
    clip = clip * np.float32(10 ** (gain_db / 20))

    t3 = time.perf_counter()
    out = Path(task["out"])
    data = wav_bytes(clip, cfg.sample_rate)  # encode once: hash and mels come from these exact bytes
    sha1 = hashlib.sha1(data).hexdigest()
    write_file(out, data)
    t4 = time.perf_counter()
    duration = len(clip) / cfg.sample_rate
    notes = {}
    if duration < cfg.min_duration:
        notes["too_short"] = f"{duration:.2f} s after trimming (minimum {cfg.min_duration} s)"
    if duration > cfg.max_duration:
        notes["too_long"] = too_long_note(duration, task, cfg)
    if silent:
        notes["silent"] = "no speech: " + ("the audio is digital silence (all zeros)" if active_dbfs <= -120 else
                                           f"its loudest part is {-active_dbfs:.0f} dB below full volume, too quiet "
                                           "to be speech")
    if task.get("start") is None and (cut := wav_cut_short(src)):
        notes["cut_short"] = (f"the file ends at {cut[1]:.2f} s, before the {cut[0]:.2f} s its header promises: a "
                              "copy or recording that did not finish; copy it again from the original")
    if clipped > cfg.clip_fraction:
        notes["clipping"] = f"{clipped:.2%} of samples at full scale"
    if not silent and snr < cfg.min_snr_db:
        notes["low_snr"] = noise_note(snr, cfg)
    if info.samplerate < LOW_RATE:  # made 24 kHz by resampling, yet its sound stops at half its own rate
        notes["low_sample_rate"] = (f"recorded at {info.samplerate / 1000:g} kHz (telephone quality): nothing above "
                                    f"{info.samplerate / 2000:g} kHz is in it, and a voice trained on it sounds "
                                    "muffled; use the original recording if there is one")
    path, stamp = task.get("dictionary") or (None, "")
    text = check_text(task.get("text", ""), cfg, _dictionary(path, stamp))
    t5 = time.perf_counter()
    result = {
        "id": task["id"], "duration": round(duration, 3), "sha1": sha1,
        "normalized": text["normalized"], "phonemes": text["phonemes"], "notes": {**notes, **text["notes"]},
        "read_with": stamp,
        "metrics": {"orig_sr": info.samplerate, "channels": info.channels, "snr_db": round(snr, 1),
                    "level_dbfs": round(active_dbfs, 1), "gain_db": round(float(gain_db), 1),
                    "clipped": round(clipped, 5), "trimmed_s": round((len(mono) - len(clip)) / cfg.sample_rate, 3)},
    }
    if task.get("mel_dir"):
        from utils.audio import FeatureConfig
        from utils.datasets.features import mel_numpy, store_mel

        mel_path = Path(task["mel_dir"]) / f"{sha1[:16]}.npy"
        if not mel_path.exists():
            stored, _ = sf.read(io.BytesIO(data), dtype="float32")  # what training will read back
            mel = mel_numpy(stored, FeatureConfig.from_dict(task["mel_cfg"]))
            store_mel(mel_path, mel, task.get("mel_half", False))
    # where the time goes (seconds), summed by bench/prepare.py
    result["timing"] = {"decode": t1 - t0, "resample": t2 - t1, "trim_normalize": t3 - t2, "write_hash": t4 - t3,
                        "text": t5 - t4, "mel": time.perf_counter() - t5}
    return result


def segment_recording(task: dict) -> dict:
    """task: id, src, source, kind ("long" | "subtitled"), subtitles, cfg.
    Returns {"id", "segments": [(start, end, text)], "messages"} or {"error"}."""
    from utils.datasets.subtitles import parse_subtitles
    from utils.events import StudioError

    cfg = PrepareConfig.from_dict(task["cfg"])
    src, name = Path(task["src"]), task["source"]
    info, error = open_info(src, name)
    if error:
        return {"id": task["id"], "error": error}
    length = info.frames / info.samplerate
    if length > cfg.max_long_file:
        return {"id": task["id"], "error": f"{name}: {_hms(length)} long, over the limit of {_hms(cfg.max_long_file)}; "
                "split the recording first."}
    try:
        speech = vad.speech_segments(src)
    except Exception as exc:
        return {"id": task["id"], "error": f"{name}: decoding failed ({str(exc)[:120]}); the file is corrupt."}
    if task["kind"] == "subtitled":
        try:
            cues = parse_subtitles(Path(task["subtitles"]))
        except StudioError as exc:
            return {"id": task["id"], "error": str(exc)}
        segs = [(*vad.refine_cue(c.start, min(c.end, length), speech), c.text) for c in cues if c.start < length]
        dropped = len(cues) - len(segs)
        msgs = [f"{name}: {dropped} subtitle cue(s) start after the recording ends ({_hms(length)})."] if dropped else []
        return {"id": task["id"], "segments": segs, "messages": msgs}
    clips = vad.clips_from_speech(speech, cfg.segment_min, cfg.segment_max)
    clips = [(s, min(e, length), "") for s, e in clips]
    msgs = [] if clips else [f"{name}: no speech found by voice activity detection."]
    return {"id": task["id"], "segments": clips, "messages": msgs}


def too_long_note(duration: float, task: dict, cfg: PrepareConfig) -> str:
    return f"{duration:.1f} s (maximum {cfg.max_duration} s)" + long_advice(task, cfg)


def long_advice(task: dict, cfg: PrepareConfig) -> str:
    """What a curator can do with a clip too long to train on, or it reads as speech lost: a whole file is cut at
    pauses when prepared as a long recording, a subtitle cue is split in its file."""
    if task.get("start") is None and task.get("text"):  # Format long would cut it at pauses and drop its transcript
        return (f"; to use it with its transcript, cut the recording and its text into pieces under "
                f"{cfg.max_duration:g} s, or put a subtitle file (.srt or .vtt, the recording's name) beside "
                "it whose cues time its sentences and prepare it again: it is then cut with its text")
    if task.get("start") is None:
        return ("; to use its speech, prepare this recording on its own with Format long (--format long on "
                "the command line): it is cut at pauses into clips whose text you then draft or type")
    if task.get("text"):
        return "; split this cue in its subtitle file and prepare again"
    return ""


def noise_note(snr: float, cfg: PrepareConfig, after: str = "") -> str:
    return f"estimated SNR {snr:.0f} dB (minimum {cfg.min_snr_db:.0f} dB){after}"


def measure_in_use(folder: Path, row: dict, cfg: PrepareConfig) -> None:
    """The noise flag (low_snr) of the audio the row plays now. Preparation measured the upload; once music removal
    is accepted the row plays separated/<id>.wav, which is measured here (music under speech is what made it
    noisy), and after a revert the preparation's measure holds again. Other audio flags stay as measured."""
    notes = row.setdefault("notes", {f: f for f in row.get("flags", [])})
    metrics = row.setdefault("metrics", {})
    if row.get("audio", "").startswith("separated/"):
        from utils.audio import load_audio

        audio, sr = load_audio(folder / row["audio"])
        snr, after = vad.snr_estimate(vad.frame_db(audio, sr)), " after music removal"
        metrics["snr_db_in_use"] = round(snr, 1)
    elif "snr_db" in metrics:
        snr, after = metrics["snr_db"], ""
        metrics.pop("snr_db_in_use", None)
    else:
        return  # never measured (a manifest from elsewhere): its flags stay as they came
    notes.pop("low_snr", None)
    if snr < cfg.min_snr_db and "silent" not in notes:
        notes["low_snr"] = noise_note(snr, cfg, after)
