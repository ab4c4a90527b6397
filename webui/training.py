"""Tab: start a run, watch it live (log, loss, MCD, LR, speed, GPU memory, samples), stop, resume.

Everything shown is read from the run's files (every second while the run moves fast, up to every 10 s while it
is quiet: next_interval), so a reload, a second browser or an app restart shows the same run; the run itself is
its own process (utils/jobs).
"""
from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pandas as pd

from utils import jobs
from utils.runs import control, settings, views
from utils.training import words
from utils.events import StudioError
from utils.hub import HubUnreachable
from utils import families
from utils.family_options import names_of, saved_option
from utils.transcripts import asr
from utils.vocoder.default import status_line
from utils.workspace import read_json
from webui.components import dataset_chosen, dataset_pick, dataset_picker, says_errors, shown_name
from webui.context import AppContext

MAX_SAMPLES = 4
SCRATCH = "(from scratch)"  # the "start from" pickers' first choice: a new model
VOCODER_SCRATCH = [SCRATCH]
LOSS = lambda k: ("loss" in k and k != "loss_scale") or k in ("dur", "prior", "cfm")  # noqa: E731
QUALITY = lambda k: "mcd" in k  # noqa: E731
CER = lambda k: k in ("cer", "cer_recorded")  # noqa: E731  (written only when there is a speech recognizer)
LR = lambda k: k == "lr"  # noqa: E731
SPEED = lambda k: k == "samples_per_s"  # noqa: E731
MEMORY = lambda k: "mem" in k or k.startswith("nvml") or k.startswith("gpu_util")  # noqa: E731


def curve_name(metric: str) -> str:
    """'sound detail (cfm)': a curve named in plain words first, the metric's name for whoever wants it (the run's
    log says them alike)."""
    return words.plain(metric)


def _frame(rows: list[dict]) -> pd.DataFrame:
    """Numeric step and value, whatever the rows hold: the plot takes its axis types from the column types,
    and numbers typed as text would be drawn as categories. Curves are named in plain words (curve_name)."""
    frame = pd.DataFrame(rows, columns=["step", "series", "value"]).astype({"step": float, "series": str, "value": float})
    return frame.assign(series=frame["series"].map(curve_name))


def _plot(frame: pd.DataFrame, drawn: list | None) -> tuple:
    """(what to send a live plot, the curves it will then be drawn with). A Gradio plot takes its axis types,
    colours and legend from the data it holds when it is drawn, and it is drawn when data first comes to an
    empty box: so no data is sent as nothing, and other curves than the drawn ones (another run, a first
    evaluation) empty the box first, for the next refresh to draw it again."""
    curves = sorted(frame["series"].unique())
    if curves and drawn in (None, curves):
        return frame, curves
    return None, None


def _curves(label: str, elem_id: str, points: bool = False, **kw) -> gr.LinePlot | gr.ScatterPlot:
    """A live plot of metric curves over steps; its legend names each curve (no title: the names say it).
    No fixed height: the plot's own height leaves room for the legend, which a fixed one cuts off. No fixed
    colours either: a curve missing from a colour map (a vocoder run's loss_mel) would be drawn in none.
    `points`: one marker a value, for what is measured at evaluations only (a line through one point draws
    nothing, so the first evaluation would not show; its ranges get a margin: points_axes). Axis labels are
    plain numbers: "~f" is given as many decimals as the ticks' spacing needs (120, 0.5, 0.0002; not the
    '50.000000' an axis spanning one value gets by default), where "~g" got as many significant digits, and so
    read 100 and 120 as 1e+2 and 1.2e+2 on a 120-step run."""
    plot = gr.ScatterPlot if points else gr.LinePlot
    return plot(x="step", y="value", color="series", color_title="", label=label, elem_id=elem_id,
                x_axis_format="~f", y_axis_format="~f", **kw)


def run_choices(ctx: AppContext) -> list[str]:
    return [r["run"] for r in views.run_table(ctx.workspace)]


def default_run(ctx: AppContext) -> str | None:
    """The run to show when nothing is selected: an active one, else the newest."""
    table = views.run_table(ctx.workspace)
    active = [r["run"] for r in table if r["status"] in ("running", "stopping", "queued")]
    return (active or [r["run"] for r in table] or [None])[0]


RUN_COLUMNS = ["run", "status", "step", "dataset", "preset", "best (val MCD)", "val CER", "started"]


def run_list_frame(ctx: AppContext) -> pd.DataFrame:
    return pd.DataFrame(views.run_table(ctx.workspace), columns=RUN_COLUMNS)


PLOTS = {"loss": LOSS, "quality": QUALITY, "lr": LR, "speed": SPEED, "memory": MEMORY, "cer": CER}
POINTS = ("quality", "cer")  # measured at evaluations only: drawn as points (_curves), over points_axes
PLOTS_EVERY_S = 5.0  # curves are redrawn at most this often per browser; the log and summary at each poll
LIVE_S = (1.0, 10.0)  # the live panel's poll interval in seconds, shortest and longest (next_interval)
RARE_S = 10.0  # what other tabs change (the pickers' choices, the vocoder and recognizer lines): re-read this often
NO_RUN = "No run yet: choose a dataset above and press Start."


def next_interval(previous: float, news: bool, gap_s: float | None) -> float:
    """Seconds to the live panel's next poll. Right after the run said something new (a log line, a metrics row, a
    sample, another state): half the time it took to say it, its rhythm (a GPU run logging every second is polled
    every second, a tiny run on a laptop's CPU logging every ~20 s every 10 s), or 1 s when it took over a minute
    (a run just started). While it stays quiet: twice as long each time, up to 10 s. A poll costs the browser far
    more than the app (Gradio re-checks every component's loading state), and on a 2-core laptop that CPU is the
    training run's (bench/ui_polling.py --browser)."""
    if news:
        wanted = gap_s / 2 if gap_s and gap_s <= 60 else LIVE_S[0]
    else:
        wanted = (previous or LIVE_S[0]) * 2
    return round(min(LIVE_S[1], max(LIVE_S[0], wanted)), 1)


