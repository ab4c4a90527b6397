"""Speaking text: sentences -> batches -> acoustic model -> vocoder -> audio, streamed as it is made.

Long text is split at sentence punctuation (and over-long sentences at commas), spoken in small
padded batches (the first sentence alone, so the first audio comes out quickly: its first words
first where the model can, utils/inference/first_words.py) and joined with a pause that depends on
the punctuation. `speak` yields one chunk per batch (two for the first); `synthesize` joins them.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from utils import families
from utils.events import StudioError
from utils.text.convert import SPEAKABLE_WORDS, speakable
from utils.text.normalize import ends_with_abbreviation
from utils.inference.first_words import first_words
from utils.inference.voices import GRIFFIN_LIM, load_acoustic, load_vocoder_for, own_sound, pick_device, resolve_voice
from utils.vocoder.choice import check_features_match
from utils.voice_folders import voice_dictionary
from utils.workspace import Workspace

DEFAULT_STEPS = 10              # Euler steps of the flow (Matcha's default)
DEFAULT_TEMPERATURE = 0.667     # scale of the starting noise (Matcha's default)
MAX_CHARS = 20_000              # one request; longer text is refused with a message (use the batch tool)
MAX_SENTENCE_CHARS = 200        # longer sentences are cut at commas (attention cost, first-audio latency)
BATCH_TOKENS = 3000             # symbols per batch after the first; bounds padding memory
PAUSES_S = {"clause": 0.15, "sentence": 0.3, "question": 0.35, "paragraph": 0.65}

SAMPLE_SENTENCES = [
    "ሰላም ነው። እንዴት ነህ?",
    "ኢትዮጵያ በምሥራቅ አፍሪካ የምትገኝ ሀገር ናት።",
    "ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው።",
    "መጽሐፉን አንብቤ ጨረስኩት።",
    "በ፲፱፻፹፯ ዓ.ም የተወለደው ልጅ ዶ/ር ሆነ።",
]

# A sentence ends after ። ፧ ፨ ? ! (with any spaces), at line breaks, or at a "." followed by a space
# (so 3.5 and ዓ.ም stay whole; an abbreviation's own "." is rejoined below). The separator is kept to choose the pause.
_BOUNDARY = re.compile(r"((?<=[።፧፨?!])\s*|\n+|(?<=\.)\s+)")
_CLAUSE = re.compile(r"(?<=[፣፤፥፦,;:])\s*")


@dataclass
class Sentence:
    text: str
    pause_s: float  # silence after it (none after the last)


def _pause_kind(sentence: str, separator: str) -> str:
    if separator.count("\n") >= 2 or sentence.endswith("፨"):
        return "paragraph"
    if sentence.endswith(("?", "፧", "!")):
        return "question"
    return "sentence"


def _cut_long(sentence: str) -> list[str]:
    """Cut a sentence over MAX_SENTENCE_CHARS at commas (then at spaces), packing pieces up to that size."""
    if len(sentence) <= MAX_SENTENCE_CHARS:
        return [sentence]
    units = []
    for clause in filter(None, _CLAUSE.split(sentence)):
        units += clause.split() if len(clause) > MAX_SENTENCE_CHARS else [clause]
    parts, current = [], ""
    for unit in units:
        if current and len(current) + 1 + len(unit) > MAX_SENTENCE_CHARS:
            parts.append(current)
            current = unit
        else:
            current = f"{current} {unit}".strip()
    return parts + [current]


def _sentences(text: str) -> list[tuple[str, str]]:
    """(sentence, separator) pairs. The "." of an abbreviation (በ2015 ዓ.ም. 25 ሰዎች) does not end a sentence: the
    reader expands it without a pause, so a split there was heard as a break in the middle of a sentence."""
    pieces = _BOUNDARY.split(text or "") + [""]
    out, carried = [], ""
    for sentence, separator in zip(pieces[::2], pieces[1::2]):
        sentence = carried + sentence
        carried = ""
        if separator and "\n" not in separator and ends_with_abbreviation(sentence):
            carried = sentence + separator
        else:
            out.append((sentence, separator))
    return out


def split_sentences(text: str) -> list[Sentence]:
    out = []
    for sentence, separator in _sentences(text):
        sentence = sentence.strip()
        if not sentence or not re.search(r"\w", sentence):
            continue
        clauses = _cut_long(sentence)
        out += [Sentence(c, PAUSES_S["clause"]) for c in clauses[:-1]]
        out.append(Sentence(clauses[-1], PAUSES_S[_pause_kind(sentence, separator)]))
    return out


def plan_batches(lengths: list[int], batch_size: int, batch_tokens: int = BATCH_TOKENS) -> list[list[int]]:
    """Consecutive groups of sentence indices (order kept for streaming): the first alone, the rest up to
    `batch_size` sentences and `batch_tokens` padded symbols each."""
    batches, current = [], []
    for i, n in enumerate(lengths):
        longest = max([lengths[j] for j in current] + [n])
        full = len(current) >= batch_size or longest * (len(current) + 1) > batch_tokens
        if current and (full or batches == [] and len(current) == 1):
            batches.append(current)
            current = []
        current.append(i)
    return batches + [current] if current else batches


# ------------------------------------------------------------------------------------- speaking
@dataclass
class Chunk:
    """One batch of sentences as audio (its pauses included, none after the text's last sentence)."""
    wave: np.ndarray
    sample_rate: int
    mels: list            # [n_mels, T] numpy log-mels, one per sentence (for the spectrogram)
    rows: list[dict]      # per sentence: text, normalized, phonemes, skipped symbols
    done: int             # sentences spoken so far
    total: int
    info: dict            # running totals; complete on the last chunk


def _frontend_row(tokenizer, sentence: str, user_dict: dict) -> tuple[list[int], dict]:
    from utils.text import normalize
    from utils.text.normalize import without_covered
    from utils.text.g2p import phonemes_string, phonemize

    norm = normalize(sentence, user_dict)
    units = tokenizer.units(sentence, user_dict)
    ids = tokenizer.encode(sentence, user_dict)
    known = set(tokenizer.symbols)
    shown = (phonemes_string(phonemize(sentence, user_dict)) if tokenizer.kind == "phoneme" else
             getattr(tokenizer, "shown", " ".join)(units))  # a tokenizer may say how its units read (MMS: letters)
    unknown = getattr(tokenizer, "unknown", None)  # a tokenizer with no fixed table says itself (OmniVoice: none)
    skipped = unknown(units) if unknown else {u for u in units if u not in known and u.strip()}
    return ids, {"text": sentence, "normalized": norm.text, "phonemes": shown, "skipped": " ".join(sorted(skipped)),
                 "warnings": without_covered(norm.warnings, user_dict)}  # as the G2P tab says them


class Voice:
    """A loaded acoustic model + frontend + vocoder (None: Griffin-Lim), usable outside any workspace:

        voice = Voice.load("voices/my-voice")          # an exported voice or checkpoint folder
        wave, sr, info = voice.synthesize("ሰላም ነው።")
    """

    def __init__(self, folder: Path, model, config: dict, vocoder=None, vocoder_label: str = GRIFFIN_LIM,
                 device: str = "cpu", device_note: str = ""):
        from utils.audio import FeatureConfig

        self.folder, self.model, self.config, self.vocoder = Path(folder), model, config, vocoder
        self.vocoder_label, self.device, self.device_note = vocoder_label, device, device_note or device
        self.features = FeatureConfig.from_dict(config.get("features") or {})
        self.family = families.of(config)
        self.tokenizer = self.family.tokenizer(config)  # the family's text frontend, as it was trained
        self.speakers = list(config.get("speakers") or [])
        self.user_dict = voice_dictionary(self.folder)  # its own, used unless a workspace's is given (stream)
        if vocoder is not None:
            check_features_match(self.features, vocoder.cfg, self.folder.name, vocoder_label)

    @classmethod
    def load(cls, folder: str | Path, device: str = "cpu", vocoder: str | Path | None = None) -> "Voice":
        """A voice or checkpoint folder (its own vocoder/ when present, else `vocoder`, else Griffin-Lim)."""
        from utils.vocoder import load_vocoder

        folder = Path(folder)
        model, config = families.load(folder, device)
        if not families.of(config).USES_VOCODER:
            return cls(folder, model, config, None, own_sound(config), device)
        own = folder / "vocoder"
        source = own if own.is_dir() else vocoder
        voc = load_vocoder(source, device) if source else None
        return cls(folder, model, config, voc, f"vocos ({source})" if source else GRIFFIN_LIM, device)

    def speaker_index(self, speaker: str | None) -> int:
        if speaker in (None, "") or not self.speakers:
            return 0
        if speaker not in self.speakers:
            raise StudioError(f"Speaker {speaker!r} is not in this voice; it has {', '.join(self.speakers)}.")
        return self.speakers.index(speaker)

    @property
    def default_steps(self) -> int:
        return engine_steps(self.family.NAME, self.device)

    def stream(self, text: str, speaker: str | None = None, steps: int | None = None,
               temperature: float = DEFAULT_TEMPERATURE, length_scale: float = 1.0, seed: int | None = 0,
               user_dict: dict | None = None, batch_size: int | None = None) -> Iterator[Chunk]:
        """Text -> audio chunks, the first as soon as the first sentence is made (see `speak`). `user_dict`: a
        pronunciation dictionary (a workspace's); None: the one the voice folder carries."""
        import torch

        steps = self.default_steps if steps is None else steps
        user_dict = self.user_dict if user_dict is None else user_dict
        _check_request(text, steps, length_scale, user_dict)
        spk = self.speaker_index(speaker)
        sentences = split_sentences(text)
        encoded = [_frontend_row(self.tokenizer, s.text, user_dict) for s in sentences]
        speakable = [i for i, (ids, _) in enumerate(encoded) if ids]
        warnings = [w for _, row in encoded for w in row["warnings"]]
        warnings += [f"nothing speakable in {row['text'][:40]!r} (no symbol this voice knows); skipped"
                     for ids, row in encoded if not ids]
        if not speakable:
            raise StudioError("Nothing in the text could be spoken by this voice: it needs Amharic (Ethiopic) "
                              "words" + (f" ({'; '.join(warnings[:2])})" if warnings else "") + ".")
        generator = torch.Generator(device=self.device).manual_seed(int(seed)) if seed is not None else None
        size = batch_size or (16 if self.device.startswith("cuda") else 4)
        sr = self.features.sample_rate
        start = time.perf_counter()
        info = {"vocoder": self.vocoder_label, "speaker": self.speakers[spk] if self.speakers else None,
                "device": self.device, "device_note": self.device_note, "steps": int(steps),
                "temperature": float(temperature), "length_scale": float(length_scale), "sample_rate": sr,
                "sentences": len(sentences), "spoken": 0, "tokens": 0, "frames": 0, "duration_s": 0.0,
                "warnings": warnings}
        for n, batch in enumerate(plan_batches([len(encoded[i][0]) for i in speakable], size)):
            spoken = [speakable[b] for b in batch]
            for said in self._said(n, spoken, encoded, spk, int(steps), float(temperature), float(length_scale),
                                   generator):
                pieces, mels, rows = [], [], []
                for i, wave, mel in said:
                    peak = float(np.abs(wave).max()) if wave.size else 0.0
                    if peak > 0.99:  # an undertrained model or Griffin-Lim can overshoot: scale rather than clip
                        wave = wave * (0.99 / peak)
                    pieces.append(wave.astype(np.float32))
                    if mel is None:  # the sentence goes on in the next chunk
                        continue
                    pause = 0 if i == speakable[-1] else int(sentences[i].pause_s * sr)
                    pieces.append(np.zeros(pause, np.float32))
                    mels.append(mel)
                    rows.append(encoded[i][1])
                    info["tokens"] += len(encoded[i][0])
                    info["frames"] += mel.shape[-1]
                chunk = np.concatenate(pieces)
                elapsed = time.perf_counter() - start
                info.update(spoken=info["spoken"] + len(rows), seconds=elapsed,
                            duration_s=info["duration_s"] + len(chunk) / sr)
                info.setdefault("first_audio_s", elapsed)
                info["rtf"] = elapsed / max(info["duration_s"], 1e-9)
                yield Chunk(chunk, sr, mels, rows, info["spoken"], len(speakable), dict(info))

    def _said(self, n: int, spoken: list[int], encoded: list, spk: int, steps: int, temperature: float,
              length_scale: float, generator) -> Iterator[list[tuple]]:
        """Batch `n`'s chunks, each a list of (sentence index, audio, its log-mel [F, T], or None while the sentence
        goes on in the next chunk). The first batch is the first sentence alone (plan_batches); a model that decodes
        in windows speaks its first words before the rest of it (utils/inference/first_words.py)."""
        if n == 0 and len(spoken) == 1 and hasattr(self.model, "synthesise_in_windows"):
            for wave, mel in first_words(self.model, self._to_wave, encoded[spoken[0]][0], spk, steps, temperature,
                                         length_scale, generator, self.features.hop_length):
                yield [(spoken[0], wave, mel)]
            return
        outs = self.model.synthesise_batch([encoded[i][0] for i in spoken], [spk] * len(spoken), steps, temperature,
                                           length_scale, generator)
        yield [(i, out["wave"] if "wave" in out else  # a family that makes its waveform itself (MMS)
                self._to_wave(out["mel"]), out["mel"].cpu().numpy()) for i, out in zip(spoken, outs)]

    def _to_wave(self, mel) -> np.ndarray:
        """Log-mel [F, T] -> audio with the voice's vocoder (Griffin-Lim without one)."""
        from utils.vocoder import griffin_lim, vocode

        return vocode(self.vocoder, mel) if self.vocoder is not None else griffin_lim(mel.cpu(), self.features)

    def synthesize(self, text: str, **options) -> tuple[np.ndarray, int, dict]:
        """The whole text at once: (float32 waveform, sample rate, info with `rows` and `mels`)."""
        return join_chunks(self.stream(text, **options))


def engine_steps(engine: str | None, device: str | None = None) -> int:
    """The sampler's usual steps for a model family (F5's flow sampler wants more than Matcha's decoder) on `device`
    (None: this machine's): a family slow on a CPU says fewer there (OmniVoice: minutes a sentence at its 32)."""
    from utils.family_contract import family_optional
    from utils.hardware import cuda_or_cpu

    family = families.get(engine)
    on_cpu = str(device or cuda_or_cpu()).startswith("cpu")
    return family_optional(family, "CPU_SAMPLE_STEPS", family.SAMPLE_STEPS) if on_cpu else family.SAMPLE_STEPS


def _check_request(text: str, steps: int | None, length_scale: float, user_dict: dict) -> None:
    """Refuse what cannot be spoken before any model loads; steps None: the voice's engine decides later;
    `user_dict`: the pronunciation dictionary the voice will read with."""
    if not (text or "").strip():
        raise StudioError("Type some Amharic text to speak.")
    if not speakable(text, user_dict):
        raise StudioError(f"The text has no Amharic (Ethiopic) letters: this voice needs {SPEAKABLE_WORDS} (other "
                          "Latin words inside Amharic text are approximated; text with none of these is not spoken).")
    if len(text) > MAX_CHARS:
        raise StudioError(f"The text is {len(text)} characters; speak at most {MAX_CHARS} at a time "
                          "(use Batch for a long text file: one WAV per line).")
    if steps is not None and not 1 <= int(steps) <= 100:
        raise StudioError("Steps must be between 1 and 100.")
    if not 0.1 <= float(length_scale) <= 5:
        raise StudioError("The speed must be between 0.2x and 10x (length scale 0.1-5).")


def join_chunks(chunks) -> tuple[np.ndarray, int, dict]:
    """Chunks (a list or the stream itself) -> (waveform, sample rate, info with `rows` and `mels`)."""
    waves, mels, rows, info, sr = [], [], [], {}, 0
    for chunk in chunks:
        waves.append(chunk.wave)
        mels += chunk.mels
        rows += chunk.rows
        info, sr = chunk.info, chunk.sample_rate
    return np.concatenate(waves), sr, {**info, "rows": rows, "mels": mels}


def workspace_voice(ws: Workspace, voice: str, vocoder: str | None = None, device: str = "auto") -> Voice:
    """A voice of the workspace (exported voice, run name or checkpoint folder), models loaded once."""
    folder = resolve_voice(ws, voice)
    device, note = pick_device(ws, device)
    model, config = load_acoustic(folder, device)
    voc, label = (load_vocoder_for(ws, folder, vocoder, device) if families.of(config).USES_VOCODER
                  else (None, own_sound(config)))
    return Voice(folder, model, config, voc, label, device, note)


def speak(ws: Workspace, voice: str, text: str, speaker: str | None = None, steps: int | None = None,
          temperature: float = DEFAULT_TEMPERATURE, length_scale: float = 1.0, vocoder: str | None = None,
          seed: int | None = 0, device: str = "auto", batch_size: int | None = None) -> Iterator[Chunk]:
    """Amharic text -> audio chunks with a workspace voice and the workspace's pronunciation dictionary.

    voice: exported voice, run name (its best checkpoint) or checkpoint folder; speaker: a speaker name of
    it (default its first); steps / temperature / length_scale: flow steps (None: the engine's own, Matcha 10,
    F5 32), noise scale, duration scale
    (>1 slower); vocoder: None = the voice's own, else the workspace's default (the public Vocos once fetched),
    else Griffin-Lim; "griffin-lim"; or a vocoder folder / hub id; seed fixes the noise (None: random);
    device: auto | cpu | cuda (see `pick_device`).
    """
    from utils.text import load_user_dict

    user_dict = load_user_dict(ws)
    _check_request(text, steps, length_scale, user_dict)
    start = time.perf_counter()
    loaded = workspace_voice(ws, voice, vocoder, device)
    extra = {"voice": voice, "checkpoint": str(loaded.folder.relative_to(ws.root)),
             "load_s": time.perf_counter() - start}
    for chunk in loaded.stream(text, speaker, steps, temperature, length_scale, seed, user_dict, batch_size):
        chunk.info.update(extra)
        yield chunk


def synthesize(ws: Workspace, voice: str, text: str, **options) -> tuple[np.ndarray, int, dict]:
    """`speak` joined: (float32 waveform, sample rate, info with `rows` and `mels`)."""
    return join_chunks(speak(ws, voice, text, **options))


def describe(info: dict) -> str:
    """One readable paragraph for the UI and the CLI."""
    pace = (f"{info['rtf']:.1f} s of computing for each second of speech" if info["rtf"] >= 1 else
            f"{1 / info['rtf']:.1f}x faster than it plays" if info["rtf"] > 0 else "at once")
    text = (f"{info['duration_s']:.2f} s of audio at {info['sample_rate'] / 1000:g} kHz made in {info['seconds']:.2f} s: "
            f"{pace} (real-time factor {info['rtf']:.2f}; "
            f"first audio after {info.get('first_audio_s', 0):.2f} s; loading {info.get('load_s', 0):.2f} s) on "
            f"{info.get('device_note') or info['device']}. {info['spoken']} sentence(s), {info['tokens']} symbols, "
            f"vocoder: {info['vocoder']}" + (f", speaker {info['speaker']}" if info.get("speaker") else "")
            + (f"; checkpoint `{info['checkpoint']}`." if info.get("checkpoint") else "."))
    if info.get("warnings"):
        text += "\n\n" + "\n".join(f"- {w}" for w in info["warnings"][:10])
    return text


# ---------------------------------------------------------------------------------- spectrogram
_MAGMA = np.array([[0, 0, 4], [59, 15, 112], [140, 41, 129], [222, 73, 104], [254, 159, 109], [252, 253, 191]],
                  np.float32)  # anchor colours of a perceptual dark-to-light map


def spectrogram_image(mels: list, pause_frames: int = 20, max_width: int = 2400) -> np.ndarray:
    """Log-mels [n_mels, T] (one per sentence) -> RGB uint8 image, low frequencies at the bottom."""
    if not mels:
        return np.zeros((100, 1, 3), np.uint8)
    floor = min(float(np.min(m)) for m in mels)
    gap = np.full((mels[0].shape[0], pause_frames), floor, np.float32)
    joined = np.concatenate([p for m in mels for p in (m, gap)][:-1], axis=1)
    if joined.shape[1] > max_width:  # long texts: keep every k-th frame so the image stays light
        joined = joined[:, :: int(np.ceil(joined.shape[1] / max_width))]
    hi = float(joined.max())
    lo = max(floor, hi - 11.0)  # about 95 dB of range in natural-log magnitude
    x = np.clip((joined - lo) / max(hi - lo, 1e-6), 0, 1)[::-1] * (len(_MAGMA) - 1)
    i = np.minimum(x.astype(int), len(_MAGMA) - 2)
    frac = (x - i)[..., None]
    rgb = _MAGMA[i] * (1 - frac) + _MAGMA[i + 1] * frac
    image = np.repeat(rgb.astype(np.uint8), 2, axis=0)  # 2 px per mel band
    widen = max(1, min(4, 800 // image.shape[1]))  # a short phrase is widened (up to 4 px a frame) to be readable
    return np.repeat(image, widen, axis=1)
