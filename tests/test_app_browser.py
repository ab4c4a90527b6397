"""The whole app in a real headless Chromium."""
import re

from playwright.sync_api import expect

from tests.helpers import numeric_ticks, plot_seen
from webui.app import TABS


def test_every_tab_is_shown_and_system_tab_reports_cpu_count(app_server, page):
    import os

    page.goto(app_server.url)
    for label, _ in TABS:
        expect(page.get_by_role("tab", name=label)).to_be_visible()
    page.get_by_role("tab", name="System").click()
    card = page.locator("#hardware-card")
    expect(card).to_contain_text("CPU cores")
    expected = len(os.sched_getaffinity(0))
    assert page.locator("#cpu-count").inner_text().strip() == str(expected)
    expect(card).to_contain_text("No GPU was found")
    # the live panel refreshes from the server on a timer
    expect(page.locator("#live-usage")).to_contain_text(re.compile(r"CPU \d+%"), timeout=20_000)
    expect(page.locator("#recommended-settings")).to_contain_text("precision")
    # CPU % and RAM GiB each on an axis of its own unit, named in the legend
    busy, memory = plot_seen(page, "#usage-percent", ("CPU %",)), plot_seen(page, "#usage-memory", ("RAM GiB",))
    assert "RAM GiB" not in busy["legend"] and "CPU %" not in memory["legend"]
    assert numeric_ticks(busy["y"])[-1] == 100 and numeric_ticks(memory["y"])[0] == 0


def test_a_tab_selection_answered_after_a_newer_one_changes_no_timer():
    """Gradio selects the first tab as the page mounts; sent or answered late on a busy server it must not switch
    off the timers of the tab the curator clicked since (what left the System tab blank in a CI run), nor of the
    tab a reload reopened."""
    import types

    import gradio as gr

    from webui.app import _NewestSelection, timers_for

    with gr.Blocks():
        dataset_timer, system_timer = gr.Timer(1.0), gr.Timer(2.0)
    every, newest = [dataset_timer, system_timer], _NewestSelection()
    open_dataset = timers_for([dataset_timer], every, newest, "dataset")
    open_system = timers_for([system_timer], every, newest, "system")
    browser, other = types.SimpleNamespace(session_hash="a"), types.SimpleNamespace(session_hash="b")

    clicked = open_system(2000.0, "system", browser)
    assert [u.active for u in clicked] == [False, True]
    late = open_dataset(1000.0, "system", browser)  # the mount-time select, answered after the click
    assert late == [gr.skip(), gr.skip()]
    sent_late = open_dataset(2500.0, "system", browser)  # sent after the click: the page shows System
    assert sent_late == [gr.skip(), gr.skip()]
    assert [u.active for u in open_dataset(1000.0, "dataset", other)] == [True, False]  # another browser's own clock
    assert [u.active for u in open_dataset(3000.0, "dataset", browser)] == [True, False]  # a newer click switches
    assert [u.active for u in open_system(4000.0, "", browser)] == [False, True]  # no tab found: the select decides


def test_offline_the_page_asks_nothing_of_another_host_and_its_fonts_are_whole(app_server, page):
    """A curator offline (or on a Colab without internet) sees the studio's own fonts, never a fallback one for some
    letters: every request goes to the app itself, every font face the page declares loads from it, and each face's
    file has every Latin letter and digit (Gradio's bundled SemiBold files hold a few dozen glyphs: the title drew
    its "A" in the font and "mharic" in the fallback)."""
    import io
    import re as regex
    import string
    import urllib.request
    from urllib.parse import urljoin, urlparse

    from fontTools.ttLib import TTFont

    hosts, failed, fonts = set(), [], []
    page.on("request", lambda r: hosts.add(urlparse(r.url).netloc) if r.url.startswith("http") else None)
    page.on("requestfailed", lambda r: failed.append(r.url))
    page.on("response", lambda r: fonts.append(r.url) if r.url.endswith(".woff2") else None)
    page.goto(app_server.url)
    expect(page.get_by_role("tab", name=TABS[0][0])).to_be_visible()
    for label, _ in TABS:
        page.get_by_role("tab", name=label, exact=True).click()
    faces = page.evaluate("""async () => { await document.fonts.ready;
        const out = []; document.fonts.forEach(f => out.push([f.family, f.weight, f.status])); return out; }""")
    assert hosts == {urlparse(app_server.url).netloc}, hosts
    assert not [u for u in failed if ".woff" in u or ".css" in u], failed
    assert all(status == "loaded" for _, _, status in faces if status != "unloaded"), faces
    sheets = page.evaluate("() => [...document.querySelectorAll('link[rel=stylesheet], style')].map(e => e.href || '')")
    css = "".join(urllib.request.urlopen(u).read().decode() for u in sheets if u) + page.evaluate(
        "() => [...document.querySelectorAll('style')].map(e => e.textContent).join('')")
    declared = {urljoin(app_server.url + "/", u) for u in regex.findall(r"url\(['\"]?([^'\")]+\.woff2)", css)}
    assert fonts and set(fonts) <= declared, (fonts, declared)  # what the page drew with, from the app's own CSS
    needed = set(map(ord, string.ascii_letters + string.digits))
    for url in sorted(declared):
        cmap = TTFont(io.BytesIO(urllib.request.urlopen(url).read())).getBestCmap()
        assert needed <= set(cmap), f"{url} lacks {''.join(sorted(chr(c) for c in needed - set(cmap)))}"
