"""Tab: the machine, the settings it gets and why, and live memory/utilization."""
from __future__ import annotations

import gradio as gr
import pandas as pd

from utils import hardware
from utils.runs import settings
from utils.transcripts import recognizers
from webui.components import plain_label
from webui.context import AppContext

HISTORY_POINTS = 120


def hardware_card(report: hardware.HardwareReport) -> str:
    """What the machine is, in the order a curator asks: its GPU (or that there is none), its cores, memory and
    disk, then the software. PyTorch's CUDA version is named only where a GPU uses it: beside "No GPU was found" it
    read as if one had been."""
    lines = [f"**GPU {g.index}** {g.summary()}" for g in report.gpus]
    if not report.gpus:
        lines.append("**No GPU was found**" + (" (Apple MPS is available)" if report.mps else "")
                     + ": training and music removal run on the CPU; keep runs tiny.")
    lines.append(f"**CPU cores** <span id='cpu-count'>{report.cpu_count}</span> · **RAM** {report.ram_gb:.1f} GiB · "
                 f"**Free disk** {report.disk_free_gb:.1f} GB")
    cuda = (f" with CUDA {report.cuda_version}" if report.gpus else
            f" (built for NVIDIA GPUs, CUDA {report.cuda_version}: unused here)") if report.cuda_version else ""
    lines.append(f"**Software** PyTorch {report.torch_version}{cuda} · {report.platform}")
    lines.append("**" + recognizers.line(recognizers.choose([g.memory_gb for g in report.gpus])).replace(":", ":**", 1))
    return "\n\n".join(lines)


def settings_table(report: hardware.HardwareReport) -> pd.DataFrame:
    """The machine's settings in the Optimizations tab's words (technical name in brackets), so a curator reads
    the same setting by the same name on both tabs."""
    plain = settings.plain_words()
    return pd.DataFrame([{"setting": plain_label(k, plain), "value": str(s.value), "reason": s.reason}
                         for k, s in report.recommended.items()])


def sample_usage(history: list[dict]) -> tuple:
    """One live reading: a summary line, the percent and GiB plots, and the updated history. The GiB axis runs to
    the most memory there is (RAM or a GPU's), so a line reads as how full it is, not as the top of the chart."""
    now = hardware.live_usage()
    point = {"time": pd.Timestamp.now("UTC"), "CPU %": now["cpu_percent"], "RAM GiB": round(now["ram_used_gb"], 2)}
    parts = [f"CPU {now['cpu_percent']:.0f}% · RAM {now['ram_used_gb']:.1f}/{now['ram_total_gb']:.1f} GiB"]
    for g in now["gpus"]:
        point[f"GPU{g['index']} GiB"] = round(g["used_gb"], 2)
        busy = "busy: not measured here" if g["util_percent"] is None else f"{g['util_percent']}% busy"
        if g["util_percent"] is not None:
            point[f"GPU{g['index']} util %"] = g["util_percent"]
        procs = g["processes"]
        per_proc = ("which programs use it is hidden here (a container or a shared GPU)" if procs is None else
                    ", ".join(f"pid {p['pid']}: {p['used_gb']:.2f} GiB" for p in procs) or "no programs use it")
        parts.append(f"GPU {g['index']}: {g['used_gb']:.1f}/{g['total_gb']:.1f} GiB, {busy} ({per_proc})")
    if not now["gpus"]:
        parts.append("No GPU: showing CPU and RAM.")
    history = (history + [point])[-HISTORY_POINTS:]
    frame = pd.DataFrame(history).melt(id_vars="time", var_name="series", value_name="value")
    percent = frame["series"].str.endswith("%")  # percent and GiB apart: one axis for both squashes one of them
    most = max([now["ram_total_gb"]] + [g["total_gb"] for g in now["gpus"]])
    return "\n\n".join(parts), frame[percent], gr.update(value=frame[~percent], y_lim=[0, most]), history


def build(ctx: AppContext) -> None:
    report = hardware.detect(ctx.workspace.root)
    gr.Markdown("### This machine", elem_classes=["hw-card"])
    gr.Markdown(hardware_card(report), elem_id="hardware-card", elem_classes=["hw-card"])
    gr.Markdown("### Recommended training settings\nEvery setting starts here; the Optimizations tab lets you change them.")
    gr.Dataframe(settings_table(report), wrap=True, interactive=False, elem_id="recommended-settings",
                 column_widths=["30%", "10%", "60%"], max_height=4000)  # all of it: a box scrolling in the page hid half
    gr.Markdown("### Live usage")
    live = gr.Markdown(elem_id="live-usage")
    with gr.Row():
        clock = dict(x="time", y="value", color="series", color_title="", x_axis_format="%H:%M:%S")
        busy = gr.LinePlot(**clock, y_title="%", y_lim=[0, 100], label="how busy (%)", elem_id="usage-percent")
        memory = gr.LinePlot(**clock, y_title="GiB", y_lim=[0, None], label="memory in use (GiB)",
                             elem_id="usage-memory")
    history = gr.State([])
    timer = gr.Timer(2.0)
    timer.tick(sample_usage, inputs=history, outputs=[live, busy, memory, history], api_name="system_usage",
               show_progress="hidden")
