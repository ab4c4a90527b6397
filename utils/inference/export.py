"""Exporting a voice: a self-contained folder (and a zip) that speaks elsewhere, optionally as ONNX.

    voices/<name>/model.safetensors   acoustic weights (as in the checkpoint)
    voices/<name>/config.json         sizes, symbols, tokenizer, features, speakers + a "voice" section
    voices/<name>/vocoder/            Vocos weights in this app's format (+ their LICENSE.md), unless Griffin-Lim
    voices/<name>/acoustic.onnx       with --onnx: text ids -> mel, `steps` Euler steps unrolled
    voices/<name>/vocoder.onnx        with --onnx and a vocoder: mel -> magnitude + phase (ISTFT outside)
    voices/<name>/pronunciations.tsv  the workspace's pronunciation dictionary, which the voice reads with elsewhere
    voices/<name>/README.md           what it is (its weights' licence first) and a Python snippet that uses it
    voices/<name>/LICENSE.txt         a voice fine-tuned from a licensed base (F5): that licence (CC-BY-NC-4.0)
    exports/<name>.zip                all of the above in one file to download
"""
from __future__ import annotations

import shutil
import time
import zipfile
from pathlib import Path

from utils import families
from utils.events import StudioError
from utils.family_contract import family_optional
from utils.inference.voices import GRIFFIN_LIM, auto_vocoder, resolve_voice, vocoder_source
from utils.text.lexicon import format_user_dict, load_user_dict
from utils.voice_folders import DICTIONARY
from utils.vocoder.default import NOTICE, notice
from utils.workspace import Workspace, atomic_write_json, atomic_write_text, read_json

WEIGHTS_LICENCE = "LICENSE.txt"  # beside model.safetensors: the licence of a voice fine-tuned from a licensed base
CC_BY_NC = "https://creativecommons.org/licenses/by-nc/4.0/legalcode"


def usage_snippet(folder_name: str, speakers: list[str], onnx: bool) -> str:
    """The Python a user pastes to speak with an exported voice (with this project's code installed)."""
    speaker = f', speaker="{speakers[0]}"' if len(speakers) > 1 else ""
    text = f'''```python
# in a clone of Amharic TTS Studio (pip install -r requirements.txt)
from utils.inference import Voice
from utils.audio import save_audio

voice = Voice.load("{folder_name}")                      # the unzipped voice folder
wave, sample_rate, info = voice.synthesize("ሰላም ነው። እንዴት ነህ?"{speaker}, length_scale=1.0)
save_audio("hello.wav", wave, sample_rate)
```
'''
    if onnx:
        text += f'''
With ONNX Runtime instead of PyTorch (the Amharic text frontend still comes from this project):

```python
from utils.inference.onnx_voice import OnnxVoice
from utils.audio import save_audio

voice = OnnxVoice("{folder_name}")
wave, sample_rate = voice.synthesize("ሰላም ነው።"{speaker})
save_audio("hello-onnx.wav", wave, sample_rate)
```
'''
    return text


def _readme(name: str, config: dict, onnx_files: list[str]) -> str:
    voice = config["voice"]
    speakers = list(config.get("speakers") or [])
    licence = config.get("licence")
    return (f"# Voice: {name}\n\nAn Amharic voice exported by Amharic TTS Studio on {voice['exported']} from "
            f"`{voice['source']}` (step {config.get('step', '?')}).\n\n"
            + (f"**Licence: {licence}.** These weights were fine-tuned from a pretrained model under that licence "
               f"and keep it: see {WEIGHTS_LICENCE}.\n\n" if licence else "")
            + f"- speakers: {', '.join(speakers) or 'one'}\n"
            f"- vocoder: {voice['vocoder_source'] or _no_vocoder(config)}"
            + (f" ({voice['vocoder_licence']}; see vocoder/{NOTICE})" if voice.get("vocoder_licence") else "") + "\n"
            f"- sample rate: {(config.get('features') or {}).get('sample_rate', 24000)} Hz\n"
            + f"- pronunciation dictionary: {_dictionary_line(voice.get('pronunciations', 0))}\n"
            + (f"- ONNX: {', '.join(onnx_files)}" + (f" ({voice.get('onnx_steps')} flow steps)" if
                                                     families.of(config).USES_STEPS else "") + "\n" if onnx_files else "")
            + "\n## Use it\n\n" + usage_snippet(name, speakers, bool(onnx_files)))


