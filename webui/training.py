"""Tab: start a run, watch it live (log, loss, MCD, LR, speed, GPU memory, samples), stop, resume.

Everything shown is read from the run's files once a second, so a reload, a second browser or an
app restart shows the same run; the run itself is its own process (utils/jobs).
"""
from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pandas as pd

from utils import jobs, runs
from utils.events import StudioError
from utils.f5 import ENGINES, SHORT_LICENCE as F5_LICENCE, SIZE_MB as F5_MB
from utils.transcripts import asr
from utils.vocoder.default import status_line
from webui.components import default_model_size, says_errors
from webui.context import AppContext

MAX_SAMPLES = 4
VOCODER_SCRATCH = ["(from scratch)"]
LOSS = lambda k: ("loss" in k and k != "loss_scale") or k in ("dur", "prior", "cfm")  # noqa: E731
QUALITY = lambda k: "mcd" in k  # noqa: E731
CER = lambda k: k == "cer"  # noqa: E731  (written only when the workspace has a speech recognizer)
LR = lambda k: k == "lr"  # noqa: E731
SPEED = lambda k: k == "samples_per_s"  # noqa: E731
MEMORY = lambda k: "mem" in k or k.startswith("nvml") or k.startswith("gpu_util")  # noqa: E731


def _frame(rows: list[dict]) -> pd.DataFrame:
    """Numeric step and value, whatever the rows hold: the plot takes its axis types from the column types,
    and numbers typed as text would be drawn as categories."""
    return pd.DataFrame(rows, columns=["step", "series", "value"]).astype({"step": float, "series": str, "value": float})


def _plot(frame: pd.DataFrame, drawn: list | None) -> tuple:
    """(what to send a live plot, the curves it will then be drawn with). A Gradio plot takes its axis types,
    colours and legend from the data it holds when it is drawn, and it is drawn when data first comes to an
    empty box: so no data is sent as nothing, and other curves than the drawn ones (another run, a first
    evaluation) empty the box first, for the next refresh to draw it again."""
    curves = sorted(frame["series"].unique())
    if curves and drawn in (None, curves):
        return frame, curves
    return None, None


def _curves(label: str, elem_id: str, **kw) -> gr.LinePlot:
    """A live plot of metric curves over steps; its legend names each curve (no title: the names say it).
    No fixed height: the plot's own height leaves room for the legend, which a fixed one cuts off. No fixed
    colours either: a curve missing from a colour map (a vocoder run's loss_mel) would be drawn in none."""
    return gr.LinePlot(x="step", y="value", color="series", color_title="", label=label, elem_id=elem_id, **kw)


def run_choices(ctx: AppContext) -> list[str]:
    return [r["run"] for r in runs.run_table(ctx.workspace)]


def default_run(ctx: AppContext) -> str | None:
    """The run to show when nothing is selected: an active one, else the newest."""
    table = runs.run_table(ctx.workspace)
    active = [r["run"] for r in table if r["status"] in ("running", "stopping", "queued")]
    return (active or [r["run"] for r in table] or [None])[0]


def run_list_frame(ctx: AppContext) -> pd.DataFrame:
    return pd.DataFrame(runs.run_table(ctx.workspace),
                        columns=["run", "status", "step", "dataset", "preset", "best (val MCD)", "val CER", "started"])


def refresh_list(ctx: AppContext):
    """The run table and the picker's choices; the picked run itself is left to the user."""
    return run_list_frame(ctx), gr.update(choices=run_choices(ctx))


PLOTS = {"loss": LOSS, "quality": QUALITY, "lr": LR, "speed": SPEED, "memory": MEMORY, "cer": CER}
PLOTS_EVERY_S = 5.0  # curves are redrawn at most this often per browser; the log and summary every second


