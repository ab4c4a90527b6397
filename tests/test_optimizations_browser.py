"""The Optimizations tab in a real browser: pre-filled with reasons, a change shows its trade, Save
persists it for new runs, Reset goes back, Measure explains itself on a CPU machine."""
import json
import re

from playwright.sync_api import expect

from tests.helpers import screenshot
from utils.runs import settings
from utils.workspace import Workspace


PRECISION = re.compile(r"^Number precision.*\(precision\)$")  # what it does, then the technical name


def test_settings_are_prefilled_saved_with_their_trade_and_reset(app_server, page):
    ws = Workspace.open(app_server.workspace)
    page.goto(app_server.url)
    page.get_by_role("tab", name="Optimizations").click()
    page.get_by_text("Every setting: speed and memory").click()  # folded away on the first screen
    expect(page.locator("#why-precision")).to_contain_text("no GPU found")
    expect(page.locator("#why-precision")).to_contain_text("trade:")
    batch = page.locator("#effective-batch")  # a CPU: every batch is a step
    expect(batch).to_contain_text("2000 frames per micro-batch × 1 accumulated = 2000 frames")
    expect(batch).to_contain_text("every batch updates the weights")
    precision = page.get_by_label(PRECISION)
    expect(precision).to_have_value("fp32")

    precision.click()
    page.get_by_role("option", name="fp16", exact=True).click()
    page.locator("#save-settings").click()
    changes = page.locator("#settings-changes")
    expect(changes).to_contain_text("precision: fp32 (recommended) → fp16")
    expect(changes).to_contain_text("loss scaling")
    assert json.loads(settings.settings_path(ws).read_text()) == {"precision": "fp16"}
    accumulation = page.get_by_label(re.compile(r"\(grad_accumulation\)$"))
    accumulation.fill("3")
    accumulation.press("Tab")
    page.locator("#save-settings").click()
    expect(batch).to_contain_text("2000 frames per micro-batch × 3 accumulated = 6000 frames")
    assert json.loads(settings.settings_path(ws).read_text()) == {"precision": "fp16", "grad_accumulation": 3}
    expect(page.locator("#why-precision")).to_contain_text("your choice")

    page.reload()  # saved in the workspace, not in the page
    page.get_by_role("tab", name="Optimizations").click()
    page.get_by_text("Every setting: speed and memory").click()
    expect(page.get_by_label(PRECISION)).to_have_value("fp16")

    page.get_by_role("button", name="Reset to recommended").click()
    expect(page.get_by_label(PRECISION)).to_have_value("fp32")
    expect(batch).to_contain_text("× 1 accumulated = 2000 frames")
    assert settings.saved_settings(ws) == {}

    page.get_by_text("Measure the largest batch this GPU can take").click()
    page.get_by_role("button", name="Measure", exact=True).click()
    expect(page.get_by_text("No GPU here").first).to_be_visible()


def test_steps_start_where_the_optimizations_tab_says_and_the_system_tab_uses_its_words(app_server, page):
    """On this CPU machine the Optimizations tab recommends the steps the Training tab starts at, with the CPU's
    reason (not a GPU's); a number saved there is where the Training tab starts after a reload. The System tab
    names each setting in the Optimizations tab's words, the technical name in brackets."""
    ws = Workspace.open(app_server.workspace)
    page.goto(app_server.url)
    page.get_by_role("tab", name="Optimizations").click()
    page.get_by_text("Every setting: training length, quality checks, saved copies").click()
    steps = page.get_by_label(re.compile(r"^How long it trains.*\(max_steps\)$"))
    expect(steps).to_have_value("2000")
    expect(page.locator("#why-max_steps")).to_contain_text("no GPU here: 2000 steps of the tiny model")
    expect(page.locator("#why-max_steps")).not_to_contain_text("on a GPU")
    page.get_by_role("tab", name="Training").click()
    expect(page.get_by_label("steps", exact=True)).to_have_value("2000")

    page.get_by_role("tab", name="Optimizations").click()
    steps.fill("3000")
    steps.press("Tab")
    page.locator("#save-settings").click()
    expect(page.locator("#settings-changes")).to_contain_text("max_steps: 2000 (recommended) → 3000")
    page.reload()
    page.get_by_role("tab", name="Training").click()
    expect(page.get_by_label("steps", exact=True)).to_have_value("3000", timeout=30_000)
    settings.save_settings(ws, {})

    page.get_by_role("tab", name="System").click()
    table = page.locator("#recommended-settings")
    expect(table).to_contain_text("Number precision: half-size numbers train faster where the GPU supports them "
                                  "(precision)", timeout=30_000)
    for words in ("Faster maths on newer NVIDIA GPUs (tf32)", "Audio per batch, in frames (93.75 frames = 1 second) "
                  "(max_frames_per_batch)", "Train on every GPU at once, one process each (distributed)"):
        expect(table).to_contain_text(words)
    screenshot(page.locator("#recommended-settings"), app_server.workspace.parent, "system-settings")