def _dictionary_line(words: int) -> str:
    if not words:
        return "none (the workspace had none at export): every word is read by the studio's pronunciation rules"
    return (f"{DICTIONARY}, {words} word{'s' if words != 1 else ''} as the workspace's G2P tab held them at export. "
            "`Voice.load` and `OnnxVoice` read with it, so the voice says those words as it did in the studio; edit it "
            "(a word, a tab, its phonemes separated by spaces) to change them. Spoken inside a workspace, the voice "
            "reads with that workspace's dictionary instead")


def _no_vocoder(config: dict) -> str:
    family = families.of(config)
    return "none (Griffin-Lim)" if family.USES_VOCODER else f"none: {family.TITLE} makes the waveform itself"


def _licence_notice(licence: str) -> str:
    """A fine-tuned voice inherits its base's licence (F5-TTS v1 Base: CC-BY-NC-4.0, non-commercial use only); the
    notice travels with the weights, in the folder and the zip, not only inside config.json."""
    text = (f"Licence of this voice's weights (model.safetensors): {licence}\n\n"
            "They were fine-tuned by Amharic TTS Studio from a pretrained model published under that licence, and "
            "derived weights keep it. Whoever uses or shares this voice must follow it.\n")
    if "CC-BY-NC" in licence:
        text += f"\nCC-BY-NC-4.0 in short: credit the authors, and no commercial use. Full text: {CC_BY_NC}\n"
    return text


def same_name_note(ws: Workspace, name: str) -> str:
    """Said after an export that took its run's name (the default): a voice comes before a run of the same name, so
    that name (a picker's, --voice NAME) now speaks this copy, not the run's newest best as it trains on."""
    if name not in ws.list_runs():
        return ""
    return (f" The name {name} is also its run's: picking {name} (or --voice {name}) now speaks this voice, the "
            "checkpoint it was made from, even if the run trains on; export it again to take a later one.")


def exported_from_run(ws: Workspace, voice_name: str, run: str) -> bool:
    """Whether the voice of that name was exported from this run: the Training tab's Export as voice, pressed again
    for the run's later best, replaces it (that tab has no Overwrite box; it was refused and sent there)."""
    try:
        config = read_json(ws.voice_dir(voice_name) / "config.json", {}) or {}
    except StudioError:  # a name no voice can have: export_voice says why
        return False
    return str((config.get("voice") or {}).get("source") or "").startswith(f"runs/{run}/")


def export_voice(ws: Workspace, source: str, voice_name: str, vocoder: str | None = None,
                 overwrite: bool = False, onnx: bool = False, onnx_steps: int = 10) -> Path:
    """Copy an acoustic checkpoint (a run name, checkpoint folder or voice) and a vocoder (None/"auto": see
    `auto_vocoder`; "griffin-lim": none) into voices/<name>/, write its README with a usage snippet, optionally
    ONNX files, and zip it into exports/<name>.zip."""
    from utils.vocoder import load_vocoder, save_vocoder

    folder = resolve_voice(ws, source)
    target = ws.voice_dir(voice_name)
    if target.exists() and not overwrite:
        raise StudioError(f"A voice called {voice_name} exists already; pick another name, or replace it ('Overwrite "
                          "a voice of that name' under the Inference tab's Export a voice; --overwrite on the command "
                          "line).")
    if target == folder:
        raise StudioError(f"{voice_name} is the voice being exported; pick another name.")
    tmp = target.with_name(f".{target.name}.tmp-export")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        config = read_json(folder / "config.json")
        for name in ("model.safetensors", *family_optional(families.of(config), "VOICE_FILES", ())):  # a clip voice: none
            if (folder / name).is_file():
                shutil.copy2(folder / name, tmp / name)
        config.pop("voice", None)
        vocoder_label, voc, licence = None, None, None
        if not families.of(config).USES_VOCODER:  # its model makes the waveform itself (MMS): nothing to copy
            vocoder = GRIFFIN_LIM
        elif vocoder in (None, "", "auto"):  # the voice's own (re-exporting keeps it), else the workspace default
            chosen = auto_vocoder(ws, folder)
            vocoder = str(chosen.relative_to(ws.root)) if chosen is not None else None
        if vocoder and vocoder != GRIFFIN_LIM:
            source_dir = vocoder_source(ws, vocoder)
            voc = load_vocoder(source_dir)
            save_vocoder(voc, tmp / "vocoder", source=str(vocoder))
            if (Path(source_dir) / NOTICE).is_file():  # MIT: the licence travels with the weights
                shutil.copy2(Path(source_dir) / NOTICE, tmp / "vocoder" / NOTICE)
                licence = notice(tmp / "vocoder").get("Licence")
            vocoder_label = str(vocoder)
        config["voice"] = {"name": voice_name, "source": str(folder.relative_to(ws.root)),
                           "vocoder": "vocoder" if vocoder_label else None, "vocoder_source": vocoder_label,
                           "vocoder_licence": licence, "exported": time.strftime("%Y-%m-%d %H:%M:%S")}
        words = load_user_dict(ws)  # what the curator heard in the studio: the voice reads with it elsewhere
        if words:
            atomic_write_text(tmp / DICTIONARY, format_user_dict(words))
            config["voice"]["pronunciations"] = len(words)
        atomic_write_json(tmp / "config.json", config)
        if config.get("licence"):
            atomic_write_text(tmp / WEIGHTS_LICENCE, _licence_notice(config["licence"]))
        onnx_files = families.of(config).export(tmp, voc, onnx_steps) if onnx else []  # its family's files
        if onnx_files:
            config["voice"].update(onnx_steps=int(onnx_steps), onnx=onnx_files)
            atomic_write_json(tmp / "config.json", config)
        atomic_write_text(tmp / "README.md", _readme(voice_name, config, onnx_files))
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    zip_voice(ws, voice_name)
    return target


