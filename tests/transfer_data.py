"""Speech for the transfer proof (bench/transfer.py, tests/test_transfer.py): espeak-ng speech of other languages,
several voices, to train a base on, and Amharic in a voice the base never heard, to fine-tune it on.

Sentences are words of each language drawn at random (a seed: the same clips every time), spoken by espeak-ng; their
phonemes are espeak-ng's own IPA (`--ipa`), cut into the studio's segments (t͡ʃ, d͡ʒ, a geminate's "ː" on its
consonant), so the symbols Amharic shares with them (m, n, s, t, a, u, ...) are the same rows of a symbol table.
"""
from __future__ import annotations

import random
import re
import shutil
import subprocess
from pathlib import Path

from tests.helpers import espeak_amharic, sentences
from utils.audio import MODEL_SAMPLE_RATE, load_audio, save_audio
from utils.workspace import Workspace, read_jsonl, write_jsonl

WORDS = {  # everyday words; the sentences they make mean little, the sounds are the language's
    "sw": "habari asubuhi rafiki yangu nyumba chakula maji mtoto mama baba shule kitabu kazi leo kesho jana sana "
          "nzuri kubwa ndogo watu mji soko barabara gari ndege samaki kuku chai kahawa mkate matunda ndizi embe "
          "kusoma kuandika kula kunywa kulala kutembea kuimba kucheza jua mvua upepo mlima mto bahari usiku "
          "mchana saa wiki mwezi mwaka pesa duka daktari mwalimu kijiji jiko",
    "es": "buenos dias amigo casa comida agua nino madre padre escuela libro trabajo hoy manana ayer muy bueno "
          "grande pequeno gente ciudad mercado calle coche pajaro pescado pollo cafe pan fruta leer escribir comer "
          "beber dormir caminar cantar jugar sol lluvia viento montana rio mar noche tarde hora semana mes ano "
          "dinero tienda medico maestro pueblo cocina verde rojo azul blanco negro",
    "en": "good morning friend house food water child mother father school book work today tomorrow yesterday "
          "very big small people city market street car bird fish chicken tea coffee bread fruit read write eat "
          "drink sleep walk sing play sun rain wind mountain river sea night evening hour week month year money "
          "shop doctor teacher village kitchen green red blue white black",
}
BASE_VOICES = ("sw+m3", "es+f2", "en+m1", "sw+f3", "es+m2", "en+f4")  # six voices, three languages
AMHARIC_VOICE = "am+m4"  # the fine-tune's voice: a variant no base clip was spoken in
STRESS = re.compile(r"[ˈˌ‿]")
TIES = {"tʃ": "t͡ʃ", "dʒ": "d͡ʒ", "ts": "t͡s"}  # espeak-ng writes affricates without the tie the studio's G2P uses


def ipa_segments(ipa: str) -> list[str]:
    """espeak-ng's `--ipa` line -> the studio's segments: stress dropped, affricates tied, a length mark kept on
    the sound it lengthens, words separated by " " (the word boundary), a full stop at the end."""
    out: list[str] = []
    for word in STRESS.sub("", ipa).split():
        if out:
            out.append(" ")
        i = 0
        while i < len(word):
            pair = word[i:i + 2]
            if pair in TIES:
                out.append(TIES[pair])
                i += 2
            elif word[i] == "ː" and out and out[-1] != " ":
                out[-1] += "ː"
                i += 1
            else:
                out.append(word[i])
                i += 1
    return out + ["."]


def speak(text: str, voice: str, wav: Path, rate: int = 175) -> list[str]:
    """`text` spoken by espeak-ng in `voice` into `wav`; its phonemes as the studio's segments."""
    exe = shutil.which("espeak-ng")
    done = subprocess.run([exe, "-v", voice, "-s", str(rate), "--ipa", "-w", str(wav), text], check=True,
                          capture_output=True, text=True)
    return ipa_segments(" ".join(done.stdout.split()))


def _row(ds: Path, rid: str, wav: Path, text: str, phonemes: list[str] | None, speaker: str, split: str) -> dict:
    audio, _ = load_audio(wav, sample_rate=MODEL_SAMPLE_RATE)
    save_audio(ds / "audio" / f"{rid}.wav", audio, MODEL_SAMPLE_RATE)
    return {"id": rid, "audio": f"audio/{rid}.wav", "text": text, "normalized": text,
            "phonemes": " ".join("|" if p == " " else p for p in phonemes) if phonemes else None,
            "duration": len(audio) / MODEL_SAMPLE_RATE, "speaker": speaker.replace("+", "_"), "split": split,
            "flags": [], "excluded": False, "source": f"raw/{rid}.wav", "sha1": "", "music": None}


