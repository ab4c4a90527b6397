"""A curator's third hour (issue 46) in a real browser, for what only the page shows: the first evaluation's
point on the validation MCD plot, with plain numbers on its axes."""
from __future__ import annotations

import time

import pytest

from tests.conftest import serve
from tests.helpers import plot_seen, screenshot
from utils.workspace import Workspace, append_jsonl, atomic_write_json

VISIBLE_POINTS_JS = """(sel) => [...document.querySelectorAll(sel + ' svg .role-mark path')]
  .filter(p => p.getAttribute('opacity') !== '0' && /[0-9.]+,[0-9.]+[^Z]*[AL]/.test(p.getAttribute('d') || ''))
  .length"""  # marks with an area or a length: a line through one point is 'M x,yZ', drawn as nothing


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    ws = Workspace.open(tmp_path_factory.mktemp("third-browser") / "workspace")
    run_dir = ws.run_dir("first-eval")
    run_dir.mkdir(parents=True)
    atomic_write_json(run_dir / "config.json", {"train": {"dataset": "am", "preset": "tiny", "max_steps": 100}})
    atomic_write_json(run_dir / "status.json", {"state": "finished", "created": time.time(), "step": 50,
                                                "max_steps": 100})
    append_jsonl(run_dir / "metrics.jsonl", {"step": 50, "loss": 3.0, "time": time.time()})
    append_jsonl(run_dir / "metrics.jsonl", {"step": 50, "mcd": 12.34567, "time": time.time()})
    s = serve(ws)
    yield s
    s.stop()


def test_the_first_evaluation_shows_as_a_point_with_plain_axis_labels(server, page, tmp_path):
    page.goto(server.url)
    page.get_by_role("tab", name="Training").click()
    seen = plot_seen(page, "#mcd-plot", ("distance from the real voice (mcd)",))
    assert seen["x"] == ["50"] and seen["y"] == ["12.3457"], seen
    assert page.evaluate(VISIBLE_POINTS_JS, "#mcd-plot") == 1
    screenshot(page.locator("#mcd-plot"), tmp_path, "first-evaluation-point")
