"""Tab: every training setting, pre-filled from hardware detection, with its reason and what it trades."""
from __future__ import annotations

import gradio as gr

from utils.runs import probe, settings
from utils.events import StudioError
from webui.components import dataset_pick, dataset_picker, plain_label, says_errors
from webui.context import AppContext


SWITCHES = ("tf32", "compile", "grad_checkpointing", "fused_adamw", "cudnn_benchmark", "pin_memory", "fp8")


def _component(row: settings.SettingRow, plain: dict):
    """One setting's box: its plain label, and under it its plain help (technical terms in brackets), else the
    trainer's own help."""
    label, info = plain_label(row.name, plain), plain.get(row.name, {}).get("help", row.help)
    if row.name == "device":
        return gr.Dropdown(["cpu", "cuda", "mps"], value=row.value, label=label, info=info)
    if row.choices:
        return gr.Dropdown(row.choices, value=row.value, label=label, info=info)
    if isinstance(row.recommended, (int, float)) and not isinstance(row.recommended, bool):
        return gr.Number(value=row.value, label=label, info=info)
    return gr.Textbox(value=str(row.value), label=label, info=info)


def _explain(row: settings.SettingRow) -> str:
    return f"**why:** {row.reason}\n\n**trade:** {row.trade}"


def chosen_here(rows: list[settings.SettingRow], plain: dict) -> str:
    """The first screen: where it trains, in what precision, which speed-ups are on, each with its reason."""
    by = {r.name: r for r in rows}
    on = [plain_label(n, plain) for n in SWITCHES if by[n].value is True]
    lines = [f"- **{plain_label(n, plain)}: {by[n].value}.** {by[n].reason}" for n in ("device", "precision")]
    lines.append("- **Speed-ups switched on:** " + ("; ".join(on) if on else
                                                   "none: each needs a GPU, where they make steps faster"))
    return "### Chosen for this machine\n" + "\n".join(lines)


def build(ctx: AppContext) -> list:
    ws = ctx.workspace
    plain = settings.plain_words()
    gr.Markdown("**You need not change anything here**: every setting starts chosen for **this machine** (see the System tab). "
                "New runs start from what is saved here; a setting left at its recommendation keeps following "
                "the hardware.")
    with gr.Row():
        preset = gr.Radio(["tiny", "small", "base"], value=settings.recommended_preset(),
                          label="model size the recommendations are for", elem_id="settings-preset")
        save = gr.Button("Save settings", variant="primary", elem_id="save-settings")
        reset = gr.Button("Reset to recommended")
    try:
        rows, problem = settings.settings_form(ws, preset.value), ""
    except StudioError as exc:  # a hand-edited file that does not parse: the app starts, and says so here
        rows, problem = settings.settings_form(ws, preset.value, use_saved=False), f"Not done: {exc}"
    chosen = gr.Markdown(chosen_here(rows, plain), elem_id="chosen-here")
    batch = gr.Markdown(settings.batch_summary(rows), elem_id="effective-batch")
    changes = gr.Markdown(problem, elem_id="settings-changes")
    names = [r.name for r in rows]
    components, explanations = [], []
    for title, group in (("Every setting: speed and memory", settings.MACHINE_SETTINGS),
                         ("Every setting: training length, quality checks, saved copies", settings.SCHEDULE_SETTINGS)):
        with gr.Accordion(title, open=False):
            for row in rows:
                if row.name in group:
                    with gr.Row(equal_height=True):
                        components.append(_component(row, plain))
                        explanations.append(gr.Markdown(_explain(row), elem_id=f"why-{row.name}"))

    with gr.Accordion("Measure the largest batch this GPU can take", open=False):
        gr.Markdown("One real training step on the dataset's longest batch, then bisection to the largest batch "
                    "that fits this GPU, with headroom.")
        with gr.Row():
            dataset = dataset_picker(ws, "dataset", elem_id="measure-dataset")
            measure = gr.Button("Measure")
        measured = gr.Markdown(elem_id="probe-result")

    # ------------------------------------------------------------------------------- events
    def fill(preset):
        form = settings.settings_form(ws, preset)
        return [gr.update(value=r.value) for r in form] + [_explain(r) for r in form] + [
            settings.batch_summary(form), chosen_here(form, plain)]

    def on_save(preset, *values):
        try:
            saved, lines = settings.save_form(ws, preset, dict(zip(names, values)))
        except (StudioError, ValueError) as exc:
            raise gr.Error(str(exc))
        text = ("Saved. New runs use:\n\n" + "\n\n".join(lines)) if lines else "Saved: every setting follows the recommendation."
        return [text] + fill(preset)

    def on_reset(preset):
        settings.save_settings(ws, {})
        return ["Back to the recommended settings for this machine."] + fill(preset)

    def on_preset(preset):  # the message box keeps what it said (a save's changes) unless this fails
        return [gr.update()] + fill(preset)

    outputs = components + explanations + [batch, chosen]
    said = [changes] + outputs  # a refusal, or a settings file that cannot be read, is written in `changes`
    refill = says_errors(on_preset, said, changes, what="Filling in the settings")
    preset.change(refill, preset, said, show_progress="hidden")
    save.click(says_errors(on_save, said, changes), [preset] + components, said, api_name="save_settings")
    reset.click(says_errors(on_reset, said, changes, what="Reset"), preset, said, api_name="reset_settings")
    measure.click(says_errors(lambda d, p: probe.start_probe(ws, d, p), [measured], measured, what="Measure"),
                  [dataset, preset], measured, api_name="measure_batch")
    # no probe yet: the box keeps what it says (a refusal of Measure, written there by says_errors)
    gr.Timer(3.0).tick(lambda: probe.probe_report(ws) or gr.update(), None, measured, show_progress="hidden")
    # the dataset to measure on, as the workspace is at page load and each time the tab opens
    datasets = (lambda current: dataset_pick(ws, current), [dataset], [dataset])
    return [(refill, [preset], said), datasets, (*datasets, "open")]