def zip_voice(ws: Workspace, voice_name: str) -> Path:
    """exports/<name>.zip holding the voice folder (written beside, then renamed)."""
    folder = ws.voice_dir(voice_name)
    out = ws.root / "exports" / f"{voice_name}.zip"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, f"{voice_name}/{path.relative_to(folder)}")
    tmp.replace(out)
    return out


# A voice zip unpacks to its weights (an F5 or OmniVoice fine-tune is a few GB), never more
VOICE_ZIP_BYTES, VOICE_ZIP_ENTRIES, VOICE_ZIP_RATIO = 40 * 10**9, 10_000, 200


def import_voice(ws: Workspace, zip_path: Path) -> tuple[str, str]:
    """A voice zip (what Export writes: <name>/ with the weights, config and README) unpacked into voices/<name>/:
    (its name, what was done). The same voice already there is used as it is; another of that name is refused. Its
    pronunciation entries that this workspace reads otherwise are named: a voice inside a workspace reads with the
    workspace's dictionary."""
    from utils.datasets.safezip import safe_extract
    from utils.voice_folders import is_acoustic, voice_dictionary
    from utils.workspace import check_name

    zip_path = Path(zip_path)
    tmp = ws.voices / f".{zip_path.stem}.tmp-import"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        safe_extract(zip_path, tmp, VOICE_ZIP_BYTES, VOICE_ZIP_ENTRIES, VOICE_ZIP_RATIO)
        inner = [p for p in tmp.iterdir() if not p.name.startswith((".", "__MACOSX"))]
        folder = inner[0] if len(inner) == 1 and inner[0].is_dir() else tmp
        if not is_acoustic(folder):
            raise StudioError(f"{zip_path.name} holds no voice: a voice zip holds a folder with model.safetensors "
                              "and config.json, as Export voice writes it (a vocoder goes under Add Vocos weights).")
        name = check_name(folder.name if folder is not tmp else zip_path.stem, "voice name")
        target = ws.voice_dir(name)
        if target.exists():
            if (target / "config.json").read_bytes() == (folder / "config.json").read_bytes():
                return name, f"Voice {name} is in this workspace already (the same export): it is used as it is."
            raise StudioError(f"A different voice called {name} is in this workspace already: rename the zip's folder, "
                              "or delete voices/" + name + " first.")
        folder.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    said = f"Imported voice {name} into {target}."
    try:
        carried, here = voice_dictionary(target), load_user_dict(ws)
    except StudioError as exc:  # imported all the same: it speaks; the words it reads otherwise cannot be told
        return name, f"{said} Its pronunciation dictionary or this workspace's cannot be read ({exc})."
    if differ := sorted(w for w, reading in carried.items() if here.get(w) != reading):
        shown = ", ".join(differ[:8]) + (f" and {len(differ) - 8} more" if len(differ) > 8 else "")
        said += (f" It carries {len(carried)} pronunciation entries; {len(differ)} of them this workspace's dictionary "
                 f"lacks or reads otherwise ({shown}), and here it reads with the workspace's: add them on the G2P "
                 "tab to hear it as it was exported.")
    return name, said