def changed(held: dict, key: str, value) -> bool:
    """Whether `value` differs from what this browser holds under `key`, remembering it: what did not change is
    not sent again, so the browser redraws only what changed."""
    mark = hash(value if isinstance(value, str) else repr(value))
    if held.get(key) == mark:
        return False
    held[key] = mark
    return True


def run_buttons(state: str | None) -> tuple[dict, dict]:
    """Stop and Resume as the run shown allows: Stop (red) while it is queued, training or stopping (a second press
    kills it), Resume once it has ended. A finished run's red Stop read as if something still ran."""
    active = state in jobs.ACTIVE
    return (gr.update(interactive=active, variant="stop" if active else "secondary"),
            gr.update(interactive=state in jobs.FINAL))


def shown_state(ws, name: str | None) -> str | None:
    """The state of the run named in the picker (which takes typed names too); None when there is no such run."""
    try:
        run_dir = ws.run_dir(name) if name else None
    except StudioError:
        return None
    return jobs.reconcile(run_dir).get("state") if run_dir and run_dir.is_dir() else None


def panel(ctx: AppContext, name: str | None, held: dict, fresh: bool = False) -> dict:
    """What of run `name` the live panel must redraw, given what this browser `held` (updated in place):
    {"summary", "log", "plots" ({index: value}), "players" (list)}, each only when changed.
    Files unchanged since the last poll (views.fingerprint) are not read at all. Curves are sent when new metric
    rows arrived, at most every PLOTS_EVERY_S; "news" says the log, the curves or the samples moved on. `fresh`:
    a page just opened, whose plots are empty (drawn at once, not emptied first)."""
    hidden = [gr.update(value=None, visible=False)] * MAX_SAMPLES
    if held.get("run") != name:  # another run: nothing of the one before is on screen any more
        held.clear()
        held["run"] = name
        if fresh:
            held["drawn"] = [None] * len(PLOTS)
    if not name:
        return {"summary": NO_RUN, "log": "", "plots": dict.fromkeys(range(len(PLOTS))), "players": hidden} \
            if changed(held, "summary", NO_RUN) else {}
    files = views.fingerprint(ctx.workspace, name)
    if files == held.get("files") and not held.get("pending"):
        return {}
    try:
        v = views.view(ctx.workspace, name)
    except StudioError as exc:
        held["files"] = files
        return {"summary": str(exc), "log": "", "plots": dict.fromkeys(range(len(PLOTS))), "players": hidden} \
            if changed(held, "summary", str(exc)) else {}
    held["files"], out, now, summary = files, {"news": False}, time.time(), v.summary()
    if changed(held, "summary", summary):
        out["summary"] = summary
    if changed(held, "log", v.log):
        out["log"], out["news"] = v.log, True
    samples = [(s, p) for s, p in v.samples[:MAX_SAMPLES]]
    if changed(held, "samples", [str(p) for _, p in samples]):
        out["news"] = True
        out["players"] = [gr.update(value=str(p), label=f"step {s}: {p.stem}", visible=True)
                          for s, p in samples] + hidden[len(samples):]
    rows = len(v.metrics)
    # an evaluation is drawn at once: the run list shows its best MCD in this poll, and the plot lagged behind it
    evaluated = any(QUALITY(k) or CER(k) for m in v.metrics[max(0, held.get("rows") or 0):] for k in m)
    due = rows != held.get("rows") and (evaluated or now - held.get("plotted", 0.0) >= PLOTS_EVERY_S)
    held["pending"] = rows != held.get("rows") and not due  # rows that wait for PLOTS_EVERY_S to pass
    if due:
        out["plots"], out["news"] = _changed_plots(v, held), True
        held.update(rows=rows, plotted=now)
        if any(d is None and m is None for d, m in zip(held["drawn"], held["marks"])):  # emptied: drawn next poll
            held.update(rows=-1, plotted=0.0, pending=True)
            out["hurry"] = True
    return out


def points_axes(frame: pd.DataFrame) -> dict:
    """The ranges a plot of evaluations shows: steps from 0, as the loss curves', to a tenth past the last
    evaluation, and values a tenth of their spread beyond the lowest and the highest (a twentieth of the value when
    there is one). Fitted to the points alone, two evaluations sit on the plot's edges, half drawn, and the best
    one, the lowest, on its bottom edge. Never below 0 for what cannot be (an MCD, an error rate)."""
    low, high = float(frame["value"].min()), float(frame["value"].max())
    margin = 0.1 * (high - low) or 0.05 * abs(high) or 1.0
    bottom = max(low - margin, 0.0) if low >= 0 else low - margin
    return {"x_lim": [0.0, 1.1 * float(frame["step"].max())], "y_lim": [bottom, high + margin]}


def _changed_plots(v: views.RunView, held: dict) -> dict:
    """{plot index: what to send} for the plots whose curves changed since this browser drew them (a loss plot at
    each new metrics row, the MCD plot only at evaluations); the others are left as drawn."""
    frames = {name: _frame(r) for name, r in v.plots(PLOTS).items()}
    drawn = held.setdefault("drawn", [["?"]] * len(frames))  # unknown: empty the boxes first
    marks = held.setdefault("marks", [None] * len(frames))
    sent = {}
    for i, (name, frame) in enumerate(frames.items()):
        mark = (len(frame), tuple(frame.iloc[-1]) if len(frame) else None)
        if mark == marks[i]:
            continue
        sent[i], drawn[i] = _plot(frame, drawn[i])
        if name in POINTS and sent[i] is not None:
            axes = points_axes(frame)
            if held.setdefault("axes", {}).get(i, axes) != axes:
                # Gradio (6.31) redraws a plot whose axes moved with the points it held before: the newest
                # evaluation stayed missing until a reload. Emptied now, it is drawn whole on the next poll.
                sent[i], drawn[i] = None, None
            else:
                sent[i] = gr.update(value=frame, **axes)
            held["axes"][i] = axes
        marks[i] = mark if drawn[i] is not None or not len(frame) else None  # emptied: sent again next time
    return sent


