"""What the app's start costs: the Dataset tab's recognizer line and the Music removal tab need neither transformers
nor scipy.signal until they are used (together about three seconds of every start, the browser tests' too)."""
import json
import subprocess
import sys

from tests.conftest import ROOT

BUILD = """
import importlib.util, json, sys, tempfile
from pathlib import Path
from utils.workspace import Workspace
from webui.app import AppContext, build_ui
from utils.transcripts import recognizers
build_ui(AppContext(workspace=Workspace.open(Path(tempfile.mkdtemp(dir=sys.argv[1])) / "ws"), max_upload_mb=64, data_dirs=()))
loaded = sorted(m for m in ("transformers", "scipy.signal") if m in sys.modules)
said = recognizers.omniasr_loadable()
print(json.dumps({"loaded": loaded, "said": said,
                  "found": importlib.util.find_spec("transformers.models.omniasr_ctc") is not None}))
"""


def test_building_the_ui_imports_no_recognizer_or_signal_library_and_still_knows_omniasr(tmp_path):
    out = subprocess.run([sys.executable, "-c", BUILD, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["loaded"] == []
    assert seen["said"] is seen["found"] is True  # the folder check agrees with importing it (transformers 5.24+)
