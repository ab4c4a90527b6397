"""Is the UI still responsive while many people watch a training run? N browser sessions poll the
Training tab's live panel at once (the endpoint its timer calls, api_name refresh_run, at the timer's first
interval: a real browser backs off while the run is quiet), on loopback, for a bounded time; a newcomer opening
the page is timed beside them.

    python bench/ui_polling.py                               # 1 and 20 sessions, 30 s each
    python bench/ui_polling.py --sessions 1 20 40 --seconds 60
    python bench/ui_polling.py --browser --steps-per-s 0.5   # one real Chromium per tab: its CPU and the app's
    python bench/ui_polling.py --browser --steps-per-s 0.5 --without-gradio-leak   # the tabs' own cost

The run being watched is made of real files written the way the trainer writes them (status.json
with a heartbeat, train.log lines, metrics.jsonl rows, ten steps a second) by a thread of this
script, starting from a run already 20 000 steps long. No trainer competes for the CPU, so the
numbers are the UI's own. Requests are made as the browser makes them (join the queue and read the
session's event stream, or one POST for an event outside the queue), with plain HTTP so the clients cost little of the shared CPU; the timers,
their intervals and inputs are read from the app's /config. Prints a table; JSON in
bench/out/ui_polling-<cpu|cuda>.json.

--browser measures what watching costs a laptop that also trains: one real headless Chromium (Debian's, driven
by Playwright, as the browser tests) opens each tab of --browser-tabs in turn, and the CPU time of every Chromium
process (browser, renderer, GPU, utility) and of the app over --seconds is reported, 100 % = one core; JSON in
bench/out/ui_polling_browser-<cpu|cuda>.json.
--steps-per-s 0.5 is the pace of a tiny run on a 2-core CPU (30 steps a minute): a log line and a metrics row
every 20 s, status.json every 2 s (the trainer's heartbeat).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import common  # bench/common.py (the script's folder is on sys.path); puts the repository root there too
import numpy as np
import psutil

from utils.workspace import Workspace, append_jsonl, atomic_write_json  # noqa: E402

RUN = "watched"
LOG_EVERY = 10  # steps per metrics row, as the trainer's default


# ------------------------------------------------------------------------------ the watched run
def metric_row(step: int) -> dict:
    loss = 4.0 * np.exp(-step / 8000) + 1.0
    return {"step": step, "epoch": step // 500, "loss": loss, "dur": loss * 0.3, "prior": loss * 0.3,
            "cfm": loss * 0.4, "lr": 2e-4, "grad_norm": 3.0, "samples_per_s": 40.0, "frames_per_s": 9000.0,
            "data_wait": 0.02, "loss_scale": 1.0, "time": time.time()}


def write_run(ws: Workspace, step: int) -> Path:
    """A run folder 20 000 steps into training: config, status, a long log and metrics history."""
    run_dir = ws.run_dir(RUN)
    run_dir.mkdir(parents=True)
    atomic_write_json(run_dir / "config.json", {"train": {"dataset": "am", "preset": "base", "max_steps": 100_000}})
    with open(run_dir / "train.log", "w", encoding="utf-8") as log, open(run_dir / "metrics.jsonl", "w") as m:
        for s in range(LOG_EVERY, step + 1, LOG_EVERY):
            log.write(f"12:00:00 step {s}/100000 loss {metric_row(s)['loss']:.4f} lr 2.00e-04 40.0 samples/s\n")
            m.write(json.dumps(metric_row(s)) + "\n")
    return run_dir


def keep_training(run_dir: Path, step: int, stop: threading.Event, steps_per_s: float = 10.0,
                  status_every_s: float = 1.0) -> None:
    """`steps_per_s` steps a second: a metrics row and a log line per LOG_EVERY steps, status.json every
    `status_every_s` (the trainer's heartbeat writes it every 2 s)."""
    last_status = 0.0
    while not stop.wait(1.0 / steps_per_s):
        step += 1
        if step % LOG_EVERY == 0:
            append_jsonl(run_dir / "metrics.jsonl", metric_row(step))
            with open(run_dir / "train.log", "a", encoding="utf-8") as log:
                log.write(f"{time.strftime('%H:%M:%S')} step {step}/100000 loss {metric_row(step)['loss']:.4f}\n")
        if time.time() - last_status >= status_every_s:
            atomic_write_json(run_dir / "status.json", {
                "state": "running", "devices": "cpu", "pid": os.getpid(), "launcher_pid": os.getpid(),
                "created": time.time() - 3600, "step": step, "max_steps": 100_000, "eta_s": 9000.0,
                "heartbeat": time.time(), "message": "training"})
            last_status = time.time()


# ----------------------------------------------------------------------------------- the app
def start_app(ws: Workspace, port: int, log_path: Path) -> subprocess.Popen:
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, str(common.ROOT / "app.py"), "--workspace", str(ws.root),
                             "--port", str(port)], cwd=common.ROOT, env=env, stdout=open(log_path, "w"),
                            stderr=subprocess.STDOUT)
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)
            return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"the app exited:\n{log_path.read_text()[-2000:]}")
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("the app did not answer within 180 s")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------ measurement
def timers(url: str, tab: str) -> list[dict]:
    """The gr.Timer ticks a browser runs while `tab` is open (the app ticks only the open tab's timers):
    api name, fn_index, trigger, interval and the inputs a browser sends (None for a gr.State, which
    the server keeps per session). The Training tab's live panel watches RUN."""
    config = json.loads(urllib.request.urlopen(url + "/config", timeout=30).read())
    comps = {c["id"]: c for c in config["components"]}

    def ids_under(node):
        yield node["id"]
        for child in node.get("children", []):
            yield from ids_under(child)

    def find_tab(node):
        if comps.get(node["id"], {}).get("props", {}).get("label") == tab and comps[node["id"]]["type"] == "tabitem":
            return node
        return next((found for child in node.get("children", []) if (found := find_tab(child))), None)

    opened = config["layout"] if tab == "all" else find_tab(config["layout"])
    if opened is None:
        raise SystemExit(f"no tab called {tab!r} in the app")
    inside = set(ids_under(opened))
    out = []
    for index, dep in enumerate(config["dependencies"]):
        timer = comps.get(dep["targets"][0][0], {})
        if timer.get("type") != "timer" or timer["id"] not in inside:
            continue
        data = [None if comps[i]["type"] == "state" else comps[i]["props"].get("value") for i in dep["inputs"]]
        if dep["api_name"] == "refresh_run":
            data[0] = RUN
        out.append({"name": dep["api_name"], "fn_index": dep.get("id", index), "trigger_id": timer["id"],
                    "interval": float(timer["props"]["value"]), "data": data, "queue": dep.get("queue", True)})
    return out