def engine_controls(engine: str | None) -> tuple:
    """(licence box, reference clip, model size, fine-tuning mode, base, start from) shown for a model family, as it
    says: F5 asks for its base's licence, the base and a reference clip; its size is the base's and it always learns
    everything (the trainer refuses the other modes), so the size and the mode are choices of the families that have
    them (Matcha: its own setting finetune_mode). A family with a base starts from what its base box says (empty: the
    public base; or a run of its own to continue), so the "start from" picker of Matcha's checkpoints, whose first
    choice reads "(from scratch)", is hidden and set back for it."""
    family = families.get(engine if engine in families.names() else None)
    modes = "finetune_mode" in names_of(family)
    mode = gr.update(visible=True) if modes else gr.update(visible=False, value="full")
    licence, base = gr.update(visible=False), gr.update(visible=False)
    if family.ASKS_LICENCE:  # whose base and licence: each licensed family's own (F5's, MMS's)
        licence = gr.update(visible=True, label=licence_label(family))
        base = gr.update(visible=True, label=f"{family.TITLE} base to start from", info=family.BASE_HELP,
                         placeholder=family.default_init("base"))
    prompt = (gr.update(visible=True, label=f"{family.TITLE} reference clip (a row id of the dataset)",
                        info=f"a {family.TITLE} voice speaks in the voice of this clip: pick a clean 5-10 s one")
              if "prompt" in names_of(family) else gr.update(visible=False))
    start_from = gr.update(visible=False, value=SCRATCH) if family.ASKS_LICENCE else gr.update(visible=True)
    return licence, prompt, gr.update(visible=family.HAS_SIZES), mode, base, start_from


def engine_info(ws, report) -> str:
    """Under the engine choice, one short line: whether each family can train here now (the machine and the base: no
    "yes" for a base that cannot be had). Why not is said under the choice once the family is picked (base_panel):
    four families' reasons in one paragraph were a wall of text."""
    said = " · ".join(f"{f.TITLE} {'yes' if families.verdict(f, ws, report)[0] else 'no'}"
                      for f in map(families.get, families.names()))
    return f"Can train on this machine: {said}. Pick one to see what it needs."


def base_panel(ws, engine: str | None, report=None) -> tuple:
    """(the family's state, its upload box, what the box takes) for a family: why this machine cannot train it, if
    so, and whether its base is ready or can be had; the box that takes its base's files is shown for a family that
    takes them (BASE_UPLOAD). `report`: utils.hardware's (None: this machine's)."""
    from utils import hardware

    family = families.get(engine if engine in families.names() else None)
    can, why = family.machine_verdict(report or hardware.detect(ws.root))
    ready, base_line = family.base_verdict(ws)
    no = f"**{family.TITLE} on this machine: no.** "
    lines = ([] if can else [no + why]) + ([base_line if ready or not can else no + base_line] if base_line else [])
    line = "\n\n".join(lines)
    box = gr.update(visible=bool(family.BASE_UPLOAD), label=f"{family.TITLE} base files (for a machine that cannot "
                                                            "reach the Hugging Face hub)")
    return gr.update(visible=bool(line), value=line), box, f"Upload {family.BASE_UPLOAD}."


def base_refusal(ws, engine: str | None, exc: HubUnreachable) -> str:
    """The message line when Start is refused because the family's base cannot be had here. The line under the
    engine choice (base_panel, said anew after each Start) already says why and what to do: said again here, and in
    a toast, the curator read the same paragraph three times. A refusal that line does not say (another base named
    in the base box) is raised as it is."""
    family = families.get(engine if engine in families.names() else None)
    if family.base_verdict(ws) != (False, str(exc)):
        raise exc
    box = f", where *{family.TITLE} base files* takes its files" if family.BASE_UPLOAD else ""
    return (f"**Not done:** This machine cannot reach the Hugging Face hub for the {family.TITLE} base: what to do "
            f"instead is said under the engine choice{box}.")


def add_base(ws, engine: str | None, files) -> tuple:
    """The upload box's button: the family's base from the files, then what the page says of it anew."""
    from utils import hardware

    family = families.get(engine if engine in families.names() else None)
    folder = family.import_base(ws, files or [])
    state = base_panel(ws, engine)[0]
    return (f"Added the {family.TITLE} base: `{folder.relative_to(ws.root)}`. Start now fine-tunes from it.", state,
            gr.update(info=engine_info(ws, hardware.detect(ws.root))))


def licence_label(family) -> str:
    return (f"yes to the {family.TITLE} base's licence: {family.SHORT_LICENCE} (about {family.SIZE_MB} MB, downloaded "
            "once)")


def expectations(ctx: AppContext, engine: str | None, dataset: str | None, steps, base: str | None,
                 size: str | None = None) -> dict:
    """The family's "what to expect" before Start (F5: where it starts and under which licence, hours of speech
    against what a new language needed, time on this machine, disk), hidden for a family that says nothing."""
    family = families.get(engine if engine in families.names() else None)
    if not dataset or dataset not in ctx.workspace.list_datasets():
        return gr.update(visible=False)
    if refused := nothing_to_train(ctx.workspace, dataset):  # its time and held-out clips would read as a run
        return gr.update(visible=True, value=f"- {refused}")
    try:  # the config Start would make (the saved settings' batch and evaluations), so its time is the run's
        cfg = control.new_config(ctx.workspace, dict(
            workspace=str(ctx.workspace.root), dataset=dataset, engine=family.NAME, max_steps=int(steps or 0) or 1,
            init=(base or "").strip() or family.default_init("base"), **({"preset": size} if size else {})))
        lines = family.guidance(ctx.workspace, cfg)
        lines += control.beyond_the_steps(ctx.workspace, cfg, said=lines) if lines else []
    except StudioError as exc:
        lines = [str(exc)]
    if lines:  # Start refuses it here: said first, or its time on this machine read as a run that would start
        from utils import hardware

        can, _ = family.machine_verdict(hardware.detect(ctx.workspace.root))  # why: the line above the form says it
        lines = lines if can else [f"**Start refuses {family.TITLE} on this machine** (why is said above); what "
                                   "follows is what a run would take here", *lines]
        if limit := settings.saved_time_limit(ctx.workspace):
            lines.append(f"**Time limit: {limit:g} min** (the Optimizations tab's): {control.LIMIT_ENDS}")
    return gr.update(visible=bool(lines), value="\n".join(f"- {line}" for line in lines))