def refresh_run(ctx: AppContext, name: str | None, shown: tuple | None = None):
    """Everything the live panel shows, from the run's files, and what this browser now holds.

    `shown` is what this browser got last: (run, metric rows, samples, when, curves drawn per plot). The plots
    and players are sent again only when they changed, and the curves at most every PLOTS_EVERY_S: a browser
    costs the server a small log update a second, so many people can watch one run (bench/ui_polling.py)."""
    hidden = [gr.update(value=None, visible=False)] * MAX_SAMPLES
    if not name:
        return ("No run yet: choose a dataset above and press Start.", "", *[None] * len(PLOTS), *hidden, None)
    try:
        v = runs.view(ctx.workspace, name)
    except StudioError as exc:
        return (str(exc), "", *[None] * len(PLOTS), *hidden, None)
    now = (name, len(v.metrics), [str(p) for _, p in v.samples[:MAX_SAMPLES]], time.time())
    if shown and shown[0] == name and shown[2] == now[2] and (shown[1] == now[1] or now[3] - shown[3] < PLOTS_EVERY_S):
        return (v.summary(), v.log, *[gr.update()] * (len(PLOTS) + MAX_SAMPLES), shown)
    samples = [gr.update(value=str(p), label=f"step {s}: {p.stem}", visible=True) for s, p in v.samples[:MAX_SAMPLES]]
    samples += hidden[len(samples):]
    frames = [_frame(rows) for rows in v.plots(PLOTS).values()]
    drawn = shown[4] if shown and shown[0] == name else [["?"]] * len(frames)  # unknown: empty the boxes first
    plots, drawn = zip(*[_plot(f, d) for f, d in zip(frames, drawn)])
    if any(d is None and len(f) for d, f in zip(drawn, frames)):
        now = (name, -1, now[2], 0.0)  # a plot was emptied to be drawn again: send the curves next second
    return (v.summary(), v.log, *plots, *samples, (*now, list(drawn)))


def engine_controls(engine: str | None) -> tuple:
    """(licence box, reference clip, model size, fine-tuning mode) shown for an engine: F5 asks for its licence and
    reference clip; its size is the pretrained base's and it always learns everything (the trainer refuses the
    other modes), so the size and the mode are Matcha's choices."""
    f5 = engine == "f5"
    mode = gr.update(visible=not f5, value="full") if f5 else gr.update(visible=True)
    return gr.update(visible=f5), gr.update(visible=f5), gr.update(visible=not f5), mode


def _restored_training(ws, t: dict) -> tuple:
    """The Training form's part from the last training run's config `t`: the engine with the controls it shows
    (an F5 run's licence yes and reference clip, else the Matcha size), so Start starts the same kind of run.
    Order: preset, steps, start from, mode, every GPU, engine, licence, reference clip."""
    engine = t.get("engine") or "matcha"
    licence, prompt, size, mode = engine_controls(engine)
    if engine != "f5":  # an F5 run's size is the base's, not a choice: the Matcha size stays as it was
        size = {**size, "value": t["preset"]}
    init = t["init"] if t["init"] in runs.init_choices(ws) else "(from scratch)"
    return (size, gr.update(value=t["max_steps"]), gr.update(value=init),
            {**mode, "value": t.get("finetune_mode", "full")}, gr.update(value=t["all_gpus"]), gr.update(value=engine),
            {**licence, "value": bool(t.get("licence_accepted"))}, {**prompt, "value": t.get("prompt") or ""})