def call(url: str, session: str, tick: dict) -> dict:
    """One timer tick the way the browser sends it: join the queue, then read the session's event stream
    until this event completes (or, for an event outside the queue, one POST). Returns the outputs."""
    body = json.dumps({"data": tick["data"], "fn_index": tick["fn_index"], "trigger_id": tick["trigger_id"],
                       "session_hash": session, "event_data": None}).encode()
    if not tick.get("queue", True):  # an event outside the queue is one POST, as the browser sends it
        post = urllib.request.Request(url + "/gradio_api/run/predict", data=body,
                                      headers={"Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(post, timeout=120).read())
    join = urllib.request.Request(url + "/gradio_api/queue/join", data=body,
                                  headers={"Content-Type": "application/json"})
    event = json.loads(urllib.request.urlopen(join, timeout=120).read())["event_id"]
    with urllib.request.urlopen(f"{url}/gradio_api/queue/data?session_hash={session}", timeout=120) as stream:
        for line in stream:
            if line.startswith(b"data: "):
                msg = json.loads(line[6:])
                if msg.get("msg") == "process_completed" and msg.get("event_id") == event:
                    if not msg.get("success"):
                        raise RuntimeError(str(msg.get("output"))[:200])
                    return msg["output"]
    raise RuntimeError("the event stream ended before the event completed")


def percentiles(seconds: list[float]) -> dict:
    ms = np.array(seconds or [np.nan]) * 1000
    return {"calls": len(seconds), "p50_ms": float(np.percentile(ms, 50)), "p95_ms": float(np.percentile(ms, 95)),
            "max_ms": float(ms.max())}


def poll(url: str, n: int, seconds: float, tab: str) -> dict:
    """n browser sessions on `tab`, each ticking its timers at their own intervals for `seconds`, and a
    newcomer loading the page once a second beside them."""
    ticks = timers(url, tab)
    latencies: dict[str, list[float]] = {t["name"]: [] for t in ticks} | {"page load": []}
    errors: list[str] = []
    start = threading.Barrier(n * len(ticks) + 1)  # every session's timers and the newcomer start together

    rng = random.Random(0)
    offsets = [rng.uniform(0, tick["interval"]) for _ in range(n) for tick in ticks]

    def timer(tick: dict, offset: float) -> None:
        session = uuid.uuid4().hex[:11]  # a session per timer: one event stream each, as in the browser
        start.wait()
        end = time.perf_counter() + seconds
        time.sleep(offset)  # people open the page at different moments: their timers are not in step
        first = True
        while time.perf_counter() < end:
            t = time.perf_counter()
            try:
                out = call(url, session, tick)
                # the first poll of a session shows the run; later ones send only what changed
                assert tick["name"] != "refresh_run" or not first or RUN in out["data"][0], out["data"][0]
                first = False
            except Exception as exc:  # counted and reported, never hidden
                errors.append(f"{tick['name']}: {type(exc).__name__}: {str(exc)[:120]}")
            latencies[tick["name"]].append(time.perf_counter() - t)
            time.sleep(max(0.0, tick["interval"] - (time.perf_counter() - t)))  # the timer's cadence

    def newcomer() -> None:
        start.wait()
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t = time.perf_counter()
            try:
                urllib.request.urlopen(url + "/", timeout=60).read()
            except OSError as exc:
                errors.append(f"page load: {exc}")
            latencies["page load"].append(time.perf_counter() - t)
            time.sleep(max(0.0, 1.0 - (time.perf_counter() - t)))

    threads = [threading.Thread(target=timer, args=(tick, offset))
               for tick, offset in zip([t for _ in range(n) for t in ticks], offsets)]
    threads.append(threading.Thread(target=newcomer))
    [t.start() for t in threads]
    [t.join() for t in threads]
    every = [x for t in ticks for x in latencies[t["name"]]]
    return {"sessions": n, "seconds": seconds, "requests_per_s": len(every) / seconds, "errors": len(errors),
            "error_examples": errors[:3], "refresh_run": percentiles(latencies["refresh_run"]),
            "all_timers": percentiles(every), "page_load": percentiles(latencies["page load"]),
            "per_endpoint": {name: percentiles(v) for name, v in latencies.items()},
            "intervals_s": {t["name"]: t["interval"] for t in ticks}}


# ------------------------------------------------------------------------------ a real browser
def cpu_seconds(procs: list) -> dict[int, float]:
    """User + system CPU seconds of each process still alive, by pid."""
    out = {}
    for proc in procs:
        try:
            t = proc.cpu_times()
            out[proc.pid] = t.user + t.system
        except psutil.Error:
            pass
    return out


def chromium_processes(app_pid: int) -> list:
    """Every Chromium process this script started (through Playwright's driver), the app's tree left out."""
    app = {app_pid} | {c.pid for c in psutil.Process(app_pid).children(recursive=True)}
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.pid not in app and "chrom" in (proc.name() + " ".join(proc.cmdline()[:1])).lower():
                found.append(proc)
        except psutil.Error:
            pass
    return found


# Gradio 6.31's page-loading status tracker is removed while its status is still "pending", and its
# requestAnimationFrame loop (statustracker-*.js, function ze) runs on for as long as the page is open: ~60 frames a
# second, 6-8 % of a core in any Gradio app here, a one-textbox demo included. --without-gradio-leak stops a loop
# whose element is gone, to show what the studio's own tabs cost beside it.
LEAK = ("function ze(){", "function ze(){if(!U)return;")


def stop_leaked_loop(page) -> None:
    def patch(route):
        response = route.fetch()
        body = response.text()
        if LEAK[0] not in body:
            raise SystemExit("--without-gradio-leak: this Gradio's status tracker is not the one measured (6.31)")
        route.fulfill(response=response, body=body.replace(*LEAK, 1))

    page.route("**/statustracker-*.js", patch)


def watch_in_browser(url: str, app_pid: int, tabs: list[str], seconds: float, settle: float = 10.0,
                     without_leak: bool = False) -> list[dict]:
    """One headless Chromium with each tab of `tabs` open in turn: its CPU and the app's over `seconds`, after
    `settle` seconds for the tab to draw (the first curves, a timer backing off)."""
    from playwright.sync_api import sync_playwright

    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        raise SystemExit("Debian's chromium is missing (apt-get install chromium)")
    app = psutil.Process(app_pid)
    rows = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, headless=True,
                                    args=["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                          "--disable-background-networking", "--disable-component-update"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        if without_leak:
            stop_leaked_loop(page)
        page.goto(url)
        page.get_by_role("tab", name=tabs[0], exact=True).wait_for(timeout=60_000)
        for tab in tabs:
            page.get_by_role("tab", name=tab, exact=True).click()
            time.sleep(settle)
            chrome = chromium_processes(app_pid)
            before, app_before, t0 = cpu_seconds(chrome), sum(app.cpu_times()[:2]), time.perf_counter()
            time.sleep(seconds)
            chrome = chromium_processes(app_pid)  # a renderer started meanwhile counts from zero
            after, app_after, wall = cpu_seconds(chrome), sum(app.cpu_times()[:2]), time.perf_counter() - t0
            used = sum(t - before.get(pid, 0.0) for pid, t in after.items())
            rows.append({"tab": tab, "seconds": wall, "browser_cpu_percent": 100 * used / wall,
                         "app_cpu_percent": 100 * (app_after - app_before) / wall,
                         "browser_processes": len(after)})
            print(f"{tab} tab open: browser {rows[-1]['browser_cpu_percent']:.1f} % of a core, app "
                  f"{rows[-1]['app_cpu_percent']:.1f} %", flush=True)
        browser.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, nargs="+", default=[1, 20], help="concurrent sessions, one row each")
    ap.add_argument("--seconds", type=float, default=30.0, help="measured time per row")
    ap.add_argument("--history-steps", type=int, default=20_000, help="how long the watched run already is")
    ap.add_argument("--tab", default="Training", help="the tab every session has open (its timers tick); 'all' "
                    "ticks every tab's timers, as browsers did before the app limited them to the open tab")
    ap.add_argument("--steps-per-s", type=float, default=10.0, help="pace of the watched run (0.5: a tiny run on "
                    "a 2-core CPU); status.json every second, or every 2 s (the heartbeat) below 1 step a second")
    ap.add_argument("--browser", action="store_true", help="instead of HTTP sessions: one real Chromium per tab "
                    "of --browser-tabs, measuring its CPU and the app's")
    ap.add_argument("--browser-tabs", nargs="+", default=["Training", "Dataset"],
                    help="tabs opened in turn with --browser (Dataset: a tab with no timer, for comparison)")
    ap.add_argument("--without-gradio-leak", action="store_true", help="with --browser: stop Gradio 6.31's leaked "
                    "page-loading animation loop (see LEAK), to measure the tabs' own cost")
    common.add_output_args(ap)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-ui-"))
    ws = Workspace.open(work / "workspace")
    run_dir = write_run(ws, args.history_steps)
    stop = threading.Event()
    writer = threading.Thread(target=keep_training, args=(run_dir, args.history_steps, stop, args.steps_per_s,
                                                          1.0 if args.steps_per_s >= 1 else 2.0), daemon=True)
    writer.start()
    port = free_port()
    app = start_app(ws, port, work / "app.log")
    rows = []
    if args.browser:
        try:
            rows = watch_in_browser(f"http://127.0.0.1:{port}", app.pid, args.browser_tabs, args.seconds,
                                    without_leak=args.without_gradio_leak)
        finally:
            stop.set()
            app.terminate()
            app.wait(30)
        print()
        print(common.markdown_table([("tab", "tab open"), ("browser_cpu_percent", "browser CPU %", "{:.1f}"),
                                     ("app_cpu_percent", "app CPU %", "{:.1f}")], rows))
        common.save("ui_polling_browser", {"setup": {"history_steps": args.history_steps, "steps_per_s": args.steps_per_s,
                                                     "without_gradio_leak": args.without_gradio_leak}, "rows": rows},
                    out=args.out)
        return
    try:
        server = psutil.Process(app.pid)
        for n in args.sessions:
            before = sum(server.cpu_times()[:2])
            rows.append(poll(f"http://127.0.0.1:{port}", n, args.seconds, args.tab))
            cpu = sum(server.cpu_times()[:2]) - before  # the app's own CPU time (it is one Python process)
            rows[-1].update(server_cpu_percent=100 * cpu / args.seconds,
                            server_cpu_ms_per_request=1000 * cpu / max(1, rows[-1]["requests_per_s"] * args.seconds))
            live = rows[-1]["refresh_run"]
            print(f"{n} session(s): live panel p50 {live['p50_ms']:.0f} ms, p95 {live['p95_ms']:.0f} ms", flush=True)
    finally:
        stop.set()
        app.terminate()
        app.wait(30)
    print()
    flat = [{"sessions": r["sessions"], "rps": r["requests_per_s"], "errors": r["errors"],
             "cpu": r["server_cpu_percent"], "cpu_ms": r["server_cpu_ms_per_request"],
             **{f"{k}_{m}": r[k][m] for k in ("refresh_run", "all_timers", "page_load") for m in ("p50_ms", "p95_ms",
                                                                                                  "max_ms")}}
            for r in rows]
    print(common.markdown_table([("sessions", "sessions"), ("rps", "requests/s", "{:.1f}"),
                                 ("refresh_run_p50_ms", "live panel p50 ms", "{:.0f}"),
                                 ("refresh_run_p95_ms", "p95", "{:.0f}"), ("refresh_run_max_ms", "max", "{:.0f}"),
                                 ("all_timers_p50_ms", "all timers p50 ms", "{:.0f}"),
                                 ("all_timers_p95_ms", "p95", "{:.0f}"),
                                 ("page_load_p50_ms", "page load p50 ms", "{:.0f}"),
                                 ("page_load_p95_ms", "p95", "{:.0f}"), ("page_load_max_ms", "max", "{:.0f}"),
                                 ("cpu", "app CPU %", "{:.0f}"), ("cpu_ms", "app CPU ms / request", "{:.1f}"),
                                 ("errors", "errors")], flat))
    common.save("ui_polling", {"setup": {"history_steps": args.history_steps, "tab": args.tab,
                                         "metrics_rows": args.history_steps // LOG_EVERY}, "rows": rows},
                out=args.out)


if __name__ == "__main__":
    main()