def nothing_to_train(ws, dataset: str) -> str | None:
    """Why Start refuses a dataset with no usable clip, said before Start (None: it has some). The report's count:
    the form asks on every change, and a 200-hour manifest is not read for it."""
    from utils.datasets import load_report
    from utils.datasets.prepare import no_text_yet

    s = load_report(ws, dataset).get("summary") or {}
    if not s.get("clips") or s.get("usable_clips"):
        return None
    why = "no clip has text yet" if no_text_yet(s) else "every clip is flagged or excluded"
    return (f"**Start refuses {dataset}: it has no usable clip** ({why}); its summary on the Dataset tab says what "
            "to do next.")


def engine_advice(ctx: AppContext, dataset: str | None) -> dict:
    """Which engine for this dataset's hours on this machine (each family's own words), once a dataset is chosen."""
    from utils import hardware

    if not dataset or dataset not in ctx.workspace.list_datasets():
        return gr.update(visible=False)
    lines = families.advice(ctx.workspace, dataset, hardware.detect(ctx.workspace.root))
    return gr.update(visible=True, value="Which engine: " + lines[0] + held_out_line(ctx.workspace, dataset) + "\n"
                     + "\n".join(f"- {x}" for x in lines[1:]))


def held_out_line(ws, dataset: str) -> str:
    """What the quality curves rest on, where it is thin: a run measures MCD on at most eval_clips held-out clips,
    and on one or two its number jumps from check to check and a lucky clip picks the best checkpoint."""
    from utils.datasets.manifest import held_out_clips
    from utils.training.config import TrainConfig

    held, most = held_out_clips(ws, dataset), TrainConfig.eval_clips
    return "" if held >= most or nothing_to_train(ws, dataset) else (f" Quality is measured on {held} held-out clip(s) (a run uses up to {most}): "
                                    "expect its numbers to jump from check to check; a larger dataset holds out more.")


def _restored_training(ws, t: dict) -> tuple:
    """The Training form's part from the last training run's config `t`: the engine with the controls it shows
    (an F5 run's licence yes and reference clip, else the Matcha size), so Start starts the same kind of run.
    "Start from" comes back only while that run is active: after it ended, Start on a fresh page quietly fine-tuned
    from what the old run began from. Resume does not read the box (it continues a run's own checkpoints).
    Order: preset, steps, start from, mode, every GPU, engine, licence, reference clip."""
    engine = families.get(t.get("engine")).NAME
    licence, prompt, size, mode, _, start_from = engine_controls(engine)
    if families.get(engine).HAS_SIZES:  # an F5 run's size is the base's, not a choice: the Matcha size stays
        size = {**size, "value": t["preset"]}
    live = t.get("state") in jobs.ACTIVE  # queued, training or stopping, as Stop reads it (run_buttons)
    init = t["init"] if live and t["init"] in control.init_choices(ws) else SCRATCH
    return (size, gr.update(value=t["max_steps"]), {**start_from, "value": init},
            {**mode, "value": saved_option(t, "finetune_mode", "full")}, gr.update(value=t["all_gpus"]),
            gr.update(value=engine), {**licence, "value": bool(t.get("licence_accepted"))},
            {**prompt, "value": saved_option(t, "prompt") or ""})


def restore_form(ctx: AppContext) -> tuple:
    """The form as the curator last filled it (the active run's choices, else the newest run's), so a reload
    does not blank the dataset, put the steps back to the default or bring an F5 run's form back on Matcha; the
    "start from" pickers only while that run is active (an ended run's would seed the next run unnoticed).
    With no run yet the steps start where the Optimizations tab says (a setting saved there since the app
    started included); the rest stays as built. Order: dataset, preset, steps, start from, mode, every GPU,
    engine, licence, reference clip, vocoder start from, size, steps, the Optimizations tab's saved steps."""
    from utils import inference

    ws, keep = ctx.workspace, gr.update()
    last = views.last_choices(ws)
    t, v = last.get("train", {}), last.get("vocoder", {})
    if t and (saved := settings.steps_saved_after(ws, t["created"])):  # the newer choice: saved since the run began
        t = {**t, "max_steps": saved}
    newest = next(iter(last.values()), {}).get("dataset")  # the last run's, else the dataset prepared last
    form = (dataset_chosen(ws, newest),)
    form += _restored_training(ws, t) if t else (keep, gr.update(value=settings.default_steps(ws)), *(keep,) * 6)
    live = v.get("state") in jobs.ACTIVE  # as for the acoustic run: an ended run's start from is not restored
    form += (gr.update(value=v["init"] if live and v["init"] in inference.list_vocoders(ws) else VOCODER_SCRATCH[0]),
             gr.update(value=v["preset"]), gr.update(value=v["max_steps"])) if v else (keep,) * 3
    return form + (settings.default_steps(ws),)  # the saved steps as the page has them (form_on_open)


def restore_page(ctx: AppContext) -> tuple:
    """restore_form, and the engine advice and what to expect for the form it puts back: the pickers' `change` does
    not fire when the page opens on the values it was built with, and both stayed hidden until one was changed."""
    form = restore_form(ctx)

    def shown(i: int, default):  # a value the form puts back, else the one the page was built with
        return form[i].get("value", default) if isinstance(form[i], dict) else default

    dataset = form[0]["value"]
    expect = expectations(ctx, shown(6, None), dataset, shown(2, settings.default_steps(ctx.workspace)), "",
                          shown(1, settings.recommended_preset()))
    return form + (engine_advice(ctx, dataset), expect)