def other_languages(ws: Workspace, name: str, n_train: int, n_val: int, voices=BASE_VOICES, seed: int = 0,
                    words: tuple[int, int] = (2, 4)) -> Workspace:
    """Dataset `name`: `n_train` + `n_val` clips of random words of each voice's language, the voices in turn."""
    ds = ws.dataset_dir(name)
    (ds / "raw").mkdir(parents=True, exist_ok=True)
    pick, rows = random.Random(seed), []
    for i in range(n_train + n_val):
        voice = voices[i % len(voices)]
        vocabulary = WORDS[voice.split("+")[0]].split()
        text = " ".join(pick.choice(vocabulary) for _ in range(pick.randint(*words)))
        rid, wav = f"{name}-{i:03d}", ds / "raw" / f"{name}-{i:03d}.wav"
        rows.append(_row(ds, rid, wav, text, speak(text, voice, wav), voice, "train" if i < n_train else "val"))
    write_jsonl(ds / "manifest.jsonl", rows)
    return ws


def amharic(ws: Workspace, name: str, n_train: int, n_val: int, voice: str = AMHARIC_VOICE,
            max_chars: int = 30) -> Workspace:
    """Dataset `name`: short Amharic sentences in one voice, the held-out ones never trained on; phonemes from the
    studio's own G2P (left to the run's frontend)."""
    ds = ws.dataset_dir(name)
    texts = [s for s in sentences() if len(s) <= max_chars][: n_train + n_val]
    if len(texts) < n_train + n_val:
        raise ValueError(f"only {len(texts)} fixture sentences of at most {max_chars} characters")
    rows = []
    for i, text in enumerate(texts):
        rid = f"{name}-{i:03d}"
        wav = espeak_amharic(text, ds / "raw" / f"{rid}.wav", voice=voice, rate=175)
        rows.append(_row(ds, rid, wav, text, None, voice, "train" if i < n_train else "val"))
    write_jsonl(ds / "manifest.jsonl", rows)
    return ws


def _copy_of(ws: Workspace, name: str, into: str) -> list[dict] | None:
    """The rows of `name`, its audio copied into dataset `into`; None when `into` was made before (made once)."""
    target = ws.dataset_dir(into)
    if (target / "manifest.jsonl").is_file() or (target / "manifest.sqlite").is_file():
        return None
    source = ws.dataset_dir(name)
    shutil.copytree(source / "audio", target / "audio", dirs_exist_ok=True)
    imported = source / "manifest.jsonl.imported"
    return read_jsonl(imported if imported.is_file() else source / "manifest.jsonl")


def as_one_speaker(ws: Workspace, name: str, into: str) -> str:
    """Dataset `into`: the clips of `name` under one speaker's name (the voices stay as they sound), for a family
    that adapts one voice (MMS-TTS, like Meta's one-speaker base); made once."""
    rows = _copy_of(ws, name, into)
    if rows is not None:
        write_jsonl(ws.dataset_dir(into) / "manifest.jsonl", [{**r, "speaker": "base"} for r in rows])
    return into


def with_reference_clip(ws: Workspace, name: str, into: str, seconds: float = 4.0) -> str:
    """Dataset `into`: the clips of `name` and one more of at least `seconds` (3-20 s: what OmniVoice speaks in the
    voice of), the first training clips of one speaker joined with a short pause, their texts joined; made once."""
    import numpy as np

    rows = _copy_of(ws, name, into)
    if rows is None:
        return into
    source, target = ws.dataset_dir(name), ws.dataset_dir(into)
    speaker = next(r["speaker"] for r in rows if r["split"] == "train")
    pause, waves, joined = np.zeros(MODEL_SAMPLE_RATE // 4, dtype=np.float32), [], []
    for row in (r for r in rows if r["split"] == "train" and r["speaker"] == speaker):
        waves += [load_audio(source / row["audio"], sample_rate=MODEL_SAMPLE_RATE)[0], pause]
        joined.append(row)
        if sum(len(w) for w in waves) >= seconds * MODEL_SAMPLE_RATE:
            break
    audio, rid = np.concatenate(waves[:-1]), f"{into}-reference"
    save_audio(target / "audio" / f"{rid}.wav", audio, MODEL_SAMPLE_RATE)
    text = " ".join(r["text"] for r in joined)
    phonemes = " | ".join(r["phonemes"] for r in joined) if all(r.get("phonemes") for r in joined) else None
    write_jsonl(target / "manifest.jsonl", [{**joined[0], "id": rid, "audio": f"audio/{rid}.wav", "text": text,
                                             "normalized": text, "phonemes": phonemes,
                                             "duration": len(audio) / MODEL_SAMPLE_RATE}, *rows])
    return into
