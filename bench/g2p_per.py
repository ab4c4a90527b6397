"""Phoneme error rate of the Amharic G2P against WikiPron (Wiktionary) pronunciations.

    python bench/g2p_per.py                                   # dev set in tests/fixtures
    python bench/g2p_per.py --data ../shared/data/wikipron_amh_dev.tsv --errors 20
    PYTHONPATH=/tmp/epi python bench/g2p_per.py               # with the epitran baseline

Baselines run when present: espeak-ng (`espeak-ng -v am --ipa`) and epitran `amh-Ethi-pp`
(not a dependency of the app; `pip install --target /tmp/epi epitran` and put it on PYTHONPATH).
Missing ones print "not installed".

Scoring: PER = total edit distance / total reference segments, one item per TSV row.
Strict compares segments as written. Lenient normalizes conventions on both sides: ɾ = r,
word-initial ʔ optional (dropped), Cʷ = C w, a doubled consonant (t t) = tː. "No gemination"
also drops ː. `--no-lexicon-overlap` re-scores with the gemination-lexicon entries that occur in
the evaluated list removed, to show how much the rules alone carry.
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import time
from pathlib import Path

import common  # bench/common.py (the script's folder is on sys.path); puts the repository root there too
from utils.text import lexicon
from utils.text.g2p import word_to_ipa
from utils.text.normalize import fold

ROOT = common.ROOT

MODIFIERS = set("ʼʷːʰʲ`ˀ")


def segment_ipa(s: str, untied_affricates: bool = False) -> list[str]:
    """Split an IPA string into segments: a base letter plus its modifiers and tie-bar partner."""
    s = s.replace("`", "ʼ").replace("ˈ", "").replace("ˌ", "").replace("'", "ʼ")
    out: list[str] = []
    i = 0
    while i < len(s):
        ch = s[i]
        if ch.isspace() or ch in "_-.":
            i += 1
            continue
        if out and (ch in MODIFIERS or ch == "\u0361" or out[-1].endswith("\u0361")):
            out[-1] += ch
        elif out and untied_affricates and (out[-1], ch) in (("t", "ʃ"), ("d", "ʒ"), ("t", "s")):
            out[-1] += "\u0361" + ch   # espeak writes affricates without the tie bar
        else:
            out.append(ch)
        i += 1
    return out


def lenient(segs: list[str], geminate: bool = True) -> list[str]:
    out: list[str] = []
    for s in segs:
        s = s.replace("ɾ", "r")
        if "ʷ" in s:
            out += [s.replace("ʷ", ""), "w"]
        else:
            out.append(s)
    merged: list[str] = []
    for s in out:
        if merged and s == merged[-1] and s not in "əuiaeɨo":
            merged[-1] = s + "ː"
        else:
            merged.append(s)
    if merged and merged[0] == "ʔ":
        merged = merged[1:]
    if not geminate:
        merged = [s.replace("ː", "") for s in merged]
    return merged


def distance(a: list[str], b: list[str]) -> int:
    """Edit distance over phoneme lists (the same Levenshtein the transcript checks use on characters)."""
    from utils.transcripts.cer import edit_distance

    return edit_distance(a, b)


def per(pairs, mode: str) -> float:
    err = ref = 0
    for hyp, gold in pairs:
        if mode == "strict":
            h, g = hyp, gold
        else:
            h, g = lenient(hyp, mode == "lenient"), lenient(gold, mode == "lenient")
        err += distance(h, g)
        ref += len(g)
    return err / max(ref, 1)


def ours(word: str) -> list[str]:
    return word_to_ipa(fold(word))


def espeak(word: str) -> list[str]:
    out = subprocess.run(["espeak-ng", "-v", "am", "--ipa", "-q", word], capture_output=True, text=True).stdout
    return [{"β": "b"}.get(x, x) for x in segment_ipa(out.strip(), untied_affricates=True)]  # β: its allophone of b


def epitran_system():
    try:
        import epitran
    except ImportError:
        return None
    e = epitran.Epitran("amh-Ethi-pp")
    return lambda w: [s for s in e.trans_list(w) if s.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT / "tests/fixtures/wikipron_amh_dev.tsv"))
    ap.add_argument("--errors", type=int, default=0, help="print this many of our worst words")
    ap.add_argument("--no-lexicon-overlap", action="store_true",
                    help="drop gemination-lexicon words that occur in the data before scoring")
    ap.add_argument("--json", metavar="FILE", help="also save the table as JSON")
    common.add_output_args(ap)
    args = ap.parse_args()

    rows = [l.split("\t") for l in Path(args.data).read_text(encoding="utf-8").splitlines() if "\t" in l]
    items = [(w.strip(), g.split()) for w, g in rows]
    if args.no_lexicon_overlap:
        words = {fold(w) for w, _ in items}
        lex = lexicon.gemination_lexicon()
        dropped = [w for w in list(lex) if w in words]
        for w in dropped:
            del lex[w]
        print(f"removed {len(dropped)} lexicon entries that occur in the data: {' '.join(dropped)}")

    systems = {"ours (utils.text)": ours}
    systems["espeak-ng am"] = espeak if shutil.which("espeak-ng") else None
    systems["epitran amh-Ethi-pp"] = epitran_system()
    table = {}
    print(f"{len(items)} words from {args.data}")
    print(f"{'system':<22} {'strict':>8} {'lenient':>8} {'no-gem':>8} {'words/s':>8}")
    for name, fn in systems.items():
        if fn is None:
            print(f"{name:<22} not installed")
            continue
        t0 = time.perf_counter()
        pairs = [(fn(w), g) for w, g in items]
        dt = (time.perf_counter() - t0) / len(items)
        scores = {m: per(pairs, m) for m in ("strict", "lenient", "nogem")}
        table[name] = {**scores, "seconds_per_word": dt, "words_per_s": 1 / dt}
        print(f"{name:<22} {scores['strict']:8.3f} {scores['lenient']:8.3f} {scores['nogem']:8.3f} {1 / dt:8.0f}")
        if name.startswith("ours") and args.errors:
            worst = sorted(((distance(lenient(h), lenient(g)), w, h, g) for (h, g), (w, _) in zip(pairs, items)),
                           reverse=True)[: args.errors]
            for d, w, h, g in worst:
                print(f"    {d}  {w}\t{' '.join(h)}\t| gold {' '.join(g)}")
    machine = f"{platform.node()} {platform.machine()} {platform.processor() or ''} Python {platform.python_version()}"
    print(f"machine: {machine}")
    if args.json:
        Path(args.json).write_text(json.dumps({"data": args.data, "machine": machine, "table": table}, indent=2))

    def draw(fig):
        ax = fig.subplots()
        names = list(table)
        for i, mode in enumerate(("strict", "lenient", "nogem")):
            ax.bar([j + 0.27 * (i - 1) for j in range(len(names))], [table[n][mode] for n in names], 0.27, label=mode)
        ax.set_xticks(range(len(names)), [f"{n}\n{table[n]['words_per_s']:,.0f} words/s" for n in names], fontsize=8)
        ax.set_ylabel("phoneme error rate")
        ax.legend(fontsize=8)

    common.save("g2p_per", {"data": args.data, "no_lexicon_overlap": args.no_lexicon_overlap, "words": len(items),
                            "table": table}, draw, args.out)


if __name__ == "__main__":
    main()
