"""Bases made here for the transfer proof, one a family, and the fine-tune set against the same model from random
weights (bench/transfer.py prints the curves, tests/test_transfer.py asserts them).

A base is trained through the studio's own training (`prepare_run` / `run`) on espeak-ng speech of other languages
(tests/transfer_data.py), then saved in the layout its family's users download (`save_as_published`), so the
fine-tune reads it through the same loader as a downloaded base. The two starts of a comparison differ in their
weights only: the same Amharic clips, held-out sentences, steps, settings ("auto" wherever the studio decides) and
vocoder (Griffin-Lim, so that no vocoder trained on one side helps it).
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from utils.training import TrainConfig, prepare_run, run
from utils.workspace import Workspace, read_json, read_jsonl

BASE_DATA, AMHARIC = "other", "am"  # the datasets' names in a transfer workspace


@dataclass(frozen=True)
class Size:
    """How large and how long: `tiny` for the tests and `--quick`, `full` for the real sizes on a GPU."""
    preset: str                 # Matcha's model size; F5's from zero (the real F5 size is the public base's, 337 M)
    base_clips: int             # other-language clips the base learns from (+ base_val held out)
    base_val: int
    base_steps: dict            # {family: steps}: F5 from zero learns more slowly than Matcha
    clips: int                  # Amharic clips to fine-tune on (+ val held out)
    val: int
    frames: int | str           # mel frames a batch ("auto": the machine's)
    eval_clips: int = 4
    sample_steps: int = 4       # sampler steps at each evaluation
    base_frames: int | str = "auto"
    hub: bool = False           # F5 and MMS: their published base (downloaded once by the studio), not one made here


SIZES = {
    "test": Size("tiny", base_clips=24, base_val=3, base_steps={"matcha": 40, "f5": 40, "mms": 300, "omnivoice": 150}, clips=8, val=2, frames=400,
                 eval_clips=2, sample_steps=2, base_frames=400),
    "tiny": Size("tiny", base_clips=48, base_val=6, base_steps={"matcha": 300, "f5": 1500, "mms": 300, "omnivoice": 600},
                 clips=24, val=4, frames=1500, base_frames=1500),
    # a GPU: Matcha's base size trained here; F5 v1 Base (337 M, Chinese and English: Amharic is new to it) and
    # Meta's Amharic MMS-TTS from the hub against random weights of their sizes (a 337 M F5 is not trained from zero)
    "full": Size("base", base_clips=2000, base_val=40, base_steps={"matcha": 20_000}, clips=400, val=20,
                 frames="auto", eval_clips=8, sample_steps=10, hub=True),
}

HUB = {"f5": "SWivid/F5-TTS", "mms": "facebook/mms-tts-amh", "omnivoice": "k2-fsa/OmniVoice"}  # the full size's
# what a base's own training sets besides the Transfer's schedule: MMS (which only fine-tunes, at 2e-5) learns from
# random weights at VITS's own pretraining rate
# and OmniVoice (fine-tuned at the recipe's 1e-5) at a rate that moves a small model from random weights
PRETRAIN = {"mms": {"lr": 2e-4}, "omnivoice": {"lr": 5e-4}}
# what an evaluation scores a comparison by: held-out MCD, but for OmniVoice, whose tiny codec's codebooks are random
# (its decoded sound says little), the held-out loss of its masked audio tokens (the codec is the same on both sides)
SCORE = {"omnivoice": "val_loss"}
TEST_RUNS = dict(evaluations=1, ema_decay=0)  # the tests' fine-tunes: one evaluation at the end, no average to score


@dataclass
class Transfer:
    """One family's experiment in one workspace: its base (made once, kept), its two starts."""
    family: str
    ws: Workspace
    size: Size
    log: list = field(default_factory=list)

    # ------------------------------------------------------------------------------ the base
    def base_folder(self) -> Path:
        return self.ws.root / "pretrained" / f"transfer-{self.family}-{self.size.preset}-{self.steps}"

    def base(self) -> Path | str:
        """The base in its published layout, trained here the first time it is asked for (kept in the workspace); at
        the full size F5's and MMS's hub id (the first fine-tune downloads it, the licence accepted)."""
        if self.from_hub:
            return HUB[self.family]
        folder = self.base_folder()
        if not (folder / "DONE").is_file():
            result = run(prepare_run(self.config(self.base_data(), self.base_run(), steps=self.steps, init=self.scratch_init(),
                                                 frames=self.size.base_frames, evaluations=2,
                                                 **PRETRAIN.get(self.family, {}))))
            if result["state"] != "finished":
                raise RuntimeError(f"the {self.family} base did not train: {result.get('message')}")
            shutil.rmtree(folder, ignore_errors=True)
            save_as_published(self.family, Path(result["last_checkpoint"]), folder)
            (folder / "DONE").write_text(str(self.base_mcd()))
        return folder

    @property
    def from_hub(self) -> bool:
        return self.size.hub and self.family in HUB

    def published(self) -> Path:
        """The folder of the base's published files: made here, or the hub's copy in the workspace."""
        if not self.from_hub:
            return self.base_folder()
        if self.family == "f5":
            from utils.f5.base import HubBase, pretrained_dir

            return pretrained_dir(self.ws, HubBase.parse(HUB["f5"]))
        if self.family == "omnivoice":
            from utils.omnivoice.base import pretrained_dir as omnivoice_dir

            return omnivoice_dir(self.ws)
        from utils.mms.base import pretrained_dir

        return pretrained_dir(self.ws)

    def base_data(self) -> str:
        """The other languages' clips, under one speaker's name for MMS (it adapts one voice, as Meta's base is);
        for OmniVoice with a reference clip of 3-20 s besides."""
        if self.family == "omnivoice":
            from tests.transfer_data import with_reference_clip

            return with_reference_clip(self.ws, BASE_DATA, BASE_DATA + "-ref")
        if self.family != "mms":
            return BASE_DATA
        from tests.transfer_data import as_one_speaker

        return as_one_speaker(self.ws, BASE_DATA, BASE_DATA + "-one")

    def amharic_data(self) -> str:
        """The Amharic clips; for OmniVoice, which speaks in the voice of a 3-20 s clip, with one such clip added."""
        if self.family != "omnivoice":
            return AMHARIC
        from tests.transfer_data import with_reference_clip

        return with_reference_clip(self.ws, AMHARIC, AMHARIC + "-ref")

    @property
    def steps(self) -> int:
        return self.size.base_steps[self.family]

    def base_run(self) -> str:
        return f"base-{self.family}-{self.size.preset}-{self.steps}"

    def base_mcd(self) -> float | None:
        """The base's own held-out score (other languages) at its last evaluation; None for the hub's."""
        return None if self.from_hub else last_mcd(self.ws.run_dir(self.base_run()), self.score)

    @property
    def score(self) -> str:
        return SCORE.get(self.family, "mcd")

    # ------------------------------------------------------------------------------ the two starts
    def config(self, dataset: str, name: str, steps: int, init: str = "", frames=None, evaluations: int = 4,
               **settings) -> TrainConfig:
        """A run of this family with the studio's own choices ("auto") but for the schedule and the evaluation's
        size; `settings` override (the tests' small batches, a sabotage)."""
        s = self.size
        every = max(1, steps // evaluations)
        if self.family == "mms":  # it batches clips: "auto" is 4 a step on a CPU, the recipe's 16 on a GPU
            frames = "auto"
        return TrainConfig.from_dict({
            "workspace": str(self.ws.root), "dataset": dataset, "run": name, "engine": self.family,
            "preset": s.preset, "init": init, "max_steps": steps, "eval_every": every, "early_evals": "none",
            "checkpoint_every": steps, "keep_checkpoints": 1, "log_every": max(1, every // 2), "resume": "none",
            "mcd": "logmel", "eval_vocoder": "griffin-lim", "eval_clips": s.eval_clips, "sample_clips": 0,
            "ode_steps": s.sample_steps, "patience": 0,
            "max_frames_per_batch": s.frames if frames is None else frames, **settings})

    def start(self, name: str, pretrained: bool, steps: int, cli: bool = False, **settings) -> list[tuple[int, float]]:
        """Fine-tune the base (`pretrained`) or the same model from random weights on the Amharic clips; the
        held-out MCD curve [(step, dB)], step 0 included for the base. `cli`: as a curator types it, `app.py train
        --engine FAMILY --init FOLDER ...` in a process of its own (else `prepare_run` / `run` in this one)."""
        init = str(self.base()) if pretrained else self.scratch_init()
        if pretrained and self.from_hub:
            settings = {"licence_accepted": "yes (bench/transfer.py --size full)", **settings}
        cfg = self.config(self.amharic_data(), name, steps, init=init, **settings)
        shutil.rmtree(self.ws.run_dir(name), ignore_errors=True)  # a run of that name before (the bench's cache)
        if cli:
            from tests.helpers import cli as app

            hub = ["--accept-licence"] if cfg.licence_accepted else []
            done = app("--workspace", str(self.ws.root), "train", *flags(cfg), *hub, timeout=24 * 3600)
            if done.returncode != 0:
                raise RuntimeError(f"{name} did not finish:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        else:
            result = run(prepare_run(cfg))
            if result["state"] != "finished":
                raise RuntimeError(f"{name} did not finish: {result.get('message')}")
        return curve(self.ws.run_dir(name), self.score)

    def scratch_init(self) -> str:
        """What "random weights" starts from: nothing for a family trained from zero (Matcha, a tiny F5); for MMS,
        which only fine-tunes, a random VITS of the base's sizes in the published layout (its base starts there too)."""
        if self.from_hub:
            return str(random_like(self.family, self.published(), self.ws.root / "pretrained" / f"random-{self.family}"))
        if self.family not in ("mms", "omnivoice"):
            return ""
        folder = self.ws.root / "pretrained" / f"transfer-{self.family}-random"
        if not (folder / "config.json").is_file():
            if self.family == "mms":
                from tests.mms_fixtures import tiny_base

                tiny_base(folder)
            else:
                from utils.omnivoice.tiny import write_tiny_base

                write_tiny_base(folder)
        return str(folder)

    def symbols(self, name: str) -> tuple[list[str], list[str], "torch.Tensor"]:
        """(the base's symbols, the run's, the cosine of each base symbol's text-table row at the run's last
        checkpoint to its row in the base): what the base knew of the symbols Amharic shares, after the fine-tune."""
        import torch

        base_symbols, base_table = published_table(self.family, self.published())
        last = max((self.ws.run_dir(name) / "checkpoints").glob("step-*"), key=lambda p: int(p.name[5:]))
        symbols, table = checkpoint_table(last)
        known = range(len(base_symbols))
        cos = torch.nn.functional.cosine_similarity(table[[FIRST_ROW[self.family] + i for i in known]].float(),
                                                    base_table[[FIRST_ROW[self.family] + i for i in known]].float())
        return base_symbols, symbols, cos


ALWAYS = ("dataset", "run", "engine", "preset", "max_steps", "eval_every", "resume")  # the command line's own defaults
# for these are the Training tab's for this machine


def flags(cfg: TrainConfig) -> list[str]:
    """`app.py train` flags for every setting of `cfg` that differs from the command line's default ("auto" stays
    unsaid: the command line decides it as Start does)."""
    from utils.training.config import cli_fields

    given = {**cfg.to_dict(), **cfg.to_dict()["options"]}
    out = []
    for name, default, _, _ in cli_fields():
        value = given.get(name)
        if name in ALWAYS or name in given and value != default and value not in ("", None, "auto"):
            out += [f"--{name.replace('_', '-')}", str(value)]
    return out


def curve(run_dir: Path, score: str = "mcd") -> list[tuple[int, float]]:
    """[(step, held-out score)] of a run's evaluations: its MCD, or `score`."""
    return [(int(r["step"]), float(r[score])) for r in read_jsonl(run_dir / "metrics.jsonl") if score in r]


def last_mcd(run_dir: Path, score: str = "mcd") -> float | None:
    points = curve(run_dir, score) if (run_dir / "metrics.jsonl").is_file() else []
    return points[-1][1] if points else None


# ---------------------------------------------------------------------------------- text tables
TABLES = {"matcha": "encoder.emb.weight", "f5": "transformer.text_embed.text_embed.weight",
          "mms": "text_encoder.embed_tokens.weight", "omnivoice": "llm.embed_tokens.weight"}  # in a checkpoint
FIRST_ROW = {"matcha": 0, "f5": 1, "mms": 0, "omnivoice": 0}  # the row of the first symbol (F5's row 0 is a filler)


def published_table(family: str, folder: Path) -> tuple[list[str], "torch.Tensor"]:
    """A base's symbols and text table, read from its published files."""
    from safetensors.torch import load_file

    if family == "f5":
        from utils.f5.base import vocab_symbols

        weights = load_file(str(next(folder.glob("model_*.safetensors"))))
        return vocab_symbols(folder / "vocab.txt"), weights["ema_model." + TABLES["f5"]]
    if family == "mms":
        vocab = read_json(folder / "vocab.json")
        return sorted(vocab, key=vocab.get), load_file(str(folder / "model.safetensors"))[TABLES["mms"]]
    if family == "omnivoice":
        return byte_tokens(folder), load_file(str(folder / "model.safetensors"))[TABLES["omnivoice"]]
    return checkpoint_table(folder)


def byte_tokens(base: Path) -> list[str]:
    """An OmniVoice base's text tokens by id (its tokenizer.json): bytes and pieces, the same for every language."""
    vocab = read_json(base / "tokenizer.json")["model"]["vocab"]
    return sorted(vocab, key=vocab.get)


def checkpoint_table(folder: Path) -> tuple[list[str], "torch.Tensor"]:
    """A checkpoint's symbols and text table (the family read from its config.json)."""
    from utils.training.checkpoint import load_weights

    config = read_json(folder / "config.json")
    family = config.get("engine", "matcha")
    if family == "omnivoice":  # its text is read by the base's own tokenizer
        from utils.omnivoice.base import base_of

        return byte_tokens(base_of(folder, config)), load_weights(folder)[TABLES[family]]
    text = config.get("text") or config["frontend"]
    symbols = sorted(text["vocab"], key=text["vocab"].get) if "vocab" in text else text["symbols"]
    return symbols, load_weights(folder)[TABLES[family]]


# ---------------------------------------------------------------------------------- published layouts
def save_as_published(family: str, checkpoint: Path, folder: Path) -> Path:
    """A checkpoint of this studio rewritten as its family's users get a base: F5's model file of EMA weights and
    vocab.txt (SWivid/F5-TTS); a Matcha checkpoint is its own published form (the studio's folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    if family == "f5":
        _f5_layout(checkpoint, folder)
    elif family == "mms":
        _mms_layout(checkpoint, folder)
    elif family == "omnivoice":
        _omnivoice_layout(checkpoint, folder)
    else:
        for name in ("model.safetensors", "config.json"):
            shutil.copy2(checkpoint / name, folder / name)
    return folder


def _f5_layout(checkpoint: Path, folder: Path) -> None:
    from safetensors.torch import save_file

    from utils.f5.base import model_weights
    from utils.training.checkpoint import load_weights

    weights = model_weights(load_weights(checkpoint))
    save_file({f"ema_model.{k}": v.contiguous() for k, v in weights.items()}, str(folder / "model_last.safetensors"))
    symbols = read_json(checkpoint / "config.json")["text"]["symbols"]
    (folder / "vocab.txt").write_text("\n".join(symbols) + "\n", encoding="utf-8")
    (folder / "LICENSE.txt").write_text("Source: tests/transfer_bases.py\nLicence: made here from espeak-ng speech "
                                        "(GPL-3.0 voices); no third-party weights\n", encoding="utf-8")


def _mms_layout(checkpoint: Path, folder: Path) -> None:
    """facebook/mms-tts-amh's files (transformers' VitsModel: config.json, model.safetensors; vocab.json,
    tokenizer_config.json with is_uroman) and facebook/mms-tts's discriminator as VITS's train.py saves it
    (D_<step>.pth, the old weight-norm names)."""
    import json

    import torch
    from transformers import VitsConfig, VitsModel

    from utils.safeload import load_safetensors, load_torch_plain

    config = read_json(checkpoint / "config.json")
    model = VitsModel(VitsConfig(**{k: v for k, v in config["model"].items() if k != "transformers_version"}))
    model.load_state_dict(load_safetensors(checkpoint / "model.safetensors"))
    model.save_pretrained(folder)
    text = config["text"]
    (folder / "vocab.json").write_text(json.dumps(text["vocab"]), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "add_blank": text["add_blank"], "is_uroman": True, "language": "amh", "normalize": text["lowercase"],
        "phonemize": False, "pad_token": next(iter(text["vocab"])), "unk_token": "<unk>",
        "tokenizer_class": "VitsTokenizer"}), encoding="utf-8")
    ours = load_torch_plain(checkpoint / "trainer_state.pt")["modules"]["discriminator"]
    original = {k.replace(".post.", ".conv_post.").replace("parametrizations.weight.original0", "weight_g")
                .replace("parametrizations.weight.original1", "weight_v"): v for k, v in ours.items()}
    torch.save({"model": original, "iteration": config["step"], "learning_rate": 2e-4}, folder / "D_100000.pth")
    (folder / "LICENSE.txt").write_text("Source: tests/transfer_bases.py\nLicence: made here from espeak-ng speech "
                                        "(GPL-3.0 voices); no third-party weights\n", encoding="utf-8")


def _omnivoice_layout(checkpoint: Path, folder: Path) -> None:
    """k2-fsa/OmniVoice's files: the base the run started from (its text tokenizer, its codec in audio_tokenizer/),
    the model's config.json and model.safetensors written again from the run's weights, as the package saves them."""
    from utils.omnivoice.base import base_of, load_package_model
    from utils.training.checkpoint import load_weights

    start = base_of(checkpoint, read_json(checkpoint / "config.json"))
    shutil.copytree(start, folder, dirs_exist_ok=True)
    load_package_model(start, weights=load_weights(checkpoint), for_training=True).save_pretrained(folder)
    (folder / "LICENSE").write_text("Source: tests/transfer_bases.py\nLicence: made here from espeak-ng speech "
                                    "(GPL-3.0 voices); no third-party weights\n", encoding="utf-8")


def random_like(family: str, base: Path, folder: Path) -> Path:
    """Random weights of `base`'s architecture in its published layout (its vocabulary files copied): the scratch
    start of a full-size comparison, where the base is the hub's."""
    import torch

    if (folder / "DONE").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    if family == "f5":
        from safetensors.torch import save_file

        from models.f5 import F5TTS, PRESETS
        from models.f5_checkpoint import public_state_dict
        from utils.f5.base import _config_of
        from utils.f5.hub import pick_weights

        weights = public_state_dict(base / pick_weights([p.name for p in base.iterdir()]))
        model = F5TTS(_config_of(weights, PRESETS, type(PRESETS["tiny"])))
        save_file({f"ema_model.{k}": v.contiguous() for k, v in model.state_dict().items()},
                  str(folder / "model_random.safetensors"))
        shutil.copy2(base / "vocab.txt", folder / "vocab.txt")
    elif family == "omnivoice":  # the model's files anew; its text tokenizer and codec (never trained) copied
        from utils.omnivoice.runtime import activate

        activate()
        from omnivoice import OmniVoice, OmniVoiceConfig

        shutil.copytree(base, folder, dirs_exist_ok=True)
        OmniVoice(OmniVoiceConfig.from_pretrained(base)).save_pretrained(folder)
    else:
        from transformers import VitsConfig, VitsModel

        VitsModel(VitsConfig.from_pretrained(base)).save_pretrained(folder)
        for name in ("vocab.json", "tokenizer_config.json"):
            shutil.copy2(base / name, folder / name)
    (folder / "LICENSE.txt").write_text("Source: tests/transfer_bases.py\nLicence: random weights, no training\n",
                                        encoding="utf-8")
    (folder / "DONE").write_text("random")
    return folder
