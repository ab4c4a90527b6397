"""Which F5 base on the Hugging Face hub a run starts from: "owner/repo", or "owner/repo:subfolder" for a repo that
holds several models; which of its files are the model and vocab.txt; the licence its model card declares; and its
own folder in the workspace. No torch here: the CLI and `check_request` read it before anything loads.

    SWivid/F5-TTS                      the public v1 Base (F5TTS_v1_Base/model_1250000.safetensors), pretrained/f5tts-v1-base
    someone/amharic-f5:ckpts           ckpts/model_<newest step>.safetensors (else .pt) + ckpts/vocab.txt,
                                       pretrained/someone--amharic-f5--ckpts
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from utils.events import StudioError
from utils.hub import download_error, hub_offline, is_offline_error, unreachable

from utils.f5.about import HUB_ID, LICENCE

HUB_FILES = {"model": "F5TTS_v1_Base/model_1250000.safetensors", "vocab": "F5TTS_v1_Base/vocab.txt"}
DEFAULT_FOLDER = "f5tts-v1-base"  # the public base's folder since the first release: existing workspaces keep it
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
_SUBFOLDER = re.compile(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*")
WEIGHT_SUFFIXES = (".safetensors", ".pt")  # in order of preference: safetensors loads without unpickling


@dataclass(frozen=True)
class HubBase:
    repo: str
    subfolder: str = ""

    @classmethod
    def parse(cls, text: str) -> "HubBase | None":
        """"owner/repo" or "owner/repo:subfolder" -> HubBase; anything else (a path, a run name) -> None."""
        repo, _, sub = (text or "").strip().partition(":")
        sub = sub.strip("/")
        if not _REPO.fullmatch(repo) or (sub and (not _SUBFOLDER.fullmatch(sub) or ".." in sub.split("/"))):
            return None
        return cls(repo, sub)

    @property
    def is_default(self) -> bool:
        return self.repo == HUB_ID and self.subfolder in ("", Path(HUB_FILES["model"]).parent.name)

    @property
    def name(self) -> str:
        return f"{self.repo}:{self.subfolder}" if self.subfolder else self.repo

    @property
    def folder(self) -> str:
        """Its folder under workspace/pretrained/: one per repo and subfolder, so two bases never mix files."""
        if self.is_default:
            return DEFAULT_FOLDER
        return re.sub(r"[^A-Za-z0-9_.-]", "-", "--".join([*self.repo.split("/"), *self.subfolder.split("/")]).strip("-"))

    @property
    def url(self) -> str:
        return f"https://huggingface.co/{self.repo}"

    @property
    def what(self) -> str:
        """How the log and the messages name it."""
        return f"the F5-TTS base {self.repo}" if self.is_default else f"the F5 base {self.name}"


def pick_weights(names) -> str | None:
    """The model file among `names`: .safetensors over .pt, then the newest (a name with "last", else the largest
    step number: model_1250000 over model_500000), then the first by name. None when there is none."""
    def newest(name: str):
        stem = Path(name).stem.lower()
        steps = re.findall(r"\d+", stem)
        return ("last" in stem, int(steps[-1]) if steps else -1, [-ord(c) for c in name])

    for suffix in WEIGHT_SUFFIXES:
        found = [n for n in names if n.endswith(suffix)]
        if found:
            return max(found, key=newest)
    return None


# ---------------------------------------------------------------------------------- its files
def base_files(hub: HubBase) -> tuple[str, str, float | None]:
    """(the model file's path in the repo, vocab.txt's, the model's size in MB when known), from the repo's listing
    (online) or the hub's local cache (offline)."""
    from utils.f5.about import SIZE_MB

    if hub.is_default:
        return HUB_FILES["model"], HUB_FILES["vocab"], SIZE_MB
    files = _listing(hub)
    prefix = f"{hub.subfolder}/" if hub.subfolder else ""
    model = pick_weights(files)
    if model is None or f"{prefix}vocab.txt" not in files:
        found = ", ".join(sorted(Path(f).name for f in files)[:12]) or "no file"
        raise StudioError(f"{hub.name} is not an F5 base: its folder on the hub ({hub.url}) needs a model file "
                          f"(.safetensors or .pt) and vocab.txt side by side, and holds {found}. Name the folder that "
                          "holds them as owner/repo:folder.")
    size = files[model]
    return model, f"{prefix}vocab.txt", size / 2**20 if size else None


def _listing(hub: HubBase) -> dict[str, int | None]:
    """{path in the repo: size in bytes} of the files directly in the base's folder."""
    if not _offline():
        from huggingface_hub import HfApi
        from huggingface_hub.hf_api import RepoFile

        try:
            return {f.path: f.size for f in HfApi().list_repo_tree(hub.repo, path_in_repo=hub.subfolder or None)
                    if isinstance(f, RepoFile)}
        except Exception as exc:
            if not is_offline_error(exc):
                raise download_error(f"the list of files of {hub.name}", exc, _check_name(hub)) from exc
    files = _cached_listing(hub)
    if not files:
        raise unreachable(hub.what, offline_remedy(hub))
    return files


def _cached_listing(hub: HubBase) -> dict[str, int]:
    """The files the hub's local cache holds for the base's folder (its main revision), as `_listing` gives them."""
    snapshot = _cached_snapshot(hub.repo)
    folder = snapshot / hub.subfolder if snapshot else None
    if folder is None or not folder.is_dir():
        return {}
    prefix = f"{hub.subfolder}/" if hub.subfolder else ""
    return {prefix + p.name: p.resolve().stat().st_size for p in folder.iterdir() if p.is_file()}


def _cached_snapshot(repo: str) -> Path | None:
    from huggingface_hub import constants

    cached = Path(constants.HF_HUB_CACHE) / f"models--{repo.replace('/', '--')}"
    ref = cached / "refs" / "main"
    return cached / "snapshots" / ref.read_text().strip() if ref.is_file() else None


def _offline() -> bool:
    from huggingface_hub import constants

    return hub_offline() or constants.is_offline_mode()


def _check_name(hub: HubBase) -> str:
    return f"check the name at {hub.url} (owner/repo, or owner/repo:folder for a repo holding several models)"


def obtainable(root: Path) -> tuple[bool, str]:
    """Whether a run can start from the public base: a model file in its workspace folder, the hub's cache, or the
    hub reachable; (False, what to do) otherwise."""
    from utils.hub import hub_reachable

    hub = HubBase(HUB_ID)
    if any((Path(root) / "pretrained" / hub.folder).glob("*.safetensors")) or _cached_snapshot(hub.repo) \
            or hub_reachable():
        return True, ""
    return False, str(unreachable(hub.what, offline_remedy(hub)))


def offline_remedy(hub: HubBase) -> str:
    files = ("its model file and vocab.txt" if not hub.is_default
             else "its " + " and ".join(Path(name).name for name in HUB_FILES.values()))
    return (f"copy {files} from a machine that has them into the workspace's pretrained/{hub.folder}/ folder, "
            f"where every F5 run {'' if hub.is_default else f'with --init {hub.name} '}looks first, and start again")


# ---------------------------------------------------------------------------------- its licence
def base_licence(hub: HubBase) -> str:
    """The licence the curator says yes to before the download: the public base's (LICENCE), else the one the repo's
    model card declares (its `license:`), read from the hub, or offline from the hub's cache. A card that cannot be
    read is said so, with where to read it: the refusal then still names the repo."""
    if hub.is_default:
        return LICENCE
    declared = None
    if not _offline():
        from huggingface_hub import HfApi

        try:
            card = HfApi().model_info(hub.repo).card_data
            declared = _declared(card.to_dict() if card else {}) or ""
        except Exception as exc:
            if not is_offline_error(exc):
                raise download_error(f"the model card of {hub.repo}", exc, _check_name(hub)) from exc
    if declared is None:
        declared = _cached_card_licence(hub.repo)
    if declared is None:
        return (f"the licence of {hub.repo} could not be read on this machine (the hub cannot be reached): the model "
                f"card at {hub.url} says it; read it there before saying yes")
    if not declared:
        return f"no licence declared by the model card of {hub.repo}: read {hub.url} before using its weights"
    return f"{declared}, as the model card of {hub.repo} declares ({hub.url})"


def _declared(data: dict) -> str:
    licence = data.get("license") or ""
    licence = ", ".join(map(str, licence)) if isinstance(licence, list) else str(licence)
    if licence == "other" and (data.get("license_name") or data.get("license_link")):
        licence = f"other: {data.get('license_name') or data.get('license_link')}"
    return licence


def _cached_card_licence(repo: str) -> str | None:
    """The `license:` of the model card in the hub's cache ("" when it declares none); None when none is cached."""
    snapshot = _cached_snapshot(repo)
    readme = snapshot / "README.md" if snapshot else None
    if readme is None or not readme.is_file():
        return None
    from huggingface_hub import ModelCard

    try:
        return _declared(ModelCard.load(readme, ignore_metadata_errors=True).data.to_dict())
    except Exception:  # a card whose front matter is not YAML: as good as none cached
        return None


def refusal(hub: HubBase, licence: str | None = None) -> str:
    """Why nothing is downloaded without a yes, naming the base and its licence."""
    from utils.f5.about import SIZE_MB

    ask = ("say yes to the licence (--accept-licence on the command line, the licence box on the Training tab) to "
           "go on.")
    if hub.is_default:
        return f"{LICENCE}. Fine-tuning starts by downloading about {SIZE_MB} MB of these weights: {ask}"
    return (f"{hub.name}: {licence or base_licence(hub)}. Fine-tuning from it starts by downloading its model file and "
            f"vocab.txt: {ask}")