JARGON = ("SDPA", "TF32", "cuDNN", "page-locked", "AdamW", "torch.compile", "FP8", "NaN", "Euler")


def only_in_brackets(text: str, term: str) -> list[str]:
    """The places where `term` is said outside brackets (a curator's plain words come first, the technical name in
    brackets after them), as short excerpts."""
    out = []
    for line in text.splitlines():
        for found in re.finditer(re.escape(term), line):
            before = line[:found.start()]
            if before.count("(") <= before.count(")"):
                out.append(line[max(0, found.start() - 40):found.end() + 20])
    return out


def test_a_curator_reads_plain_words_first_and_the_technical_names_in_brackets(app_server, page):
    """The Optimizations tab's labels, help lines, reasons and trades, the System tab's machine and settings, and the
    Training tab's F5 line: no pointer to a bench file, every technical name after plain words, in brackets; no
    CUDA version beside "No GPU was found" as if one were there."""
    page.goto(app_server.url)
    page.get_by_role("tab", name="Optimizations").click()
    page.get_by_text("Every setting: speed and memory").click()
    page.get_by_text("Every setting: training length, quality checks, saved copies").click()
    expect(page.locator("#why-beta1")).to_contain_text("How much each update carries on from the updates before it")
    expect(page.get_by_text("the method every attention layer uses: flash (fastest)").first).to_be_visible()
    shown = page.get_by_role("tabpanel").filter(visible=True).last.inner_text()
    assert "bench/" not in shown and "RESULTS.md" not in shown
    said = {term: only_in_brackets(shown, term) for term in JARGON}
    assert not any(said.values()), said
    screenshot(page.locator("#why-attention"), app_server.workspace.parent, "attention-in-plain-words")

    page.get_by_role("tab", name="System").click()
    card = page.locator("#hardware-card")
    expect(card).to_contain_text("No GPU was found")
    assert re.search(r"CUDA [\d.]+: unused here", card.inner_text()) or "CUDA" not in card.inner_text()
    table = page.locator("#recommended-settings")
    expect(table).to_contain_text("no GPU found")
    said = {term: only_in_brackets(table.inner_text(), term) for term in JARGON}
    assert not any(said.values()) and "bench/" not in table.inner_text(), said

    page.get_by_role("tab", name="Training").click()
    expect(page.locator("#engine")).to_contain_text("F5-TTS no")
    page.get_by_role("radio", name=re.compile("^F5-TTS")).check()  # why not, under the choice
    state = page.locator("#base-state")
    expect(state).to_contain_text("F5-TTS on this machine: no. no GPU")
    f5_line = re.search(r"F5-TTS on this machine: no\. .*?T4 works\)", state.inner_text(), re.S).group(0)
    assert "bench/" not in f5_line and "mel frames" not in f5_line, f5_line


def test_optimizations_open_on_what_was_chosen_here_and_why(app_server, page, tmp_path):
    page.goto(app_server.url)
    page.get_by_role("tab", name="Optimizations").click()
    chosen = page.locator("#chosen-here")
    expect(chosen).to_contain_text("Where it trains (device): cpu.", timeout=30_000)
    expect(chosen).to_contain_text("no GPU found")
    expect(page.locator("#effective-batch")).to_contain_text("frames per micro-batch")
    expect(page.locator("#why-precision")).to_be_hidden()  # every setting is folded away
    screenshot(page, tmp_path, "optimizations-first-screen")
    page.get_by_text("Every setting: training length, quality checks, saved copies").click()
    for name in ("beta2", "grad_clip", "checkpoint_every"):
        why = page.locator(f"#why-{name}")
        expect(why).to_be_visible()
        assert "default" not in why.inner_text().split("trade:")[0], why.inner_text()  # a reason, not a shrug
    expect(page.get_by_label(re.compile(r"^Cap on one update's size.*\(grad_clip\)$"))).to_have_value("5")
