"""OmniVoice's own packages, kept apart from the rest of the studio.

The `omnivoice` package imports torchaudio at module level, and transformers' Higgs Audio v2 codec needs it to
resample. The studio itself dropped torchaudio: a torchaudio built for another torch (or another CUDA) breaks
`import torchaudio`, and transformers imports it wherever it finds it. So OmniVoice's packages live in a folder of
their own beside this environment, one per torch version and build (CUDA), and only this family puts it on `sys.path`:

    python -m utils.omnivoice.runtime install     # once: omnivoice + a torchaudio that runs with this torch
    activate()                                     # in the family, before it imports omnivoice

`install` takes a torchaudio that this environment already runs (Colab, Lightning and the lent GPUs ship a
matching pair) and otherwise puts one into the folder: the same major.minor as torch when the index has it, else
its newest, checked in a fresh process (import, resample) before it is kept.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from utils.events import StudioError

OMNIVOICE = "omnivoice==0.2.1"
# what `import omnivoice` loads that the studio's own requirements do not promise, installed beside it when this
# environment lacks it (pydub comes with gradio, so a machine without the web app had none: the first H200 run)
IMPORTED_BY_OMNIVOICE = ("pydub==0.25.1",)
PACKAGES_ENV = "AMHARIC_TTS_OMNIVOICE_PACKAGES"  # another folder for them (tests; a read-only environment)
# transformers' classes that need torchaudio and that omnivoice imports from transformers' top level
NEEDS_TORCHAUDIO = ("HiggsAudioV2TokenizerModel",)
CODEC_MODULE = "transformers.models.higgs_audio_v2_tokenizer.modeling_higgs_audio_v2_tokenizer"
CHECK = ("import torch, torchaudio, torchaudio.functional as F; "
         "assert F.resample(torch.ones(1, 160), 16000, 24000).shape[-1] == 240; print(torchaudio.__version__)")


def torch_version() -> str:
    return importlib.metadata.version("torch")


def _version_file(package: str, path: list[str] | None = None) -> str:
    """`package`/version.py's text as found on `path` (default sys.path), "" when there is none; read, not imported
    (torch's import takes seconds, and a torchaudio of another build fails to import)."""
    spec = importlib.machinery.PathFinder.find_spec(package, path)
    folders = spec.submodule_search_locations if spec else None
    version = Path(folders[0]) / "version.py" if folders else None
    return version.read_text() if version is not None and version.is_file() else ""


def _field(text: str, name: str) -> str:
    found = re.search(rf"^{name}\b[^=\n]*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    return found.group(1) if found else ""


def torch_build() -> str:
    """torch's version with its build, as its torchaudio must match it: "2.14.1+cu130" (a wheel without the tag gets
    its CUDA version added, "2.5.1+cu124"; one without CUDA "+cpu")."""
    text = _version_file("torch")
    version = _field(text, "__version__") or torch_version()
    if "+" in version or not text:
        return version
    cuda = _field(text, "cuda")
    return f"{version}+cu{cuda.replace('.', '')}" if cuda else f"{version}+cpu"


def packages_dir() -> Path:
    """Where OmniVoice's packages live for this environment's torch and its build (inside the environment when it
    is writable): a torch of another CUDA build gets a folder, and a torchaudio, of its own."""
    if os.environ.get(PACKAGES_ENV):
        return Path(os.environ[PACKAGES_ENV])
    base = Path(sys.prefix) / "share" / "amharic-tts"
    if not os.access(sys.prefix, os.W_OK):
        base = Path.home() / ".cache" / "amharic-tts"
    return base / f"omnivoice-torch{torch_build()}"


def matches_torch(torchaudio_version: str, build: str) -> bool:
    """Whether a torchaudio of this version is built for this torch: the same major.minor and the same build tag."""
    def parts(version):
        release, _, local = version.partition("+")
        return release.split(".")[:2], local

    return bool(torchaudio_version) and parts(torchaudio_version) == parts(build)


def installed(folder: Path | None = None) -> bool:
    folder = folder or packages_dir()
    return (folder / "omnivoice").is_dir() and (folder / "INSTALLED").is_file()


def missing_message() -> str:
    return ("OmniVoice's packages are not installed for this environment yet: run `python -m utils.omnivoice.runtime "
            "install` once (about 2 MB from PyPI: omnivoice and, unless this environment has one that runs, a "
            f"torchaudio built for torch {torch_version()}), or press *Install OmniVoice* on the Inference tab.")


def torchaudio_runs(extra_path: Path | None = None) -> str | None:
    """The torchaudio version a fresh process imports and resamples with (from `extra_path` first), else None."""
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(extra_path), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=env, timeout=300)
    return done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout.strip() else None


def _pip(target: Path, *requirements: str, index: str | None = None,
         wheels: Path | None = None) -> subprocess.CompletedProcess:
    """pip into `target`, from PyPI, another index, or only a folder of wheels (a machine with no registry)."""
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
               "--disable-pip-version-check", *requirements]
    if wheels is not None:
        command += ["--no-index", "--find-links", str(wheels)]
    elif index:
        command += ["--index-url", index]
    return subprocess.run(command, capture_output=True, text=True, timeout=1800)


