"""notebooks/colab.ipynb: a valid nbformat-4 notebook of few cells whose code compiles, which keeps the
workspace on Google Drive when it is mounted, and starts the app with flags app.py really has, behind
a login."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import app
from tests.conftest import ROOT

NOTEBOOK = ROOT / "notebooks" / "colab.ipynb"


def code_cells() -> list[str]:
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def test_the_notebook_is_valid_nbformat_4_with_few_cells():
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    assert nb["nbformat"] == 4 and isinstance(nb["nbformat_minor"], int) and isinstance(nb["metadata"], dict)
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    for cell in nb["cells"]:
        assert cell["cell_type"] in ("markdown", "code") and isinstance(cell["metadata"], dict)
        assert isinstance(cell["source"], list) and all(isinstance(line, str) for line in cell["source"])
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None  # committed without outputs
    assert len(code_cells()) <= 3


def test_every_code_cell_compiles_as_python_around_its_shell_lines():
    for source in code_cells():
        # Colab runs `!cmd` and `%magic` lines itself; the Python around them must be valid as written
        python = re.sub(r"^(\s*)[!%].*$", r"\1pass", source, flags=re.M)
        compile(python, "colab cell", "exec")


def test_the_workspace_goes_to_drive_when_mounted_and_the_app_starts_behind_a_login():
    setup, start = code_cells()[-2:]
    assert 'drive.mount("/content/drive")' in setup
    assert "/content/drive/MyDrive/amharic-tts-workspace" in setup and "/content/workspace" in setup
    assert "pip install -q -r requirements.txt" in setup
    # the runtime's torch is read before the install, then the install says whether it was kept or replaced
    assert setup.index("torch.__version__") < setup.index("pip install") < setup.index(
        '!python -m utils.environment "{torch_before}"')
    launch = next(line for line in start.splitlines() if "app.py" in line)
    assert "--share" in launch and "{WORKSPACE}" in launch
    assert f'os.environ["{app.AUTH_ENV}"]' in start and "secrets.token_urlsafe" in start  # typed or generated

    help_text = subprocess.run([sys.executable, str(ROOT / "app.py"), "--help"], capture_output=True, text=True,
                               cwd=ROOT, timeout=120).stdout
    flags = re.findall(r"(--[a-z][a-z-]*)", launch)
    assert flags and all(flag in help_text for flag in flags), (flags, help_text)
