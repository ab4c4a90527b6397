"""Real test audio: Amharic speech from espeak-ng and generated signals."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import soundfile as sf

from utils.audio import MODEL_SAMPLE_RATE, load_audio, save_audio
from utils.datasets import load_manifest, save_manifest
from utils.workspace import Workspace, write_jsonl

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, env: dict | None = None, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python app.py ARGS` as a user types it, in a process of its own; its output captured."""
    return subprocess.run([sys.executable, str(ROOT / "app.py"), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


@contextmanager
def every_core():
    """A training with nothing beside it, on every core: pytest's own process computes on one thread (the test
    modules set it, for the trainers, apps and browsers that share the machine with it), and so does every process
    it starts (OMP_NUM_THREADS=1, conftest). Both are lifted for the block: a trainer started in it (the transcript
    check's aligner) computes on every core too. The overfit test: 50 s on one thread, 36 s on two."""
    import os

    import torch

    before, env = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    torch.set_num_threads(os.cpu_count() or 1)
    os.environ["OMP_NUM_THREADS"] = str(os.cpu_count() or 1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
        if env is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = env


def espeak_amharic(text: str, path: Path, voice: str = "am", rate: int = 160) -> Path:
    """Speak Amharic with espeak-ng into a 22.05 kHz mono WAV (voices: am, am+f2, am+m3, ...)."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise RuntimeError("espeak-ng is missing: install the Debian package espeak-ng (the README's test command does).")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([exe, "-v", voice, "-s", str(rate), "-w", str(path), text], check=True, capture_output=True)
    return path


def spoken_pairs(folder: Path, n: int, prefix: str = "a") -> Path:
    """`folder` with `n` espeak-ng recordings of the first sentences, each with its transcript beside it (a0.wav and
    a0.txt, ...): a dataset in the audio + .txt layout."""
    for i, text in enumerate(sentences(n)):
        espeak_amharic(text, folder / f"{prefix}{i}.wav")
        (folder / f"{prefix}{i}.txt").write_text(text, encoding="utf-8")
    return folder


def to_m4a(wav: Path) -> Path:
    """The container phones and video sites give (AAC in MP4), made from real speech with ffmpeg (the WAV goes)."""
    out = wav.with_suffix(".m4a")
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-i", str(wav), "-c:a", "aac", "-b:a", "96k", str(out)],
                   check=True)
    wav.unlink()
    return out


def sentences(n: int | None = None) -> list[str]:
    """Amharic sentences from the project's fixture copy of UD_Amharic-ATT (CC BY-SA 4.0)."""
    lines = [l.strip() for l in (FIXTURES / "amharic_sentences.txt").read_text(encoding="utf-8").splitlines() if l.strip()]
    return lines[:n] if n else lines


def tone(seconds: float, sr: int = 24000, freq: float = 220.0, amp: float = 0.3) -> np.ndarray:
    t = np.arange(int(seconds * sr)) / sr
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def write_wav(path: Path, audio: np.ndarray, sr: int) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), audio, sr)
    return path


def write_clip_row(folder: Path, clip_id: str, audio: np.ndarray, sr: int, source_dir: str = "audio") -> dict:
    """Writes audio/<clip_id>.wav (and the source copy under `source_dir`) and returns the manifest row a prepared
    dataset holds for it: one speaker, train split, text ሰላም, no music verdict yet."""
    from utils.audio import file_digest

    for sub in {"audio", source_dir}:
        (folder / sub).mkdir(parents=True, exist_ok=True)
        sf.write(str(folder / sub / f"{clip_id}.wav"), audio, sr, subtype="PCM_16")
    return {"id": clip_id, "audio": f"audio/{clip_id}.wav", "text": "ሰላም", "duration": len(audio) / sr,
            "speaker": "s", "split": "train", "flags": [], "excluded": False, "source": f"{source_dir}/{clip_id}.wav",
            "sha1": file_digest(folder / "audio" / f"{clip_id}.wav"), "music": None}


CKPT = "runs/r1/checkpoints/step-10"
VOC = "runs/voc/checkpoints/step-1"


def voice_workspace(root, add_blank: bool = False) -> Workspace:
    """A workspace with a tiny random two-speaker acoustic checkpoint and a tiny vocoder checkpoint."""
    import torch

    from models.matcha import MatchaConfig, MatchaTTS
    from models.vocoder import PRESETS, Vocoder
    from utils.audio import FeatureConfig
    from utils.text.tokenizers import make_tokenizer
    from utils.training.checkpoint import save_checkpoint
    from utils.vocoder import save_vocoder

    ws = Workspace.open(root)
    tok = make_tokenizer("phoneme")
    torch.manual_seed(0)
    cfg = MatchaConfig.preset_config("tiny", n_symbols=len(tok.symbols), n_speakers=2, mel_mean=-6.0, mel_std=2.0,
                                     add_blank=add_blank)
    save_checkpoint(ws.root / CKPT, MatchaTTS(cfg).state_dict(),
                    {"model": cfg.to_dict(), "frontend": {"kind": tok.kind, "symbols": tok.symbols,
                                                          "tokenizer": tok.to_dict()},
                     "speakers": ["abebe", "almaz"], "features": FeatureConfig().to_dict(), "step": 10})
    save_vocoder(Vocoder(PRESETS["tiny"]), ws.root / VOC)
    return ws


LIVE = "live"


def live_checkpoint(ws: Workspace, step: int, best: bool = False) -> None:
    """What the trainer of run `live` writes: a checkpoint folder (a copy of voice_workspace's), and status.json naming
    the best one. This test process stands in for the trainer, so the run stays active."""
    import json
    import os

    from utils.jobs import machine_id
    from utils.workspace import read_json

    folder = ws.run_dir(LIVE) / "checkpoints" / f"step-{step}"
    shutil.copytree(ws.root / CKPT, folder, dirs_exist_ok=True)
    status = ws.run_dir(LIVE) / "status.json"
    now = {**(read_json(status, {}) or {}), "state": "running", "step": step, "max_steps": 100, "pid": os.getpid(),
           "machine": machine_id()}
    if best:
        now.update(best_checkpoint=str(folder), best_mcd=9.5)
    status.write_text(json.dumps(now))


def news_dataset(root: Path, tmp: Path) -> Workspace:
    """Dataset 'news': clip 'clean' (speech only) and clip 'song' (speech over music at 0 dB), 24 kHz, each also in
    raw/ as uploaded."""
    from utils.separation.evaluation import mix_at_snr, synth_music

    ws = Workspace.open(root)
    folder = ws.dataset_dir("news")
    (folder / "raw").mkdir(parents=True)
    speech, sr = load_audio(espeak_amharic(sentences(3)[1], tmp / "news-speech.wav", "am+m3"), sample_rate=24000)
    mix, _, _ = mix_at_snr(speech, synth_music(len(speech) / sr, sr, seed=5), 0.0)
    rows = [write_clip_row(folder, clip_id, audio, sr, "raw") for clip_id, audio in (("clean", speech), ("song", mix))]
    write_jsonl(folder / "manifest.jsonl", rows)
    return ws


def make_dataset(root: Path, name: str = "am", n_train: int = 4, n_val: int = 1, voices=("am",),
                 first: int = 0, max_chars: int = 40) -> Workspace:
    """A dataset folder per the manifest contract, spoken by espeak-ng (short sentences, 24 kHz)."""
    ws = Workspace.open(root)
    ds = ws.dataset_dir(name)
    texts = [s for s in sentences() if len(s) <= max_chars][first: first + n_train + n_val]
    rows = []
    for i, text in enumerate(texts):
        voice = voices[i % len(voices)]
        rid = f"{name}-{i:03d}"
        tmp = espeak_amharic(text, ds / "raw" / f"{rid}.wav", voice=voice, rate=190)
        audio, sr = load_audio(tmp, sample_rate=MODEL_SAMPLE_RATE)
        save_audio(ds / "audio" / f"{rid}.wav", audio, MODEL_SAMPLE_RATE)
        rows.append({"id": rid, "audio": f"audio/{rid}.wav", "text": text, "normalized": text, "phonemes": None,
                     "duration": len(audio) / MODEL_SAMPLE_RATE, "speaker": voice.replace("+", "_"),
                     "split": "train" if i < n_train else "val", "flags": [], "excluded": False,
                     "source": f"raw/{rid}.wav", "sha1": "", "music": None})
    write_jsonl(ds / "manifest.jsonl", rows)
    return ws


def make_ljspeech_zip(folder: Path, n: int = 6) -> Path:
    """metadata.csv (id|text) + wavs/<id>.wav spoken by espeak-ng, zipped as a curator would send it; the first
    clip (clip00) is recorded over background music at 0 dB."""
    from utils.separation.evaluation import mix_at_snr, synth_music

    texts = [s for s in sentences() if len(s) <= 25][:n]
    lines = []
    for i, text in enumerate(texts):
        rid = f"clip{i:02d}"
        wav = espeak_amharic(text, folder / "corpus" / "wavs" / f"{rid}.wav", voice="am", rate=190)
        if i == 0:
            speech, sr = load_audio(wav)
            save_audio(wav, mix_at_snr(speech, synth_music(len(speech) / sr, sr, seed=3), 0.0)[0], sr)
        lines.append(f"{rid}|{text}")
    (folder / "corpus" / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    archive = folder / "my_recordings.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.write(folder / "corpus" / "metadata.csv", "metadata.csv")
        for wav in sorted((folder / "corpus" / "wavs").glob("*.wav")):
            z.write(wav, f"wavs/{wav.name}")
    return archive


def add_joined_clips(ws: Workspace, name: str = "am", n: int = 1, per_clip: int = 3, rate: int = 130,
                     first: int = 100) -> list[dict]:
    """`n` longer clips (each `per_clip` sentences joined, spoken slowly: 5-10 s) put first in a dataset that
    make_dataset wrote and nothing has read yet; the fixture's sentences alone make clips of 1-3 s, and a family that
    speaks from a reference clip (OmniVoice: 3-20 s) needs a longer one."""
    from utils.workspace import read_jsonl

    ds = ws.dataset_dir(name)
    rows, texts, added = read_jsonl(ds / "manifest.jsonl"), sentences(), []
    for i in range(n):
        text = " ".join(texts[first + i * per_clip: first + (i + 1) * per_clip])
        rid = f"{name}-long-{i:03d}"
        audio, _ = load_audio(espeak_amharic(text, ds / "raw" / f"{rid}.wav", rate=rate), MODEL_SAMPLE_RATE)
        save_audio(ds / "audio" / f"{rid}.wav", audio, MODEL_SAMPLE_RATE)
        added.append({**rows[0], "id": rid, "audio": f"audio/{rid}.wav", "text": text, "normalized": text,
                      "duration": len(audio) / MODEL_SAMPLE_RATE, "split": "train", "source": f"raw/{rid}.wav"})
    write_jsonl(ds / "manifest.jsonl", added + rows)
    return added


def launch_local(demo, tries: int = 3) -> None:
    """Gradio refuses to start when its own first request to localhost fails (it does not retry a refused
    connection); on a loaded 2-core machine that happens now and then, so try again before failing."""
    for attempt in range(tries):
        try:
            demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", quiet=True)
            return
        except ValueError as refused:
            if "localhost is not accessible" not in str(refused) or attempt == tries - 1:
                raise
            demo.close()


@contextmanager
def serve_tab(module, ws: Workspace, label: str = "Tab"):
    """One tab's Blocks served on a free local port; yields a gradio_client to call its api_names."""
    import gradio as gr
    from gradio_client import Client

    from webui.context import AppContext

    with gr.Blocks() as demo:
        with gr.Tab(label):
            module.build(AppContext(workspace=ws))
    launch_local(demo.queue())
    try:
        yield Client(demo.local_url, verbose=False)
    finally:
        demo.close()


# What a person sees in a Gradio plot (Vega draws SVG): the tick labels of each axis, how many marks are
# drawn in a colour (a line with no colour, or a point with none, is not seen), and the legend's names.
PLOT_SEEN_JS = """(sel) => {
  const svg = document.querySelector(sel + ' svg');
  if (!svg) return null;
  const axis = (name) => [...svg.querySelectorAll('.role-axis')]
    .filter(g => (g.getAttribute('aria-label') || '').startsWith(name))
    .flatMap(g => [...g.querySelectorAll('.role-axis-label text')])
    .filter(t => getComputedStyle(t).opacity !== '0' && t.getAttribute('opacity') !== '0').map(t => t.textContent);
  const coloured = (v) => !!v && !['none', 'transparent'].includes(v);
  const drawn = [...svg.querySelectorAll('.mark-line path, .mark-rect path, .mark-symbol path')]
    .filter(p => p.getAttribute('opacity') !== '0' && (coloured(p.getAttribute('stroke')) || coloured(p.getAttribute('fill'))));
  return {x: axis('X'), y: axis('Y'), drawn: drawn.length,
          legend: [...svg.querySelectorAll('.role-legend-label text')].map(t => t.textContent)};
}"""


def plot_seen(page, selector: str, legend: tuple = (), timeout: float = 60_000) -> dict:
    """The plot at `selector` once it draws marks in colour (and names every curve in `legend`)."""
    page.wait_for_function(f"(a) => {{ const s = ({PLOT_SEEN_JS})(a[0]); "
                           "return !!s && s.drawn > 0 && a[1].every(n => s.legend.includes(n)); }",
                           arg=[selector, list(legend)], timeout=timeout)
    return page.evaluate(PLOT_SEEN_JS, selector)


def numeric_ticks(labels: list[str]) -> list[float]:
    """Tick labels as a person reads them: numbers, at most a score of them, evenly spaced. An axis that took
    the numbers for categories shows one label per value instead: as many as there are, unevenly spaced."""
    values = sorted(float(t.replace(",", "").replace("\u2212", "-")) for t in labels)
    gaps = [b - a for a, b in zip(values, values[1:])] or [0.0]
    assert 1 <= len(values) <= 25, labels
    assert max(gaps) - min(gaps) <= 1e-6 * (values[-1] - values[0]) + 1e-9, f"uneven ticks: {labels}"
    return values


DAMAGES = ("swap", "cut", "add")


def damage_transcripts(ws: Workspace, name: str, spares: list[str], every: int = 6) -> dict[str, str]:
    """Spoil every `every`-th transcript of a dataset the way real mislabels look, in turn: swapped with another
    sentence (of `spares`, not spoken in the dataset, the one closest in length, so the speaking rate alone does
    not give it away), cut in half, a sentence added. Returns {row id: damage}."""
    rows = load_manifest(ws, name)
    damaged = {}
    for k, i in enumerate(range(every // 2, len(rows), every)):
        kind, row, spare = DAMAGES[k % 3], rows[i], spares[k % len(spares)]
        words = row["text"].split()
        text = {"swap": min(spares, key=lambda s: abs(len(s) - len(row["text"]))), "cut": " ".join(words[: max(1, len(words) // 2)]),
                "add": f"{row['text']} {spare}"}[kind]
        row["text"] = row["normalized"] = text
        damaged[row["id"]] = kind
    save_manifest(ws, name, rows)
    return damaged


SPECIALS = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, "|": 4}
TINY_WAV2VEC2 = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                     conv_dim=(32, 32, 32), conv_stride=(5, 4, 4), conv_kernel=(10, 4, 4), num_conv_pos_embeddings=16,
                     num_conv_pos_embedding_groups=2, pad_token_id=0, feat_extract_norm="layer",
                     do_stable_layer_norm=True)


def tiny_recognizer(folder: Path, vocab: dict | None = None, target_lang: str | None = None, **config) -> Path:
    """A wav2vec 2.0 CTC recognizer of the real format (Wav2Vec2ForCTC + processor with an Ethiopic vocabulary, or
    `vocab`), random weights, a few thousand parameters, saved with save_pretrained: what a download gives, minus
    the skill. `target_lang`: the language of a nested (MMS) vocabulary the model's own head speaks."""
    import json

    import torch
    from transformers import (Wav2Vec2Config, Wav2Vec2CTCTokenizer, Wav2Vec2FeatureExtractor, Wav2Vec2ForCTC,
                              Wav2Vec2Processor)

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = vocab or {**SPECIALS, **{c: i + 5 for i, c in enumerate(ethiopic_letters())}}
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    tokenizer = Wav2Vec2CTCTokenizer(str(folder / "vocab.json"), word_delimiter_token="|", target_lang=target_lang)
    extractor = Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True,
                                         return_attention_mask=True)
    Wav2Vec2Processor(feature_extractor=extractor, tokenizer=tokenizer).save_pretrained(str(folder))
    torch.manual_seed(0)
    head = vocab[target_lang] if target_lang else vocab
    model = Wav2Vec2ForCTC(Wav2Vec2Config(vocab_size=len(head), **TINY_WAV2VEC2, **config))
    model.save_pretrained(str(folder))
    return folder


TINY_OMNIASR = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                    conv_dim=(32, 32, 32), conv_kernel=(10, 4, 4), conv_stride=(5, 4, 4), num_conv_pos_embeddings=16,
                    num_conv_pos_embedding_groups=2)


def tiny_omniasr(folder: Path, blank_bias: float = 0.0) -> Path:
    """An omniASR CTC recognizer in the hub's layout (config.json with model_type omniasr_ctc, model.safetensors,
    processor_config.json, tokenizer.json + tokenizer_config.json of a ParakeetTokenizer), random weights: the
    released tokenizer is a SentencePiece unigram whose id 0 is the CTC blank, named <pad>; here its pieces are
    the Ethiopic letters of the test sentences and the word mark. `blank_bias` is added to the blank's logit.
    A model card (README.md) declares the licence, as the hub's does."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import OmniASRCTCConfig, OmniASRCTCProcessor, OmniASRForCTC, ParakeetTokenizer
    from transformers.models.omniasr.feature_extraction_omniasr import OmniASRFeatureExtractor

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    pieces = ["<pad>", "<s>", "</s>", "<unk>", "\u2581"] + ethiopic_letters()
    unigram = Tokenizer(models.Unigram([(p, 0.0 if i < 4 else -1.0) for i, p in enumerate(pieces)], unk_id=3))
    unigram.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    unigram.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    tokenizer = ParakeetTokenizer(tokenizer_object=unigram, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                  unk_token="<unk>")
    OmniASRCTCProcessor(feature_extractor=OmniASRFeatureExtractor(), tokenizer=tokenizer).save_pretrained(str(folder))
    torch.manual_seed(0)
    model = OmniASRForCTC(OmniASRCTCConfig(vocab_size=len(pieces), audio_config=TINY_OMNIASR))
    with torch.no_grad():
        model.ctc_head.bias[0] += blank_bias  # blanks between symbols, as a trained CTC model emits them
    model.save_pretrained(str(folder))
    (folder / "README.md").write_text("---\nlicense: apache-2.0\n---\nA tiny random omniASR CTC.\n", encoding="utf-8")
    return folder


def ethiopic_letters() -> list[str]:
    return sorted({c for s in sentences(200) for c in s if 0x1200 <= ord(c) <= 0x137F})


def tiny_multilingual_recognizer(folder: Path, lang: str = "amh") -> Path:
    """The MMS layout (facebook/mms-1b-all) in miniature: a nested vocab.json ({"eng": {...}, lang: {...}}), a
    model with attention adapters (adapter_attn_dim) whose own head is English, and adapter.<lang>.safetensors
    holding the language's adapters and a head of its own size. Random weights, like `tiny_recognizer`."""
    from safetensors.torch import save_file
    from transformers import Wav2Vec2Config, Wav2Vec2ForCTC

    vocab = {"eng": {**SPECIALS, **{c: i + 5 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")}},
             lang: {**SPECIALS, **{c: i + 5 for i, c in enumerate(ethiopic_letters())}}}
    folder = tiny_recognizer(folder, vocab, target_lang="eng", adapter_attn_dim=8)
    other = Wav2Vec2ForCTC(Wav2Vec2Config(vocab_size=len(vocab[lang]), **TINY_WAV2VEC2, adapter_attn_dim=8))
    save_file({k: v.detach().contiguous() for k, v in other._get_adapters().items()},
              str(folder / f"adapter.{lang}.safetensors"))
    return folder


def screenshot(target, tmp_path: Path, name: str) -> Path:
    """What a person would see, as a PNG: into $AMHARIC_TTS_TEST_SHOTS when set (collect every browser test's
    pictures in one folder to look at: `AMHARIC_TTS_TEST_SHOTS=/tmp/shots bash tests/run.sh -k browser`), else
    the test's temporary folder; the path is printed (pytest -rP shows it)."""
    import os

    folder = Path(os.environ.get("AMHARIC_TTS_TEST_SHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    target.screenshot(path=path)
    print(f"screenshot: {path}")
    return path
