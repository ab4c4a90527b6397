"""The speech recognizers the studio knows by name, and the one this machine should fetch, with its reason.

omniASR CTC v2 (Meta, Apache-2.0, loaded by transformers >= 5.24 as `OmniASRForCTC`) is the default: on the public
Amharic benchmark SaarAI/GSMAEthioTelecomBench its error rate is 18.91 (300M v2) and 14.24 (1B v2), against 81.07
for MMS-1b-all, which is also three times the download of the 300M and non-commercial. MMS stays selectable.
Sizes are the released checkpoints' (omniASR-CTC-300M-v2.pt 1,304,065,508 bytes, omniASR-CTC-1B-v2.pt
3,902,956,068 bytes: fp32 weights of 326 M and 975 M parameters).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Known:
    repo: str
    title: str
    params_m: int      # parameters, millions
    download_gb: float
    gpu_gb: float      # GPU memory to recognise in half precision, weights and a batch of 30 s chunks
    licence: str
    lang: str = ""     # the language adapter to load (MMS only)
    cer_gsma: float = 0.0  # error rate on SaarAI/GSMAEthioTelecomBench (Amharic), as published
    confirmed: bool = True  # a source names this hub id; one that none names is never fetched unasked
    fallback: str = ""      # what a fetch takes instead when the hub says this id does not exist


OMNI_300M = Known("hf-audio/omniasr-ctc-300m-v2", "omniASR CTC 300M v2", 326, 1.3, 2.0, "Apache-2.0", "", 18.91)
# transformers' own source names hf-audio/omniasr-ctc-300m-v2 (models/omniasr_ctc: its configuration's checkpoint and
# the examples of modeling_omniasr_ctc.py). No source found names hf-audio/omniasr-ctc-1b-v2 (searched 2026-11-29:
# the docs, issues and code corpora name Meta's fairseq2 checkpoint facebook/omniASR-CTC-1B and third-party
# Wav2Vec2ForCTC conversions such as aadel4/omniASR-CTC-1B-v2, not an OmniASRForCTC one). So the 1B is offered, not
# chosen by itself, and a fetch of it the hub does not know takes the 300M instead, said in one line.
OMNI_1B = Known("hf-audio/omniasr-ctc-1b-v2", "omniASR CTC 1B v2", 975, 3.9, 4.0, "Apache-2.0", "", 14.24,
                confirmed=False, fallback=OMNI_300M.repo)
MMS = Known("facebook/mms-1b-all", "MMS-1b-all", 965, 3.9, 4.0, "CC-BY-NC-4.0 (non-commercial use only)", "amh",
            81.07)
KNOWN = {k.repo: k for k in (OMNI_300M, OMNI_1B, MMS)}
CPU_SLOWER_1B = 2.4  # MMS-1b-all's size against the 300M's on a 2-core CPU (bench/RESULTS.md, 2026-11-26)
BIG_GPU_GB = 20.0  # below this (a 15 GB T4, a 16 GB laptop card) the GPU is the training run's; the 300M leaves it


def known(source: str) -> Known | None:
    return KNOWN.get(str(source).strip())


def omniasr_loadable() -> bool:
    """Whether the installed transformers has omniASR CTC (5.24 and later, which need Python 3.11: on Python 3.10
    the requirements install an older one, and MMS-1b-all is the recognizer there)."""
    import importlib.util

    # the package's folder, not find_spec of the submodule: that imports transformers (two seconds of every app start)
    spec = importlib.util.find_spec("transformers")
    folders = spec.submodule_search_locations if spec else None
    return bool(folders) and any((Path(f) / "models" / "omniasr_ctc" / "__init__.py").is_file() for f in folders)


def choose(gpus_gb: list[float], omniasr: bool | None = None) -> tuple[Known, str]:
    """(the recognizer to fetch, why this one) for a machine with GPUs of these memories (GiB; [] for a CPU) whose
    transformers has omniASR (`omniasr`; None: this one's)."""
    if not (omniasr_loadable() if omniasr is None else omniasr):
        import sys

        return MMS, (f"omniASR needs transformers 5.24 or newer, which needs Python 3.11 or newer (this is Python "
                     f"{sys.version_info[0]}.{sys.version_info[1]}); on a newer Python, install the requirements "
                     "again for omniASR")
    if not gpus_gb:
        return OMNI_300M, (f"there is no GPU, and on a CPU omniASR's 1B model takes {CPU_SLOWER_1B}x as long for "
                           f"its lower error rate ({OMNI_1B.cer_gsma})")
    if max(gpus_gb) < BIG_GPU_GB:
        return OMNI_300M, (f"this {max(gpus_gb):.0f} GB GPU keeps its memory for training; omniASR's 1B model "
                           f"needs about {OMNI_1B.gpu_gb:.0f} GB beside it")
    if not OMNI_1B.confirmed:
        return OMNI_300M, (f"omniASR's 1B model (error rate {OMNI_1B.cer_gsma}) would fit this {max(gpus_gb):.0f} GB "
                           f"GPU, but no source confirms its hub id {OMNI_1B.repo} yet; pick it in the Recognizer box "
                           "to try it (the 300M is fetched instead if the hub does not have it)")
    return OMNI_1B, (f"this {max(gpus_gb):.0f} GB GPU holds it beside a training run, for a lower error rate than "
                     f"the 300M's ({OMNI_300M.cer_gsma})")


def for_this_machine() -> tuple[Known, str]:
    """`choose` for the GPUs this machine has (NVML/torch through utils.hardware; none is a CPU)."""
    from utils.hardware import query_gpus

    return choose([g.memory_gb for g in query_gpus()])


def line(choice: tuple[Known, str]) -> str:
    """What the System tab and `app.py hardware` say of it: the model and its facts, then why this one."""
    model, why = choice
    facts = (f"{model.repo}, {model.download_gb} GB download, about {model.gpu_gb:.0f} GB of GPU memory, error rate "
             f"{model.cer_gsma} on an Amharic benchmark, licence {model.licence}")
    return f"Speech recognizer to fetch: {model.title} ({facts}). Why this one: {why}."
