"""Limits and targets of dataset preparation, in one place, each with its reason."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from utils.audio import FFMPEG_SUFFIXES, MODEL_SAMPLE_RATE

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".aif", ".aiff", ".au", ".w64", ".caf",
                  *FFMPEG_SUFFIXES)
SUBTITLE_SUFFIXES = (".srt", ".vtt")
TABLE_SUFFIXES = (".csv", ".tsv", ".txt")


@dataclass(frozen=True)
class PrepareConfig:
    sample_rate: int = MODEL_SAMPLE_RATE   # clips are written at the model rate
    min_duration: float = 0.6              # s; shorter clips rarely hold a whole word
    max_duration: float = 20.0             # s; longer clips blow up attention memory in training
    max_clip_file: float = 600.0           # s; a "clip" longer than this is not decoded (use --format long)
    max_long_file: float = 12 * 3600.0     # s; longest recording cut by subtitles or VAD
    target_dbfs: float = -23.0             # RMS of the active (speech) frames after normalization
    peak_dbfs: float = -1.0                # the gain never pushes a sample above this
    trim_db: float = 40.0                  # frames this far under the loudest frame are silence at the edges
    trim_pad: float = 0.08                 # s of silence kept before and after the speech
    silence_dbfs: float = -55.0            # a clip whose active RMS is under this is silent
    clip_fraction: float = 0.001           # more than 0.1 % of samples at full scale is clipping
    min_snr_db: float = 15.0               # estimated speech-to-noise ratio under this is low
    min_ethiopic: float = 0.5              # share of letters that must be Ethiopic script
    rate_factor: float = 1.8               # chars/s outside [median / f, median * f] is an outlier
    val_fraction: float = 0.05             # share of each speaker's clips held out for validation
    segment_min: float = 1.0               # s; VAD clips of long recordings are merged up to...
    segment_max: float = 15.0              # s; ...this length, and split beyond it
    max_zip_bytes: int = 50 * 1024**3      # total uncompressed size of a zip (zip-bomb guard)
    max_zip_entries: int = 500_000         # entries in a zip (zip-bomb guard)
    max_zip_ratio: int = 200               # uncompressed / compressed size of one entry
    half_mels: bool = False                # the mel cache in 16-bit floats: half its size, within 0.01 of 32-bit
    keep_uploads: bool = True              # keep raw/'s copy of the uploads (needed to prepare again) once prepared

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "PrepareConfig":
        return cls(**{k: v for k, v in (d or {}).items() if k in cls.__dataclass_fields__})

    def processing_key(self) -> str:
        """What changes a written clip; a re-run reuses clips made with the same key."""
        import hashlib

        keys = ("sample_rate", "target_dbfs", "peak_dbfs", "trim_db", "trim_pad", "max_clip_file")
        text = ",".join(f"{k}={getattr(self, k)}" for k in keys) + ",v1"
        return hashlib.sha1(text.encode()).hexdigest()[:10]


# Flags that keep a row out of training until the curator says "keep".
EXCLUDING_FLAGS = {"missing_text", "too_short", "too_long", "silent", "duplicate_audio", "duplicate_id",
                   "non_ethiopic", "text_error", "cut_short"}

FLAG_HELP = {
    "missing_text": "no transcript",
    "too_short": "shorter than the minimum duration",
    "too_long": "longer than the maximum duration",
    "silent": "no speech (silence)",
    "cut_short": "the file ends before its header says: a copy or recording that did not finish",
    "clipping": "samples at full scale (distorted)",
    "low_snr": "noisy: low speech-to-noise ratio",
    "low_sample_rate": "recorded at a low sample rate (telephone quality): the voice learns it muffled",
    "non_ethiopic": "transcript is not in Ethiopic script",
    "unknown_chars": "characters the text frontend cannot read",
    "text_error": "the text frontend failed on this transcript",
    "duplicate_id": "the same id appears more than once",
    "duplicate_audio": "the same audio as another row",
    "duplicate_text": "the same transcript as another row (listen: a wrong transcript, or a second take)",
    "rate_outlier": "speaking rate (characters per second) far from the rest",
}
