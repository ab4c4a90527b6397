"""The dataset table (manifest.sqlite): one edit writes one row, a crash mid-write loses nothing, views page,
a manifest.jsonl put in the folder is read in, and pandas reads the file as it is."""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sqlite3

import pandas as pd
import pytest

from tests.helpers import sentences
from utils import datasets
from utils.datasets import curate, store
from utils.datasets.config import PrepareConfig
from utils.datasets.prepare import check_row_text, finish_rows
from utils.events import StudioError
from utils.workspace import Workspace, write_jsonl


def table_rows(n: int) -> list[dict]:
    """n checked rows with real Amharic transcripts (no audio: the table never opens it)."""
    texts, rows, cfg = sentences(), [], PrepareConfig()
    for i in range(n):
        text = texts[i % len(texts)]
        row = {"id": f"r{i:05d}", "audio": f"audio/r{i:05d}.wav", "text": text, "duration": 1.0 + len(text) / 14,
               "speaker": f"s{i % 3}", "split": "train", "flags": [], "excluded": False, "source": f"raw/{i}.wav",
               "sha1": f"{i:040x}", "music": None, "notes": {}, "review": None}
        check_row_text(row, cfg, {})
        rows.append(row)
    finish_rows(rows, cfg)
    return rows


@pytest.fixture
def ws(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    datasets.save_manifest(ws, "big", table_rows(260))
    return ws


def written_rows(ws, name):
    """A trigger the test adds to the file: the ids of every row inserted, updated or deleted from now on."""
    con = sqlite3.connect(ws.dataset_dir(name) / store.FILE)
    con.executescript("""CREATE TABLE touched (id TEXT);
        CREATE TRIGGER t_up AFTER UPDATE ON rows BEGIN INSERT INTO touched VALUES (NEW.id); END;
        CREATE TRIGGER t_in AFTER INSERT ON rows BEGIN INSERT INTO touched VALUES (NEW.id); END;
        CREATE TRIGGER t_del AFTER DELETE ON rows BEGIN INSERT INTO touched VALUES (OLD.id); END;""")
    con.commit()
    return lambda: [i for (i,) in con.execute("SELECT id FROM touched")]


def test_an_edit_writes_the_rows_it_names_and_nothing_else(ws):
    touched = written_rows(ws, "big")
    before = {r["id"]: r for r in datasets.load_manifest(ws, "big")}
    summary = datasets.apply_edits(ws, "big", [{"id": "r00007", "action": "exclude"}])
    assert touched() == ["r00007"]
    after = {r["id"]: r for r in datasets.load_manifest(ws, "big")}
    assert after["r00007"]["excluded"] and after["r00007"]["review"] == "exclude"
    assert {k: v for k, v in after.items() if k != "r00007"} == {k: v for k, v in before.items() if k != "r00007"}
    assert summary["usable_clips"] == sum(not r["excluded"] for r in after.values()) == 259
    assert datasets.load_report(ws, "big")["summary"]["usable_clips"] == 259  # the report follows the table

    datasets.apply_edits(ws, "big", [{"id": "r00003", "action": "text", "text": sentences()[40]}])
    assert touched() == ["r00007", "r00003", "r00040"]  # r00040 says that sentence already: now it points at r00003
    assert "the same transcript as r00003" in datasets.review_row(ws, "big", "r00040")["messages"]
    assert datasets.get_rows(ws, "big", ["r00003"])["r00003"]["text"] == sentences()[40]


def test_a_one_row_edit_flags_its_speaking_rate_as_a_full_recheck_would(ws):
    fast = " ".join(sentences()[:12])  # far more text than its clip can hold
    datasets.apply_edits(ws, "big", [{"id": "r00011", "action": "text", "text": fast}])
    edited = datasets.review_row(ws, "big", "r00011")
    assert "rate_outlier" in edited["flags"]
    told = []
    datasets.recheck(ws, "big", lambda fraction, text: told.append((fraction, text)))  # a long batch says how far
    assert datasets.review_row(ws, "big", "r00011")["flags"] == edited["flags"]
    assert told and told[0] == (0.0, "checking row 1 of 260")


def _crash_while_writing(folder):
    class Dies(dict):  # the process is killed between the rows of one write: no exception, no cleanup
        def get(self, key, default=None):
            os.kill(os.getpid(), signal.SIGKILL)

    rows = store.read_all(folder)
    store.update(folder, [{**rows[0], "text": "changed"}, Dies(rows[1])])


def kill_a_writer_mid_write(folder) -> None:
    child = mp.get_context("spawn").Process(target=_crash_while_writing, args=(folder,))
    child.start()
    child.join(60)
    assert child.exitcode == -signal.SIGKILL


def test_a_process_killed_in_the_middle_of_a_write_leaves_the_table_as_it_was(ws):
    folder = ws.dataset_dir("big")
    before = store.read_all(folder)
    kill_a_writer_mid_write(folder)
    assert store.read_all(folder) == before  # the first row's change was rolled back with the rest
    datasets.apply_edits(ws, "big", [{"id": "r00000", "action": "keep"}])  # and the table takes writes again
    assert datasets.get_rows(ws, "big", ["r00000"])["r00000"]["review"] == "keep"


def test_views_read_a_page_and_say_where_it_lies(ws):
    datasets.apply_edits(ws, "big", [{"id": f"r{i:05d}", "action": "keep"} for i in range(0, 260, 2)])
    page, total = datasets.review_page(ws, "big", include_ok=True, page=3)
    assert total == 260 and [r["id"] for r in page] == [f"r{i:05d}" for i in range(200, 260)]
    marked = [r["id"] for r in datasets.load_manifest(ws, "big") if r["flags"] or r["review"]]  # flagged or decided
    decided, total = datasets.review_page(ws, "big", include_ok=False, page=2)
    assert total == len(marked) >= 130 and [r["id"] for r in decided] == marked[100:200]
    assert decided[0]["decision"] == "keep" or decided[0]["flags"]
    assert datasets.review_page(ws, "big", True, page=9)[0] == []
    with pytest.raises(StudioError, match="no row 'ghost'"):
        datasets.review_row(ws, "big", "ghost")


def test_the_rate_plot_keeps_every_marked_clip_and_a_spread_of_the_rest(ws, monkeypatch):
    monkeypatch.setattr(curate, "PLOT_POINTS", 40)
    datasets.apply_edits(ws, "big", [{"id": f"r{i:05d}", "action": "exclude"} for i in (5, 50, 250)])
    hist, points = datasets.plot_data(ws, "big")
    assert sum(b["clips"] for b in hist) == 260  # the histogram counts every clip
    assert len(points) <= 40 and {"r00005", "r00050", "r00250"} <= {p["id"] for p in points}
    ok = [int(p["id"][1:]) for p in points if p["status"] == "ok"]
    assert min(ok) < 20 and max(ok) > 230  # spread over the table, not its first rows


def test_a_manifest_jsonl_put_in_the_folder_is_read_in_once_and_kept(ws):
    folder = ws.dataset_dir("big")
    rows = datasets.load_manifest(ws, "big")[:10]
    rows[0]["text"] = "ሰላም"
    write_jsonl(folder / "manifest.jsonl", rows)  # an export edited by hand and put back
    assert [r["id"] for r in datasets.load_manifest(ws, "big")] == [r["id"] for r in rows]
    assert datasets.get_rows(ws, "big", ["r00000"])["r00000"]["text"] == "ሰላም"
    assert not (folder / "manifest.jsonl").exists() and (folder / "manifest.jsonl.imported").exists()
    datasets.apply_edits(ws, "big", [{"id": "r00001", "action": "exclude"}])
    assert datasets.get_rows(ws, "big", ["r00001"])["r00001"]["excluded"]  # the edit stays: nothing is read again


def test_a_put_back_rows_exclusion_and_text_are_kept_as_decisions_and_read_again(ws):
    """An exclusion set in an exported file and put back was undone by the next check of the rows (the row trained
    again, silently), and an edited text kept the old sentence's phonemes, which training reads."""
    from utils.datasets.curate import convert_dataset, read_again_if_stale
    from utils.events import run_to_end

    folder = ws.dataset_dir("big")
    rows = datasets.load_manifest(ws, "big")[:10]
    old_phonemes = rows[1]["phonemes"]
    rows[0]["excluded"] = True                  # as a person edits the file: the field, no "review"
    rows[1]["text"] = sentences()[40]           # a sentence fixed in the file
    write_jsonl(folder / "manifest.jsonl", rows)
    back = datasets.get_rows(ws, "big", ["r00000", "r00001", "r00002"])
    assert back["r00000"]["review"] == "exclude" and back["r00001"]["text_fixed"]
    assert back["r00002"]["review"] is None and not back["r00002"].get("text_fixed")  # untouched rows stay so
    said = read_again_if_stale(ws, "big")  # the rows put back are read again before the next run
    assert said.startswith("big's rows were put back from a manifest.jsonl: read them again with it (")
    after = datasets.get_rows(ws, "big", ["r00000", "r00001"])
    assert after["r00000"]["excluded"] and after["r00001"]["phonemes"] != old_phonemes
    run_to_end(convert_dataset(ws, "big"))
    assert datasets.get_rows(ws, "big", ["r00000"])["r00000"]["excluded"]


def test_exports_open_in_pandas_and_a_spreadsheet_and_the_file_itself_reads_in_pandas(ws, tmp_path, capsys):
    import app

    # the command line writes into a folder that exists: a mistyped one is said, not made
    assert app.main(["export-dataset", "big", str(tmp_path / "typo" / "big.csv"), "--workspace", str(ws.root)]) == 2
    assert "typo is not a folder: create it first" in capsys.readouterr().err and not (tmp_path / "typo").exists()
    datasets.apply_edits(ws, "big", [{"id": "r00002", "action": "exclude"}])
    csv = pd.read_csv(datasets.export_rows(ws, "big", tmp_path / "out" / "big.csv"), encoding="utf-8-sig")
    assert len(csv) == 260 and csv.loc[2, "id"] == "r00002" and bool(csv.loc[2, "excluded"])
    assert csv.loc[0, "text"] == sentences()[0]
    back = Workspace.open(tmp_path / "other")
    jsonl = datasets.export_rows(ws, "big", tmp_path / "out" / "big.jsonl")
    back.dataset_dir("copy").mkdir(parents=True)
    (back.dataset_dir("copy") / "manifest.jsonl").write_bytes(jsonl.read_bytes())
    assert datasets.load_manifest(back, "copy") == datasets.load_manifest(ws, "big")
    with sqlite3.connect(ws.dataset_dir("big") / store.FILE) as con:
        frame = pd.read_sql("SELECT id, duration, excluded, flags FROM rows ORDER BY pos", con)
    assert len(frame) == 260 and frame.loc[2, "excluded"] == 1
    with pytest.raises(StudioError, match=".jsonl or .csv"):
        datasets.export_rows(ws, "big", tmp_path / "big.xlsx")


def test_the_review_table_pages_in_the_browser_and_a_decision_keeps_its_page(tmp_path, page):
    from playwright.sync_api import expect

    from tests.conftest import serve
    from tests.test_app_browser import id_cell

    ws = Workspace.open(tmp_path / "workspace")
    datasets.save_manifest(ws, "big", table_rows(260))
    server = serve(ws)
    try:
        page.goto(server.url)
        page.get_by_label("Show every row, not only flagged ones").check()
        where = page.locator("#dataset-page-info")
        expect(where).to_contain_text("rows 1-100 of 260 · page 1 of 3", timeout=30_000)
        page.locator("#dataset-next").click()
        expect(where).to_contain_text("rows 101-200 of 260 · page 2 of 3", timeout=30_000)
        table = page.locator("#dataset-flagged")
        id_cell(table, 0, "r00102").click()
        expect(page.get_by_label("Row", exact=True)).to_have_value("r00102", timeout=30_000)
        page.locator("#dataset-exclude").click()
        expect(page.locator("#dataset-status")).to_contain_text("r00102: exclude saved", timeout=30_000)
        expect(where).to_contain_text("page 2 of 3")  # the redraw after the decision stays on the page
        expect(id_cell(table, 0, "r00102")).to_be_visible()
        expect(table.get_by_test_id("cell-2-3")).to_have_text("exclude", timeout=30_000)  # the redraw is done: a page
        page.locator("#dataset-page input").fill("3")  # typed while it ran would be overwritten by its page (2)
        page.locator("#dataset-page input").press("Enter")
        expect(where).to_contain_text("rows 201-260 of 260 · page 3 of 3", timeout=30_000)
    finally:
        server.stop()


def test_a_table_written_under_an_older_layout_is_laid_out_again_from_its_rows(ws):
    path = ws.dataset_dir("big") / store.FILE
    before = datasets.load_manifest(ws, "big")
    with sqlite3.connect(path) as con:  # as the studio before layout 2 wrote it (no text_hash, its index, a number),
        con.executescript("DROP INDEX rows_texts; DROP INDEX rows_same_text; ALTER TABLE rows DROP COLUMN text_hash; UPDATE rows SET rate = 0; "
                          "PRAGMA user_version = 0;")  # and a light column gone stale
    con.close()

    assert datasets.load_manifest(ws, "big") == before
    text = before[3]["text"]
    assert store.query(ws.dataset_dir("big"), "SELECT count(*) FROM rows WHERE text_hash = ? AND rate > 0",
                       (store.text_hash(text),)) == [(sum(r["text"] == text for r in before),)]
    with sqlite3.connect(path) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == store.SCHEMA_VERSION
        assert con.execute("SELECT count(*) FROM sqlite_master WHERE name = 'rows_texts'").fetchone()[0] == 1
    con.close()


def test_a_table_from_a_newer_studio_is_refused_and_left_as_it_is(ws):
    path = ws.dataset_dir("big") / store.FILE
    with sqlite3.connect(path) as con:
        con.execute(f"PRAGMA user_version = {store.SCHEMA_VERSION + 1}")
    con.close()
    kept = path.read_bytes()

    with pytest.raises(StudioError, match="written by a newer version of the studio") as refused:
        datasets.load_manifest(ws, "big")
    assert "Update the studio" in str(refused.value) and path.read_bytes() == kept