def restore_form(ctx: AppContext) -> tuple:
    """The form as the curator last filled it (the active run's choices, else the newest run's), so a reload
    does not blank the dataset, put the steps back to the default or bring an F5 run's form back on Matcha.
    With no run yet the steps start where the Optimizations tab says (a setting saved there since the app
    started included); the rest stays as built. Order: dataset, preset, steps, start from, mode, every GPU,
    engine, licence, reference clip, vocoder start from, size, steps."""
    from utils import inference

    ws, keep = ctx.workspace, gr.update()
    last = runs.last_choices(ws)
    t, v = last.get("train", {}), last.get("vocoder", {})
    names = ws.list_datasets()
    newest = next(iter(last.values()), {}).get("dataset")
    form = (gr.update(choices=names, value=newest) if newest in names else gr.update(choices=names),)
    form += _restored_training(ws, t) if t else (keep, gr.update(value=runs.default_steps(ws)), *(keep,) * 6)
    form += (gr.update(value=v["init"] if v["init"] in inference.list_vocoders(ws) else VOCODER_SCRATCH[0]),
             gr.update(value=v["preset"]), gr.update(value=v["max_steps"])) if v else (keep,) * 3
    return form


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
        f5_here = hardware.f5_engine(hardware.detect(ws.root))
        engine = gr.Radio([(ENGINES["matcha"], "matcha"), (ENGINES["f5"], "f5")], value="matcha", label="engine",
                          elem_id="engine", info=f"F5-TTS on this machine: {'yes' if f5_here.value else 'no'}. "
                                                 f"{f5_here.reason}")
        licence = gr.Checkbox(False, label=f"yes to the F5-TTS base's licence: {F5_LICENCE} (about {F5_MB} MB, "
                                           "downloaded once)", elem_id="f5-licence", visible=False)
        prompt = gr.Textbox(label="F5 reference clip (a row id of the dataset)", elem_id="f5-prompt", visible=False,
                            placeholder="automatic: a clean 5-10 s clip, the one closest to 6 s",
                            info="an F5 voice speaks in the voice of this clip: pick a clean 5-10 s one")
    with gr.Row(elem_id="train-form"):
        dataset = gr.Dropdown(ws.list_datasets(), label="dataset", allow_custom_value=False,
                              info="a dataset prepared on the Dataset tab")
        preset = gr.Radio(["tiny", "small", "base"], value=default_model_size(), label="model size",
                          info="tiny: trains on a CPU in minutes (rough voice); small (10M parameters); base: 21M parameters, GPU")
        run_name = gr.Textbox(label="run name", placeholder="automatic: dataset + time")
        max_steps = gr.Number(value=runs.default_steps(ws), precision=0, label="steps", minimum=1,
                              info="starts at the Optimizations tab's 'How long it trains'; the ETA shows once it runs"
                                   + ("" if on_gpu else "; no GPU here: keep it small"))
    with gr.Row():
        init = gr.Dropdown(["(from scratch)"] + runs.init_choices(ws), value="(from scratch)",
                           label="start from", info="a checkpoint to fine-tune, or scratch")
        mode = gr.Radio([("learn everything", "full"), ("keep how it reads text, learn the voice (freeze_encoder)",
                                                         "freeze_encoder"),
                         ("add one new speaker, leave the others (new_speaker)", "new_speaker")], value="full",
                        label="when starting from a checkpoint", info="what the new run may change in the model")
        all_gpus = gr.Checkbox(False, label="train on every GPU at once: faster on a machine with several "
                                            "(torchrun, DDP)")
        start = gr.Button("Start training", variant="primary")
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
            vocoder_steps = gr.Number(value=20000 if on_gpu else 200, precision=0, minimum=1, label="vocoder steps",
                                      elem_id="vocoder-steps")
            vocoder_start = gr.Button(_vocoder_label(vocoder_steps.value), elem_id="vocoder-start")
    message = gr.Markdown(elem_id="train-message")
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

    summary = gr.Markdown(elem_id="run-summary")
    log = gr.Textbox(label="log (newest at the bottom)", lines=16, max_lines=16, autoscroll=True, interactive=False,
                     elem_id="train-log", elem_classes=["log-box"])
    if not on_gpu:
        gr.Markdown("No GPU here: no GPU memory plot.")
    with gr.Row():
        loss_plot = _curves("losses", "loss-plot")
        mcd_plot = _curves("validation MCD (dB)", "mcd-plot")
    with gr.Row():
        lr_plot = _curves("learning rate", "lr-plot")
        speed_plot = _curves("samples per second", "speed-plot")
        mem_plot = _curves("GPU memory (GiB) and utilization", "mem-plot", visible=on_gpu)
    with gr.Row():
        cer_plot = _curves("character error rate of the synthesised held-out clips", "cer-plot")
        cer_status = gr.Markdown(asr.status_line(ws), elem_id="training-cer-status")
    vocoder_status = gr.Markdown(status_line(ws, training=True), elem_id="training-vocoder-status")
    gr.Markdown("**Samples rendered at evaluations (newest first)**")
    with gr.Row():
        players = [gr.Audio(visible=False, interactive=False, type="filepath") for _ in range(MAX_SAMPLES)]
    shown = gr.State(None)  # what this browser's live panel holds (see refresh_run)
    live = [summary, log, loss_plot, mcd_plot, lr_plot, speed_plot, mem_plot, cer_plot, *players, shown]
    return SimpleNamespace(**{k: v for k, v in locals().items() if isinstance(v, (gr.blocks.Block, list))})