def form_on_open(ctx: AppContext, dataset: str | None, saved_steps, engine: str | None = None, steps=None,
                 base: str | None = "", size: str | None = None) -> tuple:
    """(dataset picker, steps box, the saved steps the page now has, engine advice, what to expect) each time the tab
    opens: the datasets as they are now (one deleted meanwhile is not shown), the steps the Optimizations tab saved
    since the page last read them (a number typed here stays until then), and the lines about the dataset as it is
    now: clips added on the Dataset tab left "Which engine" saying the seconds of speech it had before."""
    saved = settings.default_steps(ctx.workspace)
    pick = dataset_pick(ctx.workspace, dataset)
    steps = saved if saved != saved_steps else steps
    return (pick, gr.update(value=saved) if saved != saved_steps else gr.update(), saved,
            engine_advice(ctx, shown_name(pick, dataset)), expectations(ctx, engine, shown_name(pick, dataset), steps, base,
                                                                       size))


def _vocoder_label(steps) -> str:
    try:
        return f"Train vocoder ({int(steps)} steps)"
    except (TypeError, ValueError):
        return "Train vocoder"


def _form(ctx: AppContext, on_gpu: bool) -> SimpleNamespace:
    """Layout: the engine, the run's form, the vocoder panel and the message line under them."""
    from utils import hardware, inference

    ws = ctx.workspace
    with gr.Row():
        report = hardware.detect(ws.root)
        choices = [families.get(name) for name in families.names()]
        engine = gr.Radio([(f.DESCRIPTION, f.NAME) for f in choices], value=families.DEFAULT, label="engine",
                          elem_id="engine", info=engine_info(ws, report))
        licensed = next(f for f in choices if f.ASKS_LICENCE)
        licence = gr.Checkbox(False, label=licence_label(licensed), elem_id="base-licence", visible=False)
        prompt = gr.Textbox(label="F5 reference clip (a row id of the dataset)", elem_id="reference-clip",
                            visible=False, placeholder="automatic: a clean clip of the usual length (5-10 s)",
                            info="an F5 voice speaks in the voice of this clip: pick a clean 5-10 s one")
        base = gr.Textbox(label=f"{licensed.TITLE} base to start from", elem_id="base-source", visible=False,
                          placeholder=licensed.default_init("base"), info=licensed.BASE_HELP)
    base_state = gr.Markdown(visible=False, elem_id="base-state")  # whether the family's base can be had here
    with gr.Accordion("base files (for a machine that cannot reach the Hugging Face hub)", open=False, visible=False,
                      elem_id="base-upload") as base_upload:
        base_help = gr.Markdown()  # which files: the family's BASE_UPLOAD
        base_files = gr.File(label="base files", file_count="multiple", elem_id="base-files")
        base_add = gr.Button("Add base", elem_id="base-add")
        base_msg = gr.Markdown(elem_id="base-msg")
    with gr.Row(elem_id="train-form"):
        dataset = dataset_picker(ws, "dataset", info="a dataset prepared on the Dataset tab")
        preset = gr.Radio(["tiny", "small", "base"], value=settings.recommended_preset(), label="model size",
                          info="tiny: trains on a CPU in minutes (rough voice); small (10M parameters); base: 21M parameters, GPU")
        run_name = gr.Textbox(label="run name", placeholder="automatic: dataset + time")
        max_steps = gr.Number(value=settings.default_steps(ws), precision=0, label="steps", minimum=1,
                              info="your last run's steps, or the Optimizations tab's 'How long it trains' when "
                                   "saved there since. The ETA shows once it runs" + ("" if on_gpu else "; no GPU here: keep it small"))
    expect = gr.Markdown(visible=False, elem_id="run-guidance")  # what to expect of this run (its steps), before Start
    with gr.Row():
        init = gr.Dropdown([SCRATCH] + control.init_labels(ws), value=SCRATCH, elem_id="start-from",
                           label="start from", info="a checkpoint to fine-tune, or scratch")
        mode = gr.Radio([("learn everything", "full"), ("keep how it reads text, learn the voice (freeze_encoder)",
                                                         "freeze_encoder"),
                         ("add one new speaker, leave the others (new_speaker)", "new_speaker")], value="full",
                        label="when starting from a checkpoint", info="what the new run may change in the model")
        all_gpus = gr.Checkbox(False, label="train on every GPU at once: faster on a machine with several "
                                            "(torchrun, DDP)")
        with gr.Column():
            start = gr.Button("Start training", variant="primary")
            # what Start (or Resume, Stop, the vocoder's Start) did, where the eye is: under the other panels it
            # was below the fold, and nothing near the button changed
            message = gr.Markdown(elem_id="train-message")
    # under the form it speaks of (its dataset and size): above it, with the engine list, it pushed the form and
    # Start below the fold of a 1400x900 window
    advice = gr.Markdown(visible=False, elem_id="engine-advice")  # which engine for this much speech, this machine
    with gr.Accordion("Vocoder: a natural voice instead of Griffin-Lim's buzz", open=False, elem_id="vocoder-panel"):
        gr.Markdown("A vocoder turns the model's spectrograms into sound. Train one on the **dataset chosen above** "
                    "(on every GPU if ticked above; best: fine-tune the public Vocos weights, added on the Inference "
                    "tab), then pick it there or when exporting a voice. It runs like a training run: listed below, "
                    "with its log, Stop and Resume.")
        with gr.Row():
            vocoder_init = gr.Dropdown(VOCODER_SCRATCH + inference.list_vocoders(ws), value=VOCODER_SCRATCH[0],
                                       label="start from", elem_id="vocoder-init",
                                       info="a vocoder in the workspace to fine-tune, or scratch")
            vocoder_size = gr.Radio(["tiny", "small", "mel-24khz"], value="mel-24khz" if on_gpu else "tiny",
                                    label="size (from scratch)",
                                    info="mel-24khz: the public Vocos size (GPU); tiny: a quick CPU test")
            vocoder_steps = gr.Number(value=hardware.VOCODER_STEPS_GPU if on_gpu else hardware.VOCODER_STEPS_CPU,
                                      precision=0, minimum=1, label="vocoder steps",
                                      elem_id="vocoder-steps")
            vocoder_start = gr.Button(_vocoder_label(vocoder_steps.value), elem_id="vocoder-start")
    about = gr.State(None)  # the run the message line speaks of: the timer keeps the line to the run's real state
    return SimpleNamespace(**{k: v for k, v in locals().items() if isinstance(v, gr.blocks.Block)})


