"""How fast the speech recognizer hears on this machine: seconds of audio per second of work, for omniASR CTC
300M v2 (the default on a CPU) against MMS-1b-all, both at their real sizes with random weights (the hub is not
needed: the time does not depend on what the weights learned).

    python bench/recognizer_speed.py                     # 10 s of espeak-ng Amharic, 2 timed passes each
    python bench/recognizer_speed.py --seconds 30 --threads 2
    python bench/transcripts.py --recognizer-speed       # the same table after the transcript check's
    python bench/mcd_calibration.py --recognizer-speed   # ... and beside an evaluation's MCD cost

Each model goes through the studio's own path (utils.transcripts.ctc.Recognizer.logits: the model's feature
extractor, a forward pass in the dtype the machine uses); one warm-up pass, then `--repeats` timed ones. Sizes:
omniASR's audio encoder as transformers' OmniASRAudioConfig defaults (1024 wide, 24 layers: the released 300M,
vocabulary 10,288), MMS as facebook/mms-1b-all's config (1280 wide, 48 layers, its Amharic head).
"""
from __future__ import annotations

import argparse
import time

import common  # bench/common.py (the script's folder is on sys.path); puts the repository root there too
import numpy as np

MMS_1B = dict(hidden_size=1280, num_hidden_layers=48, num_attention_heads=16, intermediate_size=5120,
              feat_extract_norm="layer", do_stable_layer_norm=True, conv_bias=True, vocab_size=154,
              adapter_attn_dim=16)  # facebook/mms-1b-all's config.json; 154: the Amharic adapter's head


def _omniasr():
    from transformers import OmniASRCTCConfig, OmniASRForCTC
    from transformers.models.omniasr.feature_extraction_omniasr import OmniASRFeatureExtractor

    model = OmniASRForCTC(OmniASRCTCConfig())  # vocabulary 10,288 and the 300M encoder are its defaults
    return model, OmniASRFeatureExtractor(), model.config.audio_config, model.config.blank_token_id


def _mms():
    from transformers import Wav2Vec2Config, Wav2Vec2FeatureExtractor, Wav2Vec2ForCTC

    model = Wav2Vec2ForCTC(Wav2Vec2Config(**MMS_1B))
    extractor = Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True,
                                         return_attention_mask=True)
    return model, extractor, model.config, model.config.pad_token_id


BUILDERS = {"omniASR CTC 300M v2": _omniasr, "MMS-1b-all": _mms}


def recognizer(build, device: str):
    """A utils.transcripts.ctc.Recognizer around a model built in memory (no folder, no tokenizer: only timed)."""
    import torch

    from utils.hardware import inference_precision
    from utils.transcripts.ctc import Recognizer

    model, extractor, conv, blank = build()
    rec = Recognizer.__new__(Recognizer)
    rec.extractor, rec.tokenizer, rec.blank = extractor, None, blank
    rec.conv = (tuple(conv.conv_kernel), tuple(conv.conv_stride))
    rec.dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(inference_precision(device), torch.float32)
    rec.model, rec.device = model.to(device, rec.dtype).eval(), device
    return rec


def speech(seconds: float) -> np.ndarray:
    """espeak-ng Amharic sentences at 16 kHz, joined up to `seconds`."""
    import tempfile
    from pathlib import Path

    from tests.helpers import espeak_amharic, sentences
    from utils.audio import load_audio

    parts, total = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, text in enumerate(sentences(50)):
            wav = Path(tmp) / f"{i}.wav"
            espeak_amharic(text, wav)
            parts.append(load_audio(wav, sample_rate=16000)[0])
            total += len(parts[-1])
            if total >= seconds * 16000:
                break
    return np.concatenate(parts)[: int(seconds * 16000)].astype(np.float32)


def measure(seconds: float = 10.0, repeats: int = 2, names=tuple(BUILDERS)) -> list[dict]:
    """One row a model: parameters, audio seconds, mean wall seconds a pass, audio seconds per second."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    wave, rows = speech(seconds), []
    for name in names:
        t0 = time.perf_counter()
        rec = recognizer(BUILDERS[name], device)
        built = time.perf_counter() - t0
        rec.logits([wave])  # warm-up
        walls = []
        for _ in range(repeats):
            common.sync(device)
            t0 = time.perf_counter()
            rec.logits([wave])
            common.sync(device)
            walls.append(time.perf_counter() - t0)
        params = sum(p.numel() for p in rec.model.parameters()) / 1e6
        rows.append({"model": name, "params_m": round(params, 1), "dtype": str(rec.dtype).split(".")[-1],
                     "audio_s": len(wave) / 16000, "wall_s": float(np.mean(walls)),
                     "audio_s_per_s": len(wave) / 16000 / float(np.mean(walls)), "build_s": built})
        del rec
        common.release(device)
    return rows


COLUMNS = [("model", "recognizer"), ("params_m", "params (M)", "{:.0f}"), ("dtype", "dtype"),
           ("audio_s", "audio (s)", "{:.1f}"), ("wall_s", "s per pass", "{:.2f}"),
           ("audio_s_per_s", "audio s per s", "{:.2f}")]


def report(rows: list[dict]) -> str:
    """The markdown table, then the default's speed as a multiple of MMS's."""
    table = common.markdown_table(COLUMNS, rows)
    speed = {r["model"]: r["audio_s_per_s"] for r in rows}
    if len(speed) == 2:
        a, b = speed.values()
        table += f"\n\n{rows[0]['model']} hears {a / b:.1f}x as fast as {rows[1]['model']} here."
    return table


def add_args(parser) -> None:
    parser.add_argument("--recognizer-seconds", type=float, default=10.0, help="audio per timed pass")
    parser.add_argument("--recognizer-repeats", type=int, default=2, help="timed passes per model")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_args(p)
    common.add_machine_args(p)
    args = p.parse_args()
    common.start(args)
    rows = measure(args.recognizer_seconds, args.recognizer_repeats)
    print(report(rows))
    common.save("recognizer_speed", {"rows": rows}, out=args.out)


if __name__ == "__main__":
    main()
