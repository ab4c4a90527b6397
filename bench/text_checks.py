"""The dataset's text checks (normalize, phonemize, flag) per row: what preparation, every edit and Re-check pay.

    python bench/text_checks.py

Three ways over the 805 sample sentences (../shared/data, each once, as a dataset's unique transcripts): the G2P
rules run for every word (no memo), the memo's first pass (38% of these words repeat), and a second pass (every
word seen, as most words of a 200k-row dataset are: Amharic text repeats its common words). Side by side, one
process, medians of --repeat.
"""
from __future__ import annotations

import argparse
import statistics
import time

import common  # puts the repository root on sys.path
from tests.helpers import sentences


def _pass(texts: list[str]) -> float:
    from utils.datasets.checks import check_text
    from utils.datasets.config import PrepareConfig

    cfg = PrepareConfig()
    t = time.perf_counter()
    for text in texts:
        check_text(text, cfg)
    return (time.perf_counter() - t) / len(texts) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    common.add_output_args(parser)
    args = parser.parse_args()
    from utils.text import g2p

    texts, memo = sentences(), g2p._ethiopic_word
    _pass(texts[:50])  # imports and the lexicon, untimed
    runs = {"rules every word": [], "memo, first pass": [], "memo, words seen": []}
    for _ in range(args.repeat):
        g2p._ethiopic_word = memo.__wrapped__
        runs["rules every word"].append(_pass(texts))
        g2p._ethiopic_word = memo
        memo.cache_clear()
        runs["memo, first pass"].append(_pass(texts))
        runs["memo, words seen"].append(_pass(texts))
    base = statistics.median(runs["rules every word"])
    rows = [{"way": way, "ms": statistics.median(times), "x": base / statistics.median(times),
             "h200k": statistics.median(times) * 200_000 / 1000} for way, times in runs.items()]
    print(common.markdown_table([("way", "way"), ("ms", "ms a row"), ("x", "speed-up"),
                                 ("h200k", "s for 200k rows")], rows))
    common.save("text_checks", {"rows": rows, "sentences": len(texts)}, out=args.out)


if __name__ == "__main__":
    main()