def torchaudio_candidates() -> list[tuple[str, str | None]]:
    """(requirement, index) to try in order: torch's major.minor from PyPI, PyTorch's own index for torch's CUDA
    build, then PyPI's newest (which pins no torch)."""
    import torch  # its __version__ carries the CUDA build (+cu130), which the distribution's metadata may not

    release, _, local = torch.__version__.partition("+")
    major_minor = ".".join(release.split(".")[:2])
    tries = [(f"torchaudio=={major_minor}.*", None)]
    if local:
        tries.append((f"torchaudio=={major_minor}.*", f"https://download.pytorch.org/whl/{local}"))
    return tries + [("torchaudio", None)]


def install(log=print, wheels: Path | None = None) -> Path:
    """OmniVoice's packages into packages_dir(), whole or not at all; the folder when they are already there.
    `wheels`: a folder holding the omnivoice wheel (and a torchaudio one) for a machine that reaches no registry."""
    target = packages_dir()
    if installed(target):
        return target
    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for requirement in (OMNIVOICE, *missing_imports()):
        done = _pip(tmp, requirement, wheels=wheels)
        if done.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise StudioError(f"Could not install {requirement} ({_last_line(done)}). On a machine that can reach PyPI "
                              f"run `pip download --no-deps {OMNIVOICE} {' '.join(IMPORTED_BY_OMNIVOICE)} torchaudio "
                              "-d wheels`, copy that folder here and run "
                              "`python -m utils.omnivoice.runtime install --wheels wheels`.")
    found = torchaudio_runs()
    if found:
        log(f"torchaudio {found} of this environment runs with torch {torch_version()}: OmniVoice uses it")
    else:
        found = _install_torchaudio(tmp, log, wheels)
    (tmp / "INSTALLED").write_text(f"{OMNIVOICE}\ntorchaudio {found}\ntorch {torch_version()}\n")
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    log(f"OmniVoice's packages are in {target}")
    return target


def missing_imports() -> list[str]:
    """The requirements in IMPORTED_BY_OMNIVOICE whose module this environment cannot import."""
    return [r for r in IMPORTED_BY_OMNIVOICE if importlib.util.find_spec(r.split("==")[0]) is None]


def _install_torchaudio(tmp: Path, log=print, wheels: Path | None = None) -> str:
    """The first candidate that installs and then imports and resamples in a fresh process."""
    tried = []
    for requirement, index in torchaudio_candidates():
        side = tmp / ".torchaudio-try"
        shutil.rmtree(side, ignore_errors=True)
        done = _pip(side, requirement, index=index, wheels=wheels)
        version = torchaudio_runs(side) if done.returncode == 0 else None
        tried.append(f"{requirement}{' from ' + index if index else ''}: "
                     f"{'runs' if version else _last_line(done) if done.returncode else 'does not run with this torch'}")
        if version:
            for item in side.iterdir():
                shutil.move(str(item), str(tmp / item.name))
            side.rmdir()
            log(f"torchaudio {version} installed for torch {torch_version()} (OmniVoice only)")
            return version
    shutil.rmtree(tmp, ignore_errors=True)
    raise StudioError(f"No torchaudio that runs with torch {torch_version()} could be installed ({'; '.join(tried)}). "
                      f"Install the torchaudio built for torch {torch_version()} (see pytorch.org's install matrix) "
                      "into this environment and run `python -m utils.omnivoice.runtime install` again.")


def _last_line(done: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in (done.stderr or done.stdout or "").splitlines() if ln.strip()]
    return lines[-1].strip()[:300] if lines else f"exit {done.returncode}"


def activate() -> None:
    """Put OmniVoice's packages on sys.path (once) so `import omnivoice` works in this process, and tell transformers,
    which decided at its own import whether torchaudio exists, that it does now."""
    folder = packages_dir()
    if not installed(folder):
        raise StudioError(missing_message())
    if str(folder) not in sys.path:
        # it holds omnivoice and, when this environment's did not run at install, a torchaudio: that one goes first,
        # unless this environment has since got one built for its torch, which then wins
        outside = _field(_version_file("torchaudio", [p for p in sys.path if p != str(folder)]), "__version__")
        ours = (folder / "torchaudio").is_dir() and not matches_torch(outside, torch_build())
        if ours:
            sys.path.insert(0, str(folder))
        else:
            sys.path.append(str(folder))
        importlib.invalidate_caches()
    if "transformers" in sys.modules:
        _refresh_transformers()


def _refresh_transformers() -> None:
    """transformers caches "torchaudio is missing" and hands out placeholders for the classes that need it; the real
    classes are importable by their module once torchaudio is on the path."""
    import transformers
    from transformers.utils import import_utils

    check = getattr(import_utils, "is_torchaudio_available", None)
    if hasattr(check, "cache_clear"):
        check.cache_clear()
    codec = importlib.import_module(CODEC_MODULE)
    for name in NEEDS_TORCHAUDIO:
        setattr(transformers, name, getattr(codec, name))


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["install"]:
        wheels = Path(args[args.index("--wheels") + 1]) if "--wheels" in args[:-1] else None
        try:
            install(wheels=wheels)
        except StudioError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    print(f"OmniVoice's packages: {packages_dir()} ({'installed' if installed() else 'not installed'})")
    print("usage: python -m utils.omnivoice.runtime install [--wheels FOLDER]   (FOLDER: wheels for a machine "
          "that reaches no package registry)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
