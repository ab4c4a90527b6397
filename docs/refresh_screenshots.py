"""Refreshes the docs' pictures, docs/screenshots/<tab>.png: every tab as a curator sees it, taken at the
end of the curator-journey test of tests/test_app_browser.py in Debian's chromium (tests/run.sh installs it and
fonts-sil-abyssinica). The test suite takes the same pictures into a temporary folder and leaves docs/ alone; this runs that
one test with AMHARIC_TTS_SCREENSHOTS naming the folder to write. Commit the changed PNGs.

    python docs/refresh_screenshots.py             # into docs/screenshots/
    python docs/refresh_screenshots.py /tmp/shots  # or another folder
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

if __name__ == "__main__":
    out = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT / "docs" / "screenshots"
    env = {**os.environ, "AMHARIC_TTS_SCREENSHOTS": str(out), "GRADIO_ANALYTICS_ENABLED": "False"}
    code = subprocess.call([sys.executable, "-m", "pytest", "-q", "tests/test_app_browser.py", "-k", "photographed"], cwd=ROOT, env=env)
    print(f"screenshots in {out}" if code == 0 else f"screenshots failed (pytest exit {code})", file=sys.stderr)
    sys.exit(code)