def _wire_actions(ctx: AppContext, f: SimpleNamespace, p: SimpleNamespace) -> None:
    """Start, Stop, Resume, Delete and Export. Each says what it did in the message line, and names the run that
    line then follows (`about`): the timer rewrites it from status.json, so "queued: starting" becomes "is
    training", then "finished". A refusal is written there too (says_errors), and the line stops following."""
    from utils import inference

    ws = ctx.workspace

    def on_start(dataset, preset, run_name, max_steps, init, mode, all_gpus, engine, licence, prompt):
        if engine == "f5":  # the size is the pretrained base's (the tiny random F5 is a CLI smoke test)
            preset = "base"
        status = runs.start_training(ws, dataset, preset, run_name or "", "" if init == "(from scratch)" else init,
                                     mode, int(max_steps or 0) or None, all_gpus, engine=engine or "matcha",
                                     accept_licence=bool(licence),
                                     overrides={"prompt": prompt.strip()} if (prompt or "").strip() else None)
        return (runs.state_line(ws, status["run"]), run_list_frame(ctx),
                gr.update(choices=run_choices(ctx), value=status["run"]), status["run"])

    def on_start_vocoder(dataset, init, size, steps, all_gpus):
        status = runs.start_vocoder_training(ws, dataset, "" if init in VOCODER_SCRATCH else init, size,
                                             max_steps=int(steps or 0) or None, all_gpus=all_gpus)
        return (runs.state_line(ws, status["run"]), run_list_frame(ctx),
                gr.update(choices=run_choices(ctx), value=status["run"]), status["run"])

    def on_stop(name):
        if not name:
            raise StudioError("Choose a run first.")
        return jobs.stop(ws, name), name

    def on_resume(name):
        if not name:
            raise StudioError("Choose a run first.")
        runs.resume_training(ws, name)
        return runs.state_line(ws, name), name

    def on_delete(name, confirmed):
        if not confirmed:
            raise StudioError("Tick 'yes, delete the run shown' first: a deleted run cannot be brought back.")
        return runs.delete(ws, name), None

    def on_export(name, voice):
        v = runs.view(ws, name)
        best = v.status.get("best_checkpoint") or (str(v.checkpoints[-1][1]) if v.checkpoints else None)
        if not best:
            raise StudioError(f"{name} has no checkpoint yet: export it once it has saved one.")
        folder = inference.export_voice(ws, best, voice or name)
        return (f"Saved voice **{folder.name}** (from `{Path(best).name}`). Open the **Inference** tab to hear it.",
                None)

    def action(fn, outputs):
        return says_errors(fn, outputs, f.message, also={f.about: None})

    started = [f.message, p.run_list, p.selected, f.about]
    f.start.click(action(on_start, started), [f.dataset, f.preset, f.run_name, f.max_steps, f.init, f.mode,
                                              f.all_gpus, f.engine, f.licence, f.prompt], started,
                  api_name="start_training")
    f.vocoder_start.click(action(on_start_vocoder, started),
                          [f.dataset, f.vocoder_init, f.vocoder_size, f.vocoder_steps, f.all_gpus], started,
                          api_name="start_vocoder_training")
    said = [f.message, f.about]
    p.stop.click(action(on_stop, said), p.selected, said, api_name="stop_training")
    p.resume.click(action(on_resume, said), p.selected, said, api_name="resume_training")
    p.delete.click(action(on_delete, said), [p.selected, p.confirm], said, api_name="delete_run")
    p.export.click(action(on_export, said), [p.selected, p.voice_name], said, api_name="training_export_voice")


def _wire_live(ctx: AppContext, f: SimpleNamespace, p: SimpleNamespace) -> None:
    """What follows the form and the workspace: the engine's own controls, the vocoder button's label, the live
    panel every second, the run list and pickers every four."""
    from utils import inference

    ws = ctx.workspace
    f.engine.change(engine_controls, f.engine, [f.licence, f.prompt, f.preset, f.mode], show_progress="hidden")
    p.selected.change(lambda n: refresh_run(ctx, n), p.selected, p.live, show_progress="hidden")
    # the button says what it will start, once the server has the typed step count
    f.vocoder_steps.change(lambda n: gr.update(value=_vocoder_label(n)), f.vocoder_steps, f.vocoder_start,
                           show_progress="hidden")
    fast = gr.Timer(1.0)
    fast.tick(lambda n, s, a: (*refresh_run(ctx, n, s), runs.state_line(ws, a) if a else gr.update()),
              [p.selected, p.shown, f.about], p.live + [f.message], api_name="refresh_run", show_progress="hidden")
    slow = gr.Timer(4.0)
    slow.tick(lambda: refresh_list(ctx), None, [p.run_list, p.selected], show_progress="hidden")
    slow.tick(lambda: status_line(ws, training=True), None, [p.vocoder_status], show_progress="hidden")
    slow.tick(lambda: asr.status_line(ws), None, [p.cer_status], show_progress="hidden")
    slow.tick(lambda: (gr.update(choices=ws.list_datasets()),
                       gr.update(choices=["(from scratch)"] + runs.init_choices(ws)),
                       gr.update(choices=VOCODER_SCRATCH + inference.list_vocoders(ws))), None,
              [f.dataset, f.init, f.vocoder_init], show_progress="hidden")


def build(ctx: AppContext) -> list:
    from utils import hardware

    on_gpu = bool(hardware.query_gpus())
    gr.Markdown("Training runs in its own process: close the tab, reload, or restart the app — the run goes on "
                "and this page finds it again. Settings come from the **Optimizations** tab.")
    f = _form(ctx, on_gpu)
    p = _run_panel(ctx, on_gpu)
    _wire_actions(ctx, f, p)
    _wire_live(ctx, f, p)
    restored = [f.dataset, f.preset, f.max_steps, f.init, f.mode, f.all_gpus, f.engine, f.licence, f.prompt,
                f.vocoder_init, f.vocoder_size, f.vocoder_steps]
    return [(lambda: restore_form(ctx), None, restored)]
