#!/usr/bin/env bash
# Installs what the tests need (Debian: espeak-ng for real Amharic test speech, chromium for the
# browser tests, fonts-sil-abyssinica so Amharic renders in them and in the docs' screenshots, ffmpeg
# with which Gradio streams speech in the Inference tab; libfuse2, with which
# tests/test_store_on_fuse.py mounts a FUSE file system as Colab mounts Google Drive;
# PyPI: requirements-test.txt) and runs the whole suite. Run it as root, as the test image does: the
# disk-full test (tests/test_faults.py) mounts a small tmpfs.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=$(command -v sudo >/dev/null && [ "$(id -u)" != 0 ] && echo sudo || true)
if ! command -v espeak-ng >/dev/null || ! command -v chromium >/dev/null || ! command -v ffmpeg >/dev/null || ! fc-list | grep -qi abyssinica \
   || ! ldconfig -p | grep -q libfuse.so.2; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq espeak-ng chromium fonts-sil-abyssinica ffmpeg libfuse2 >/dev/null
fi
python -m pip install -q -r requirements-test.txt
# The reference F5-TTS for tests/test_f5_model.py only, without its declared dependencies (torchaudio, wandb,
# accelerate, ...): the model code the test imports needs just x_transformers and torchdiffeq (requirements-test.txt).
python -m pip install -q --no-deps f5-tts==1.1.22
# OmniVoice's own packages (omnivoice, and a torchaudio built for this torch unless one here runs) into their own
# folder beside the environment, as a user installs them: only the OmniVoice family puts it on sys.path.
python -m utils.omnivoice.runtime install
python -c "import sys, torch; print(f\"python {sys.version.split()[0]}, torch {torch.__version__}\")"
export GRADIO_ANALYTICS_ENABLED=False PYTHONUNBUFFERED=1
python -m pytest "$@"