def _run_panel(ctx: AppContext, on_gpu: bool) -> SimpleNamespace:
    """Layout: the run list, the buttons acting on the run shown, and its live panel (log, plots, samples)."""
    ws = ctx.workspace
    gr.Markdown("### Runs")
    with gr.Row():
        run_list = gr.Dataframe(lambda: run_list_frame(ctx), interactive=False, wrap=True, elem_id="run-list", scale=3)
    with gr.Row():
        # value is a function: evaluated at every page load, so a reload shows the active run
        selected = gr.Dropdown(run_choices(ctx), value=lambda: default_run(ctx), label="run shown below", scale=2,
                               elem_id="run-select", allow_custom_value=True)
        stop = gr.Button("Stop", variant="stop", elem_id="stop-button")
        resume = gr.Button("Resume", elem_id="resume-button")
    with gr.Row():
        voice_name = gr.Textbox(label="voice name", placeholder="e.g. abebe", scale=2, elem_id="voice-name",
                                info="saves the run's best checkpoint as a voice for the Inference tab")
        export = gr.Button("Export as voice", variant="primary")
        confirm = gr.Checkbox(False, label="yes, delete the run shown")
        delete = gr.Button("Delete run")
    said = gr.Markdown(elem_id="run-message")  # what Stop, Resume, Export and Delete did
    summary = gr.Markdown(elem_id="run-summary")
    log = gr.Textbox(label="log (newest at the bottom)", lines=16, max_lines=16, autoscroll=True, interactive=False,
                     elem_id="train-log", elem_classes=["log-box"])
    if not on_gpu:
        gr.Markdown("No GPU here: no GPU memory plot.")
    with gr.Row():
        loss_plot = _curves("losses", "loss-plot")
        mcd_plot = _curves("validation MCD (dB)", "mcd-plot", points="quality" in POINTS)
    with gr.Row():
        lr_plot = _curves("learning rate", "lr-plot")
        speed_plot = _curves("clips a second (samples/s)", "speed-plot")
        mem_plot = _curves("GPU memory (GiB) and utilization", "mem-plot", visible=on_gpu)
    with gr.Row():
        cer_plot = _curves("character error rate of the held-out sentences, synthesised and recorded", "cer-plot",
                           points="cer" in POINTS)
        cer_status = gr.Markdown(asr.status_line(ws), elem_id="training-cer-status")
    vocoder_status = gr.Markdown(status_line(ws, training=True), elem_id="training-vocoder-status")
    gr.Markdown("**Samples rendered at evaluations (newest first)**")
    with gr.Row():
        players = [gr.Audio(visible=False, interactive=False, type="filepath") for _ in range(MAX_SAMPLES)]
    shown = gr.State(None)  # what this browser's Training tab holds, and when its run last said something (poll)
    plots = [loss_plot, mcd_plot, lr_plot, speed_plot, mem_plot, cer_plot]
    timer = gr.Timer(LIVE_S[0])  # its interval follows the run: next_interval
    return SimpleNamespace(**{k: v for k, v in locals().items() if isinstance(v, (gr.blocks.Block, list))})


