"""What the F5 family refuses, and whether this machine can fine-tune its base: said before any data is read, any
run folder made, anything queued or downloaded."""
from pathlib import Path

from utils.events import StudioError
from utils.f5.about import BASE_PARAMETERS, FIXED_GB, FRAME_FACTOR, NEEDS_BASE, SMOKE_TEST


def check_request(cfg, report=None) -> None:
    """Refuse, before any data is read, what the F5 engine cannot do, saying what to pass instead (a setting of
    another family, such as Matcha's finetune_mode, is refused by TrainConfig). `report`: the machine's
    `utils.hardware.HardwareReport` (None: this machine's); one that cannot fine-tune the base is refused before
    anything is queued or downloaded, instead of a 1.35 GB download and weeks of training (or five failed retries
    offline)."""
    if not (cfg.init or cfg.preset == "tiny" or _resumes(cfg)):
        raise StudioError(NEEDS_BASE)
    if cfg.init and _is_full_base(cfg.init, cfg.workspace):
        from utils import hardware

        report = report if report is not None else hardware.detect(cfg.workspace)
        can, why = machine_verdict(report)
        if not can:
            raise StudioError(f"This machine cannot fine-tune the F5-TTS base: {why} {SMOKE_TEST}")


def machine_verdict(report) -> tuple[bool, str]:
    """Whether this machine can fine-tune the F5-TTS base (the Training tab and `app.py hardware` say it), and why."""
    from utils import hardware

    if not report.gpus:
        return False, ("no GPU: on a 2-core CPU the F5-TTS base (337 million parameters) learns from about 0.6 s of "
                       "speech a second (measured), so one learning step on a useful batch (about 7 minutes of speech) "
                       "takes ~11 minutes, and a fine-tune weeks: use a GPU (Colab's free T4 works).")
    g = min(report.gpus, key=lambda x: x.memory_gb)
    usable = g.memory_gb - hardware.RESERVED_GB - FIXED_GB
    if usable < 4:
        return False, (f"{g.name} has {g.memory_gb:.0f} GiB: the base's weights, gradients and optimizer state take "
                       f"~{FIXED_GB:.0f} GiB, too little is left for speech; use a 16 GiB GPU or larger.")
    plan = memory_plan(full_base=True)
    checkpointing = hardware.frames_that_fit(usable, plan, 1.0) < hardware.MIN_USEFUL_FRAMES
    fit = hardware.frames_that_fit(usable, plan, 2.5 if checkpointing else 1.0)
    return True, (f"{g.name}: about {fit} frames per micro-batch after ~{FIXED_GB:.0f} GiB of weights and optimizer "
                  f"state" + (", with gradient checkpointing" if checkpointing else "")
                  + ("; bf16" if g.bf16 else "; fp16 with loss scaling (this card has no bf16)"))


def memory_plan(full_base: bool, preset: str = "tiny"):
    """The batch guess's memory plan: the full-size base's fixed memory and frame cost, or a tiny random F5's."""
    from utils.hardware import MemoryPlan

    return MemoryPlan("F5-TTS base", FIXED_GB, FRAME_FACTOR) if full_base else MemoryPlan(f"F5 {preset}", 0.0, 0.1)


def _is_full_base(init: str, workspace: str) -> bool:
    """Whether `init` is a full-size base: a folder (the workspace's copy of a hub base, a run's checkpoint, a voice)
    whose weights hold about as many parameters as the public v1 Base (counted from the safetensors header, or the
    file size of a .pt; nothing is loaded). A hub base not downloaded yet counts as full size, as the public one is."""
    root = Path(workspace or ".")
    folder = Path(init).expanduser()
    folder = folder if folder.is_absolute() else root / folder
    if not folder.is_dir():
        folder = _named_folder(init, root)
        if folder is None:
            return "/" in init  # a hub id; a missing folder is refused later, naming it
    for weights in sorted(folder.glob("*.safetensors")):
        try:
            header = safetensors_header(weights)
        except (OSError, ValueError):
            continue  # unreadable: its loading names the file
        count = sum(_numel(t.get("shape", [])) for k, t in header.items() if k != "__metadata__")
        return count >= BASE_PARAMETERS
    return any(p.stat().st_size >= 2 * BASE_PARAMETERS for p in folder.glob("*.pt"))  # fp16 or larger


def _named_folder(init: str, root: Path) -> Path | None:
    """The folder a hub id (its copy in the workspace) or a run or voice name stands for, when there is one."""
    from utils.f5.hub import HubBase

    hub = HubBase.parse(init)
    if hub is not None:
        found = [root / "pretrained" / hub.folder]
    elif "/" not in init and "\\" not in init:
        found = [root / "voices" / init, *sorted((root / "runs" / init / "checkpoints").glob("step-*"))]
    else:
        found = []
    return next((f for f in found if f.is_dir() and any(f.glob("*.safetensors"))), None)


def safetensors_header(path) -> dict:
    """A .safetensors file's header: {name: {"dtype", "shape", "data_offsets"}, "__metadata__": ...}, read without
    any tensor data (8 bytes of length, then JSON). Raises OSError or ValueError for a file that is not one."""
    import json

    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        if not 0 < size <= 100 * 2**20:  # the format caps headers at 100 MB
            raise ValueError(f"{Path(path).name} has no safetensors header")
        return json.loads(f.read(size))


def _numel(shape: list) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _resumes(cfg) -> bool:
    """Whether the trainer will continue a checkpoint (whose own model then counts, not --init or --preset)."""
    from utils.training.checkpoint import resume_point
    from utils.workspace import Workspace

    if cfg.resume == "auto" and not cfg.run:
        return False  # a new run, named later: nothing to continue yet
    folder = Workspace.open(cfg.workspace).run_dir(cfg.run) / "checkpoints" if cfg.run else None
    return resume_point(cfg.resume, folder) is not None
