"""The map of the suite: every test file by area, the behaviours it proves (one line a test: its name, which is a
sentence) and its time on a clean run. Writes the part of tests/README.md between its two map marks.

    python tests/map.py                                  # names only (collects the suite, ~10 s)
    python -m pytest -q --junitxml=/tmp/run.xml && python tests/map.py --junit /tmp/run.xml   # with times

Why generated: a map typed by hand goes stale at the first new test; the names already say the behaviours, and the
area of a file is one line in AREAS below (a file in no area fails the run, so a new file gets a place).
"""
from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "tests" / "README.md"
BEGIN, END = "<!-- map: begin (python tests/map.py writes this part) -->", "<!-- map: end -->"

# area: the files in it (glob patterns, first match wins); the order is the README's
AREAS = {
    "Datasets": ["test_dataset.py", "test_dataset_*.py", "test_data_dirs.py", "test_store_on_fuse.py"],
    "Text (normalizer, G2P, dictionaries, tokenizers)": ["test_text_*.py", "test_dictionary_*.py",
                                                         "test_voice_dictionary.py"],
    "Music removal": ["test_separation*.py"],
    "Transcripts (recognizer, aligner, the check)": ["test_transcripts*.py"],
    "Audio features and quality measures": ["test_audio_features.py", "test_feature_entries.py",
                                            "test_evaluation.py"],
    "Training loop, jobs and runs": ["test_training*.py", "test_jobs.py", "test_child_job.py", "test_disk_estimate.py",
                                     "test_resume_record.py", "test_cli_list.py"],
    "Machine and GPU-path structure": ["test_hardware.py", "test_environment.py", "test_gpu_*.py"],
    "Matcha (the model trained from zero)": ["test_model.py"],
    "F5-TTS": ["test_f5_*.py"],
    "MMS-TTS": ["test_mms_*.py"],
    "OmniVoice and the clip voice": ["test_omnivoice_*.py", "test_clip_voice*.py"],
    "Families behind one seam": ["test_families.py", "test_family_options.py", "test_transfer.py"],
    "Vocoder": ["test_vocoder*.py"],
    "Inference and export": ["test_inference*.py"],
    "Web UI (the app, its tabs, the page)": ["test_app_*.py", "test_ui_*.py", "test_optimizations_browser.py",
                                             "test_screenshots.py", "test_notebook.py"],
    "Faults and security": ["test_faults.py", "test_security.py", "test_path_confinement.py",
                            "test_untrusted_files.py", "test_offline.py"],
    "Benchmarks' harness": ["test_bench_harness.py"],
}


def area_of(name: str) -> str | None:
    return next((area for area, globs in AREAS.items() if any(fnmatch(name, g) for g in globs)), None)


def collected() -> list[str]:
    """Node ids of the whole suite, as pytest collects them."""
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                         cwd=ROOT, capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "::" in line]


def times(junit: Path | None) -> dict[str, float]:
    """Seconds by node id (setup, call and teardown of a test together, as junit's time counts them)."""
    if junit is None:
        return {}
    seconds = {}
    for case in ET.parse(junit).iter("testcase"):
        module = case.get("classname", "").replace(".", "/") + ".py"
        seconds[f"{module}::{case.get('name')}"] = float(case.get("time", 0))
    return seconds


def summary(path: str) -> str:
    """The first sentence of a test file's docstring: what the file is about."""
    import ast

    doc = ast.get_docstring(ast.parse((ROOT / path).read_text(encoding="utf-8"))) or ""
    first = " ".join(doc.split()).split(". ")[0].rstrip(".")
    return f": {first}" if first else ""


def behaviour(function: str) -> str:
    return function.removeprefix("test_").replace("_", " ")


def render(ids: list[str], seconds: dict[str, float]) -> str:
    by_file: dict[str, dict[str, list[str]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for node in ids:
        path, _, rest = node.partition("::")
        by_file[path][re.sub(r"\[.*\]$", "", rest.split("::")[-1])].append(node)
    homeless = [p for p in by_file if area_of(Path(p).name) is None]
    if homeless:
        raise SystemExit(f"no area for {', '.join(homeless)}: add it to AREAS in tests/map.py")
    lines, total = [], sum(seconds.get(n, 0.0) for n in ids)
    if seconds:
        lines.append(f"{len(ids)} tests in {len(by_file)} files; {total / 60:.0f} min on a clean run of "
                     f"this 2-core machine (the seconds beside each file and test are setup, call and teardown).\n")
    for area in AREAS:
        files = sorted(p for p in by_file if area_of(Path(p).name) == area)
        if not files:
            continue
        spent = sum(seconds.get(n, 0.0) for p in files for fn in by_file[p].values() for n in fn)
        lines.append(f"### {area}" + (f" ({spent:.0f} s)" if seconds else "") + "\n")
        for path in files:
            tests = by_file[path]
            own = sum(seconds.get(n, 0.0) for fn in tests.values() for n in fn)
            lines.append(f"**`{Path(path).name}`**" + (f" ({own:.0f} s)" if seconds else "") + summary(path))
            for function, nodes in tests.items():
                cases = f" ({len(nodes)} cases)" if len(nodes) > 1 else ""
                took = sum(seconds.get(n, 0.0) for n in nodes)
                lines.append(f"- {behaviour(function)}{cases}" + (f" · {took:.0f} s" if seconds and took >= 1 else ""))
            lines.append("")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--junit", type=Path, help="a junit XML of a whole run (pytest --junitxml) for the times")
    args = p.parse_args()
    text = README.read_text(encoding="utf-8")
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    README.write_text(f"{head}{BEGIN}\n{render(collected(), times(args.junit))}\n{END}{tail}", encoding="utf-8")
    print(f"wrote the map into {README.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
