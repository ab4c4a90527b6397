"""How fast OmniVoice speaks from a clip voice: seconds to speak a sentence, real-time factor and first-audio time,
by decoding steps, through the studio's Voice (the package's generate and the codec, the Inference tab's path).

    python bench/omnivoice_speak.py                         # CPU: the tiny base, and the released shapes (random)
    python bench/omnivoice_speak.py --steps 16 32 --sizes full   # a GPU: in its half precision

Why: the Inference tab and the user guide tell a curator what to expect of a clip voice on their machine, and
`--sizes full` times the released base's backbone (613 M parameters, random weights, no 3.3 GB download): a random
model's iterative decoding does the same work a trained one does for the same length. The codec stays the tiny one
(its decode is a small part of the time; noted in the table). The first call of each size warms up, untimed.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import common  # bench/common.py: puts the repository root on sys.path

SENTENCE = "ኢትዮጵያ በምሥራቅ አፍሪካ የምትገኝ ሀገር ናት።"
CLIP_TEXT = "ሰላም ነው። ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው። ወደ ገበያ እንሄዳለን።"
COLUMNS = [("size", "backbone"), ("device", "device"), ("precision", "precision"), ("steps", "decoding steps"),
           ("seconds", "s to speak", "{:.2f}"), ("audio_s", "s of audio", "{:.2f}"), ("rtf", "real-time factor",
                                                                                        "{:.2f}")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, nargs="+", default=[8, 32], help="decoding steps (the package's default 32)")
    p.add_argument("--sizes", nargs="+", default=["tiny", "full"], choices=["tiny", "full"])
    common.add_machine_args(p)
    args = p.parse_args()
    common.start(args)
    device = common.device_tag()

    from tests.helpers import espeak_amharic
    from utils.omnivoice.speech import make_voice
    from utils.omnivoice.tiny import write_tiny_base
    from utils.workspace import Workspace

    root = Path(tempfile.mkdtemp(prefix="bench-omnivoice-speak-"))
    ws = Workspace.open(root / "ws")
    clip = espeak_amharic(CLIP_TEXT, root / "clip.wav")
    rows = []
    for size in args.sizes:
        base = write_tiny_base(root / f"base-{size}", size=size)
        folder = make_voice(ws, f"clip-{size}", clip, CLIP_TEXT, base)
        rows += _time(folder, size, device, args.steps)
        print(common.markdown_table(COLUMNS, rows), flush=True)
    print(f"\n# OmniVoice speech from a clip voice, {common.machine()['summary']} (the codec: the tiny one)")
    print(common.markdown_table(COLUMNS, rows))
    common.save("omnivoice_speak", {"rows": rows, "sentence": SENTENCE}, out=args.out)


def _time(folder: Path, size: str, device: str, steps: list[int]) -> list[dict]:
    from utils.inference.speech import Voice

    voice = Voice.load(folder, device=device)
    precision = str(next(voice.model.parameters()).dtype).replace("torch.", "")
    voice.synthesize(SENTENCE, steps=2)  # warm-up: kernels, the prompt's tokens
    rows = []
    for n in steps:
        common.sync(device)
        t0 = time.perf_counter()
        wave, sr, _ = voice.synthesize(SENTENCE, steps=n, seed=0)
        common.sync(device)
        seconds = time.perf_counter() - t0
        rows.append({"size": "613 M (random)" if size == "full" else "tiny", "device": device,
                     "precision": precision, "steps": n, "seconds": seconds, "audio_s": len(wave) / sr,
                     "rtf": seconds / max(1e-9, len(wave) / sr)})
    del voice
    common.release(device)
    return rows


if __name__ == "__main__":
    main()
