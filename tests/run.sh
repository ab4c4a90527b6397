#!/usr/bin/env bash
# Installs what the tests need (Debian: espeak-ng for real Amharic test speech, chromium for the
# browser tests; PyPI: requirements-test.txt) and runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=$(command -v sudo >/dev/null && [ "$(id -u)" != 0 ] && echo sudo || true)
if ! command -v espeak-ng >/dev/null || ! command -v chromium >/dev/null; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq espeak-ng chromium >/dev/null
fi
python -m pip install -q -r requirements-test.txt
export GRADIO_ANALYTICS_ENABLED=False PYTHONUNBUFFERED=1
python -m pytest "$@"
