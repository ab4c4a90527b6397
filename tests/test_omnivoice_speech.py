"""OmniVoice speaks through the package's own model and generate, from packages only its family puts on the path.

A tiny random OmniVoice in the hub's layout (utils/omnivoice/tiny.py) stands in for the 3.3 GB base: same files,
same classes, same code. Its voice is noise, so these tests check the plumbing: that the waveform is exactly what
the package makes for the same text, prompt and seed; that long text is split at Ethiopic punctuation and streamed;
that a voice made from a clip travels (export, another folder) and speaks; and that no other family imports
torchaudio.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import espeak_amharic
from utils.events import StudioError
from utils.workspace import Workspace

CLIP_TEXT = "ሰላም ነው። ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው።"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def clip_workspace(tmp_path_factory):
    """A workspace with the tiny base in pretrained/omnivoice/ and a voice made from an espeak-ng clip."""
    from utils.omnivoice.speech import make_voice
    from utils.omnivoice.tiny import write_tiny_base

    root = tmp_path_factory.mktemp("omnivoice")
    ws = Workspace(root / "ws")
    base = write_tiny_base(ws.root / "pretrained" / "omnivoice")
    clip = espeak_amharic(CLIP_TEXT, root / "given" / "clip.wav")
    digest = hashlib.sha1(clip.read_bytes()).hexdigest()
    make_voice(ws, "abebe", clip, CLIP_TEXT, base)
    return ws, base, clip, digest


def test_a_clip_voice_is_the_packages_own_generate_for_the_same_text_prompt_and_seed(clip_workspace):
    import torch
    from omnivoice import OmniVoice

    from utils.inference.speech import Voice

    ws, _, clip, digest = clip_workspace
    voice = Voice.load(ws.voice_dir("abebe"))
    assert type(voice.model.model) is OmniVoice  # the package's class, not a copy of it
    wave, sr, info = voice.synthesize("ሰላም ነው።", steps=4, seed=7)
    assert sr == 24_000 and info["spoken"] == 1 and wave.size > 0

    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=torch.Generator().manual_seed(7), device="cpu").item())
    torch.manual_seed(seed)
    direct = voice.model.model.generate(text=["ሰላም ነው።"], language=["am"], voice_clone_prompt=[voice.model.prompt],
                                        num_step=4, speed=1.0)[0]
    peak = float(np.abs(direct).max())
    expected = direct * (0.99 / peak) if peak > 0.99 else direct  # the Voice scales an overshoot, never clips
    np.testing.assert_allclose(wave, expected.astype(np.float32), rtol=0, atol=1e-6)
    assert hashlib.sha1(clip.read_bytes()).hexdigest() == digest  # the clip given is only read


def test_speech_asks_for_the_denoise_mark_on_purpose_and_a_fine_tunes_samples_never_carry_it(clip_workspace):
    """The package's generate adds <|denoise|> before a reference clip unless told not to, and its recipe never
    trains on it with plain clips: the studio says denoise=True itself (about.DENOISE, decided as the package's recipe
    does), the mark reaches the model (the tiny base speaks otherwise without it), and no training sample has it."""
    import torch

    from utils.inference.speech import Voice
    from utils.omnivoice.data import Item, TokenDataset, make_processor

    voice = Voice.load(clip_workspace[0].voice_dir("abebe"))
    package, asked = voice.model.model, []
    generate = package.generate
    package.generate = lambda **kw: asked.append(kw) or generate(**kw)
    try:
        wave, _, _ = voice.synthesize("ሰላም ነው።", steps=2, seed=3)
    finally:
        del package.generate
    assert asked and asked[0]["denoise"] is True
    torch.manual_seed(0)
    plain = package.generate(**{**asked[0], "denoise": False})[0]
    torch.manual_seed(0)
    marked = package.generate(**asked[0])[0]
    assert plain.shape != marked.shape or not np.array_equal(plain, marked)

    mark = package.text_tokenizer.convert_tokens_to_ids("<|denoise|>")
    processor = make_processor(package.text_tokenizer, package.config)
    item = Item({"id": "x"}, "ሰላም ነው።", np.zeros((8, 40), np.int16), 60)
    samples = [TokenDataset([item], processor, seed)[0] for seed in range(20)]
    assert not any((s["input_ids"] == mark).any() for s in samples)


def test_the_same_seed_speaks_the_same_and_another_seed_differs(clip_workspace):
    from utils.inference.speech import synthesize

    ws = clip_workspace[0]
    first, _, _ = synthesize(ws, "abebe", "እንዴት ነህ?", steps=4, seed=1)
    again, _, _ = synthesize(ws, "abebe", "እንዴት ነህ?", steps=4, seed=1)
    other, _, _ = synthesize(ws, "abebe", "እንዴት ነህ?", steps=4, seed=2)
    assert np.array_equal(first, again) and np.abs(first).max() > 0
    assert first.shape != other.shape or not np.array_equal(first, other)


def test_long_text_is_split_at_ethiopic_punctuation_read_as_written_and_streamed(clip_workspace):
    from utils.inference.speech import Voice

    ws = clip_workspace[0]
    voice = Voice.load(ws.voice_dir("abebe"))
    text = "ሰላም ነው። እንዴት ነህ? ዋጋው 25 ብር ነው፣ ግን ውድ ነው።"
    chunks = list(voice.stream(text, steps=2, batch_size=1))
    rows = [row for chunk in chunks for row in chunk.rows]
    assert len(chunks) == 3 and chunks[0].done == 1 and chunks[-1].done == 3  # one sentence at a time
    # numbers spelled out, Ethiopic punctuation kept (the model learnt Amharic with it), nothing skipped
    assert [row["phonemes"] for row in rows] == ["ሰላም ነው።", "እንዴት ነህ?", "ዋጋው ሃያ አምስት ብር ነው፣ ግን ውድ ነው።"]
    assert all(row["skipped"] == "" for row in rows)


def test_an_exported_clip_voice_speaks_from_another_folder(clip_workspace, tmp_path):
    import shutil

    from utils.inference.export import export_voice
    from utils.inference.speech import Voice

    ws = clip_workspace[0]
    folder = export_voice(ws, "abebe", "abebe-copy")
    assert {p.name for p in folder.iterdir()} >= {"config.json", "prompt.wav", "LICENSE.txt", "README.md"}
    assert "Boson Higgs Audio 2 Community License" in (folder / "LICENSE.txt").read_text()
    moved = shutil.copytree(folder, tmp_path / "elsewhere" / "abebe-copy")
    wave, sr, _ = Voice.load(moved).synthesize("ሰላም", steps=2)
    assert sr == 24_000 and wave.size > 0


def test_a_voice_without_its_base_says_where_to_put_it(clip_workspace, tmp_path, monkeypatch):
    import json
    import shutil

    from utils.inference.speech import Voice

    ws = clip_workspace[0]
    moved = shutil.copytree(ws.voice_dir("abebe"), tmp_path / "lost")
    config = json.loads((moved / "config.json").read_text())
    config["model"].update(base=str(tmp_path / "gone"), base_path=str(tmp_path / "gone"))
    (moved / "config.json").write_text(json.dumps(config))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(StudioError, match=r"Looked in the workspace .*, where it was made .*gone.* Hugging Face cache"
                                          r".*pretrained/omnivoice"):
        Voice.load(moved)


def test_a_workspace_that_moved_takes_its_voices_along_old_and_new(clip_workspace, tmp_path, monkeypatch):
    """Colab to Lightning AI, a renamed Drive folder: the voices of a moved workspace speak with the base in its own
    pretrained/omnivoice/, also one made before bases were named relative to the workspace (an absolute path to a
    place that is gone)."""
    import json
    import shutil

    from utils.inference.speech import Voice
    from utils.omnivoice.base import base_of

    ws = clip_workspace[0]
    assert json.loads((ws.voice_dir("abebe") / "config.json").read_text())["model"]["base"] == "pretrained/omnivoice"
    moved = Workspace(shutil.copytree(ws.root, tmp_path / "renamed drive" / "ws"))
    old = shutil.copytree(moved.voice_dir("abebe"), moved.voice_dir("older"))
    config = json.loads((old / "config.json").read_text())
    config["model"] = {"base": "/content/drive/ws/pretrained/omnivoice", "hub_id": "k2-fsa/OmniVoice",
                       "weights": "base"}  # as voices were written before
    (old / "config.json").write_text(json.dumps(config))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    for name in ("abebe", "older"):
        folder = moved.voice_dir(name)
        assert base_of(folder, json.loads((folder / "config.json").read_text())) == moved.root / "pretrained/omnivoice"
    wave, sr, _ = Voice.load(moved.voice_dir("older")).synthesize("ሰላም", steps=2)
    assert sr == 24_000 and wave.size > 0


def test_activate_hands_transformers_the_real_codec_after_it_decided_torchaudio_was_missing(tmp_path):
    """In a fresh process transformers is imported first (the recognizer does it), with no torchaudio on the path;
    activate() then makes the package importable and the codec a real class, not transformers' placeholder."""
    code = ("import transformers\n"
            "from utils.omnivoice.runtime import activate\n"
            "activate()\n"
            "import omnivoice\n"
            "from utils.omnivoice.tiny import tiny_codec_config\n"
            "from transformers import HiggsAudioV2TokenizerModel as H\n"
            "import torch\n"
            "codes = H(tiny_codec_config()).eval().encode(torch.zeros(1, 1, 9600)).audio_codes\n"
            "print(tuple(codes.shape))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "(1, 8, 10)"


def test_no_other_family_imports_torchaudio_or_omnivoice():
    """The studio's UI (every tab), another family's speech and its trainer's modules load without them."""
    code = ("import sys\n"
            "from utils.workspace import Workspace\n"
            "import tempfile\n"
            "from webui.app import build_ui\n"
            "from webui.context import AppContext\n"
            "build_ui(AppContext(Workspace.open(tempfile.mkdtemp())))\n"
            "import utils.matcha.adapter, utils.mms.adapter, utils.f5.adapter, utils.inference.speech\n"
            "print(sorted(m for m in ('torchaudio', 'omnivoice') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_packages_folder_is_torchs_build_and_a_torchaudio_made_for_this_torch_wins(tmp_path, monkeypatch):
    """The folder was named by torch's version alone (a CUDA build of the same version took another's torchaudio),
    and went first on the path, so its torchaudio shadowed one installed later for this very torch."""
    import importlib.machinery

    import torch

    from utils.omnivoice import runtime

    assert runtime.packages_dir().name == f"omnivoice-torch{torch.__version__}"  # e.g. 2.14.1+cu130
    release, _, build = torch.__version__.partition("+")
    folder, env = tmp_path / "packages", tmp_path / "site"
    for where, version in ((folder, "2.0.0+other"), (env, f"{release}+{build}" if build else release)):
        (where / "torchaudio").mkdir(parents=True)
        (where / "torchaudio" / "__init__.py").write_text("")
        (where / "torchaudio" / "version.py").write_text(f"__version__ = '{version}'\n")
    (folder / "omnivoice").mkdir()
    (folder / "INSTALLED").write_text("test\n")
    monkeypatch.setenv(runtime.PACKAGES_ENV, str(folder))
    monkeypatch.setattr(runtime, "_refresh_transformers", lambda: None)  # it would import the stand-in torchaudio

    def found() -> Path:
        return Path(importlib.machinery.PathFinder.find_spec("torchaudio", sys.path).origin).parent.parent

    monkeypatch.setattr(sys, "path", [str(env), *sys.path])
    runtime.activate()
    assert found() == env and sys.path[-1] == str(folder)  # this environment's own, built for its torch
    (env / "torchaudio" / "version.py").write_text("__version__ = '2.0.0+other'\n")  # one for another torch
    monkeypatch.setattr(sys, "path", [str(env), *[p for p in sys.path if p != str(folder)]])
    runtime.activate()
    assert found() == folder and sys.path[0] == str(folder)


def test_activate_before_install_names_the_install_command(tmp_path, monkeypatch):
    from utils.omnivoice import runtime

    monkeypatch.setenv(runtime.PACKAGES_ENV, str(tmp_path / "none"))
    with pytest.raises(StudioError, match="python -m utils.omnivoice.runtime install"):
        runtime.activate()


def test_an_install_with_no_registry_and_no_wheels_says_what_to_copy_and_leaves_nothing(tmp_path, monkeypatch):
    from utils.omnivoice import runtime

    monkeypatch.setenv(runtime.PACKAGES_ENV, str(tmp_path / "packages"))
    (tmp_path / "wheels").mkdir()
    with pytest.raises(StudioError, match="--wheels"):
        runtime.install(wheels=tmp_path / "wheels")
    assert not runtime.installed() and not any(tmp_path.glob("packages*"))


def test_an_install_adds_what_import_omnivoice_needs_and_this_environment_lacks(tmp_path, monkeypatch):
    """pydub comes with gradio; a machine without it (the GPU image) gets it beside omnivoice. pip is a recording
    stand-in here: a real install from wheels runs in tests/run.sh and in gpu_suite.sh's setup."""
    import subprocess

    from utils.omnivoice import runtime

    monkeypatch.setenv(runtime.PACKAGES_ENV, str(tmp_path / "packages"))
    monkeypatch.setattr(runtime, "IMPORTED_BY_OMNIVOICE", ("pydub==0.25.1", "no_such_module_here==1.0"))
    monkeypatch.setattr(runtime, "torchaudio_runs", lambda extra_path=None: "2.11.0")
    asked = []

    def pip(target, requirement, index=None, wheels=None):
        asked.append((requirement, wheels))
        (target / requirement.split("==")[0]).mkdir()
        return subprocess.CompletedProcess([], 0 if requirement != "no_such_module_here==1.0" or len(asked) > 2 else 1,
                                           "", "ERROR: No matching distribution found for no_such_module_here==1.0")

    monkeypatch.setattr(runtime, "_pip", pip)
    with pytest.raises(StudioError, match="Could not install no_such_module_here==1.0 .*No matching distribution"):
        runtime.install(wheels=tmp_path / "wheels")
    assert not runtime.installed() and not any(tmp_path.glob("packages*"))  # whole or not at all
    folder = runtime.install(wheels=tmp_path / "wheels")  # pydub imports here: only the missing one is asked for
    assert asked[2:] == [(runtime.OMNIVOICE, tmp_path / "wheels"), ("no_such_module_here==1.0", tmp_path / "wheels")]
    assert runtime.installed() and (folder / "no_such_module_here").is_dir() and not (folder / "pydub").exists()


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_on_a_gpu_the_model_speaks_in_half_precision_and_the_codec_in_fp32(clip_workspace, monkeypatch, precision):
    """The lines a GPU runs (utils.hardware.inference_precision answers bf16, or fp16 for a T4), run on the CPU: the
    package recommends half-precision weights for speech; the codec's convolutions stay fp32."""
    import torch

    from utils import hardware
    from utils.inference.speech import Voice

    monkeypatch.setattr(hardware, "inference_precision", lambda device, gpus=None: precision)
    voice = Voice.load(clip_workspace[0].voice_dir("abebe"))
    model = voice.model.model
    want = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    assert next(model.llm.parameters()).dtype == want and model.audio_heads.weight.dtype == want
    assert {p.dtype for p in model.audio_tokenizer.parameters()} == {torch.float32}
    wave, _, _ = voice.synthesize("ሰላም ነው።", steps=4)
    assert np.isfinite(wave).all() and np.abs(wave).max() > 0


def test_speech_that_overflows_in_fp16_is_spoken_again_in_fp32_and_said_once(clip_workspace, monkeypatch, capsys):
    """A T4 speaks in fp16; where the package's generate overflows there (emulated: NaN while the model's weights are
    fp16), the sentence is spoken again in fp32, the same seed, and later ones in fp32 straight away."""
    import torch
    from omnivoice import OmniVoice

    from utils import hardware
    from utils.inference.speech import Voice

    monkeypatch.setattr(hardware, "inference_precision", lambda device, gpus=None: "fp16")
    real, calls = OmniVoice.generate, []

    def overflowing(self, **kw):
        calls.append(self.audio_heads.weight.dtype)
        waves = real(self, **kw)
        return [w * float("nan") for w in waves] if self.audio_heads.weight.dtype == torch.float16 else waves

    monkeypatch.setattr(OmniVoice, "generate", overflowing)
    voice = Voice.load(clip_workspace[0].voice_dir("abebe"))
    first, _, _ = voice.synthesize("ሰላም ነው።", steps=4, seed=3)
    again, _, _ = voice.synthesize("ሰላም ነው።", steps=4, seed=3)
    assert np.isfinite(first).all() and np.abs(first).max() > 0 and np.array_equal(first, again)
    assert calls == [torch.float16, torch.float32, torch.float32]  # fp16 once, then fp32 for good
    assert {p.dtype for p in voice.model.model.parameters()} == {torch.float32}
    said = [line for line in capsys.readouterr().out.splitlines() if "unusable sound" in line]
    assert said == ["warning: OmniVoice made unusable sound (NaN or Inf) in fp16 on this GPU: it speaks in fp32 from "
                    "now on (slower, twice the memory)"]


def test_on_a_cpu_a_clip_voice_speaks_with_fewer_decoding_steps_by_default(clip_workspace):
    """OmniVoice's 32 steps take minutes a sentence on a 2-core CPU (bench/omnivoice_speak.py): there it defaults to
    its CPU_SAMPLE_STEPS; a GPU and the other families keep their SAMPLE_STEPS."""
    from utils import families
    from utils.inference.speech import Voice, engine_steps

    omnivoice, f5 = families.get("omnivoice"), families.get("f5")
    assert engine_steps("omnivoice", "cpu") == omnivoice.CPU_SAMPLE_STEPS < omnivoice.SAMPLE_STEPS
    assert engine_steps("omnivoice", "cuda") == omnivoice.SAMPLE_STEPS
    assert engine_steps("f5", "cpu") == engine_steps("f5", "cuda") == f5.SAMPLE_STEPS
    voice = Voice.load(clip_workspace[0].voice_dir("abebe"))
    _, _, info = voice.synthesize("ሰላም ነው።")
    assert info["steps"] == omnivoice.CPU_SAMPLE_STEPS