def _wire_actions(ctx: AppContext, f: SimpleNamespace, p: SimpleNamespace) -> None:
    """Start, Stop, Resume, Delete and Export. Each says what it did in the message line, and names the run that
    line then follows (`about`): the timer rewrites it from status.json, so "queued: starting" becomes "is
    training", then "finished". A refusal is written there too (says_errors), and the line stops following."""
    from utils import inference
    from utils.inference.export import exported_from_run
    from utils.training import read_run_config

    ws = ctx.workspace

    def on_start(dataset, preset, run_name, max_steps, init, mode, all_gpus, engine, licence, prompt, base, about):
        if about and (run_name or "").strip() in ("", about) and control.just_started(ws, about):
            # pressed again while the first press's run starts: that run is what the curator asked for
            return (views.state_line(ws, about) + " (Start was pressed twice: the first press started it, the second "
                    "nothing)",
                    gr.update(), gr.update(), about)
        if not (run_name or "").strip() and (busy := control.training_on(ws, dataset)):
            name, status = busy  # a second Start (a double click, a page reloaded) is no wish for a second run
            raise StudioError(f"Run {name} is {status['state']} on {dataset} now (step {status.get('step') or 0}); "
                              "nothing new was started. To queue another run of this dataset after it, give the new "
                              "run a name of its own (run name) and press Start again.")
        if not families.get(engine).HAS_SIZES:  # the size is the pretrained base's (F5's tiny is a CLI smoke test)
            preset = "base"
        init = "" if init == SCRATCH else init
        if families.get(engine).ASKS_LICENCE:  # its base box: another base, or a fine-tune of its own to continue;
            init = (base or "").strip()       # empty: the family's default base
        try:
            status = control.start_training(ws, dataset, preset, run_name or "", init, mode, int(max_steps or 0) or None,
                                            all_gpus, engine=engine or families.DEFAULT, accept_licence=bool(licence),
                                            overrides={"prompt": prompt.strip()} if (prompt or "").strip() else None)
        except HubUnreachable as exc:  # said under the engine choice: pointed at, not said again (nor toasted)
            return base_refusal(ws, engine, exc), gr.update(), gr.update(), None
        return (views.state_line(ws, status["run"]), run_list_frame(ctx),
                gr.update(choices=run_choices(ctx), value=status["run"]), status["run"])

    def on_start_vocoder(dataset, init, size, steps, all_gpus):
        status = control.start_vocoder_training(ws, dataset, "" if init in VOCODER_SCRATCH else init, size,
                                                max_steps=int(steps or 0) or None, all_gpus=all_gpus)
        return (views.state_line(ws, status["run"]), run_list_frame(ctx),
                gr.update(choices=run_choices(ctx), value=status["run"]), status["run"])

    def on_stop(name):  # said under the run's buttons; the run's line below them follows its state
        if not name:
            raise StudioError("Choose a run first.")
        return jobs.stop(ws, name)

    def on_resume(name, steps, vocoder_steps):  # the form's steps train a finished run longer, never shorter
        if not name:
            raise StudioError("Choose a run first.")
        vocoder = (read_json(ws.run_dir(name) / "config.json", {}) or {}).get("kind") == "vocoder"
        # the time limit saved on the Optimizations tab now (this session's), else the run's own
        asked = int((vocoder_steps if vocoder else steps) or 0) or None
        control.resume_training(ws, name, asked, max_minutes=settings.saved_time_limit(ws))
        if said := control.steps_not_taken(ws, name, asked):
            gr.Info(f"The {'vocoder ' if vocoder else ''}steps box says {asked}: {said}", duration=20)
            return said
        ahead = [] if vocoder else control.time_ahead(ws, read_run_config(ws.run_dir(name) / "config.json")[0], True)
        return " ".join([f"Resumed **{name}**: it goes on from its newest checkpoint (its progress below).", *ahead])

    def on_delete(name, confirmed, about):  # the picker and the list forget the run at once, not at the next poll
        if not confirmed:
            raise StudioError("Tick 'yes, delete the run shown' first: a deleted run cannot be brought back.")
        said = control.delete(ws, name)  # the tick unticked: it said yes to deleting this run, not the next shown
        gone = about == name  # the line under Start followed it: it goes too
        return (said, "" if gone else gr.update(), None if gone else about,
                gr.update(choices=run_choices(ctx), value=default_run(ctx)), run_list_frame(ctx),
                gr.update(value=False))

    def on_export(name, voice):
        v = views.view(ws, name)  # its best found in its own folder: the path recorded may be another workspace's
        best = inference.best_checkpoint(ws, name) or (v.checkpoints[-1][1] if v.checkpoints else None)
        if not best:
            raise StudioError(f"{name} has no checkpoint yet: export it once it has saved one.")
        again = exported_from_run(ws, voice or name, name)
        folder = inference.export_voice(ws, str(best), voice or name, overwrite=again)
        return (f"Saved voice **{folder.name}** (from `{Path(best).name}`"
                + (", in place of the one exported from this run before" if again else "")
                + "). Open the **Inference** tab to hear it."
                + inference.same_name_note(ws, folder.name))

    def action(fn, outputs):
        return says_errors(fn, outputs, f.message, also={f.about: None})

    def soon():  # after an action the run changes within seconds: the panel polls every second again
        return gr.update(value=LIVE_S[0])

    started = [f.message, p.run_list, p.selected, f.about]
    f.start.click(action(on_start, started), [f.dataset, f.preset, f.run_name, f.max_steps, f.init, f.mode,
                                              f.all_gpus, f.engine, f.licence, f.prompt, f.base, f.about], started,
                  api_name="start_training").then(soon, None, p.timer, show_progress="hidden").then(
        lambda e: base_panel(ws, e)[0], f.engine, f.base_state, show_progress="hidden")  # what base_refusal points at
    f.vocoder_start.click(action(on_start_vocoder, started),
                          [f.dataset, f.vocoder_init, f.vocoder_size, f.vocoder_steps, f.all_gpus], started,
                          api_name="start_vocoder_training").then(soon, None, p.timer, show_progress="hidden")
    def on_run(fn, outputs):  # what the run panel's buttons did, said under them (the form's line is under Start)
        return says_errors(fn, outputs, p.said)

    p.stop.click(on_run(on_stop, [p.said]), p.selected, p.said, api_name="stop_training").then(
        soon, None, p.timer, show_progress="hidden")
    p.resume.click(on_run(on_resume, [p.said]), [p.selected, f.max_steps, f.vocoder_steps], p.said,
                   api_name="resume_training").then(soon, None, p.timer, show_progress="hidden")
    deleted = [p.said, f.message, f.about, p.selected, p.run_list, p.confirm]
    p.delete.click(on_run(on_delete, deleted), [p.selected, p.confirm, f.about], deleted, api_name="delete_run")
    p.export.click(on_run(on_export, [p.said]), [p.selected, p.voice_name], p.said, api_name="training_export_voice")
    f.base_add.click(says_errors(lambda e, files: add_base(ws, e, files), [f.base_msg, f.base_state, f.engine],
                                 f.base_msg), [f.engine, f.base_files], [f.base_msg, f.base_state, f.engine],
                     api_name="add_base")


def _wire_live(ctx: AppContext, f: SimpleNamespace, p: SimpleNamespace) -> list:
    """What follows the form and the workspace: the engine's own controls, the vocoder button's label, and one
    poll (`p.timer`) for everything the tab shows of the workspace: the live panel, the message line, the run list
    and picker (together, so the list is never behind the panel), and less often the other tabs' work. A poll sends
    only what changed, and comes less often while the run is quiet (next_interval). Returns the poll as the tab's
    "open" refresh: a tab opened again is brought up to date at once."""
    from utils import inference

    ws = ctx.workspace
    f.engine.change(engine_controls, f.engine, [f.licence, f.prompt, f.preset, f.mode, f.base, f.init],
                    show_progress="hidden")
    f.engine.change(lambda e: base_panel(ws, e), f.engine, [f.base_state, f.base_upload, f.base_help],
                    show_progress="hidden")
    # a yes is to one licence: the curator's own change of family unticks it (F5's yes showed as MMS's, and the run
    # logged its licence accepted); `input`, not `change`, so that restoring a run keeps the yes it was started with
    f.engine.input(lambda: False, None, f.licence, show_progress="hidden")
    f.dataset.change(lambda d: engine_advice(ctx, d), f.dataset, f.advice, show_progress="hidden")
    for trigger in (f.engine.change, f.dataset.change, f.max_steps.blur, f.base.blur, f.preset.change):  # said anew
        trigger(lambda *a: expectations(ctx, *a), [f.engine, f.dataset, f.max_steps, f.base, f.preset], f.expect,
                show_progress="hidden")
    # the button says what it will start, once the server has the typed step count
    f.vocoder_steps.change(lambda n: gr.update(value=_vocoder_label(n)), f.vocoder_steps, f.vocoder_start,
                           show_progress="hidden")
    rare = {"vocoder": (p.vocoder_status, lambda: status_line(ws, training=True)),
            "cer": (p.cer_status, lambda: asr.status_line(ws)),
            "datasets": (f.dataset, lambda: gr.update(choices=ws.list_datasets())),
            "init": (f.init, lambda: gr.update(choices=[SCRATCH] + control.init_labels(ws))),
            "vocoders": (f.vocoder_init, lambda: gr.update(choices=VOCODER_SCRATCH + inference.list_vocoders(ws)))}

    def shown_run(name, held: dict, out: dict, fresh: bool) -> bool:
        """The panel's part of a poll into `out`; whether the run said something new."""
        said = panel(ctx, name, held, fresh)
        out.update({c: said[k] for c, k in ((p.summary, "summary"), (p.log, "log")) if k in said})
        out.update({p.plots[i]: value for i, value in said.get("plots", {}).items()})
        out.update(dict(zip(p.players, said.get("players", []))))
        return bool(said.get("news")) or bool(said.get("hurry"))

    def poll(name, seen, about, interval):
        fresh, seen, out, now = seen is None, dict(seen or {}), {}, time.time()
        seen["panel"] = dict(seen.get("panel") or {})
        table = views.run_table(ws)  # every poll: it also marks a run whose process died as failed
        names = [r["run"] for r in table]
        news = changed(seen, "states", [(r["run"], r["status"]) for r in table])  # a run come, gone, or its state
        if (name and name not in names) or (not name and names):  # deleted meanwhile (here or in another browser),
            # or the first run started in another browser: show a run that exists
            name = next((r["run"] for r in table if r["status"] in ("running", "stopping", "queued")),
                        names[0] if names else None)
            out[p.selected] = gr.update(choices=names, value=name)
        line = views.state_line(ws, about) if about else None
        if line is not None and changed(seen, "message", line):
            out[f.message], news = line, True
        news = shown_run(name, seen["panel"], out, fresh) or news
        state = next((r["status"] for r in table if r["run"] == name), None)
        if changed(seen, "buttons", state):
            out[p.stop], out[p.resume] = run_buttons(state)
        if news and changed(seen, "runs", table):  # with the panel's news, not at each step: a table costs a redraw
            out[p.run_list] = pd.DataFrame(table, columns=RUN_COLUMNS)
            out[p.selected] = gr.update(choices=names) if p.selected not in out else out[p.selected]
        if now - seen.get("rare_at", 0.0) >= RARE_S:
            seen["rare_at"] = now
            out.update({c: value for key, (c, read) in rare.items() if changed(seen, key, value := read())})
        gap = now - seen["news_at"] if news and "news_at" in seen else None
        seen["news_at"] = now if news else seen.get("news_at", now)
        wait = LIVE_S[0] if seen["panel"].get("pending") and news else next_interval(interval, news, gap)
        if wait != interval:
            out[p.timer] = gr.update(value=wait)
        out[p.shown] = seen
        return out

    def on_pick(name, seen, about):
        """Another run shown: its panel at once; a message line about another run is cleared (it would read as
        said of the run shown)."""
        fresh, seen = seen is None, dict(seen or {})
        seen["panel"], out = {}, {}
        shown_run(name, seen["panel"], out, fresh)
        state = shown_state(ws, name)
        changed(seen, "buttons", state)
        out[p.stop], out[p.resume] = run_buttons(state)
        if about and about != name:
            out.update({f.message: "", f.about: None})
        return {**out, p.said: "", p.shown: seen, p.timer: gr.update(value=LIVE_S[0])}

    polled = [p.summary, p.log, *p.plots, *p.players, f.message, p.run_list, p.selected, p.stop, p.resume,
              *[c for c, _ in rare.values()], p.timer, p.shown]
    p.selected.change(on_pick, [p.selected, p.shown, f.about], polled + [f.about, p.said], show_progress="hidden",
                      api_name="show_run")
    p.selected.change(lambda: False, None, p.confirm, show_progress="hidden", queue=False)  # a yes for the run shown
    # not queued: a queued event gets three status messages, each of which makes the browser walk every component
    p.timer.tick(poll, [p.selected, p.shown, f.about, p.timer], polled, api_name="refresh_run",
                 show_progress="hidden", queue=False)
    return [(poll, [p.selected, p.shown, f.about, p.timer], polled, "open")]


def build(ctx: AppContext) -> list:
    from utils import hardware

    on_gpu = bool(hardware.query_gpus())
    gr.Markdown("Training runs in its own process: close the tab, reload, or restart the app — the run goes on "
                "and this page finds it again. Settings come from the **Optimizations** tab.")
    f = _form(ctx, on_gpu)
    p = _run_panel(ctx, on_gpu)
    _wire_actions(ctx, f, p)
    opened = _wire_live(ctx, f, p)
    saved_steps = gr.State(settings.default_steps(ctx.workspace))  # the Optimizations tab's steps as the page has them
    restored = [f.dataset, f.preset, f.max_steps, f.init, f.mode, f.all_gpus, f.engine, f.licence, f.prompt,
                f.vocoder_init, f.vocoder_size, f.vocoder_steps, saved_steps]
    return [(lambda: restore_page(ctx), None, restored + [f.advice, f.expect], "restore"), *opened,
            (lambda *a: form_on_open(ctx, *a), [f.dataset, saved_steps, f.engine, f.max_steps, f.base, f.preset],
             [f.dataset, f.max_steps, saved_steps, f.advice, f.expect], "open")]
