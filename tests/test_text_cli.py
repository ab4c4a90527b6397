"""`python app.py g2p`: text mode and --words mode."""
import subprocess
import sys
from pathlib import Path

import app

ROOT = Path(__file__).resolve().parents[1]


def test_g2p_prints_normalized_text_and_ipa(capsys, tmp_path):
    assert app.main(["g2p", "--workspace", str(tmp_path), "ሰላም ፲፩።"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["ሰላም አስራ አንድ.", "s ə l a m | ʔ a s r a | ʔ a n d ."]


def test_g2p_words_prints_one_line_per_input_line_in_order(tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("ሰላም\nሁለተኛ\n\nሐላሚ\n", encoding="utf-8")
    run = subprocess.run([sys.executable, "app.py", "g2p", "--workspace", str(tmp_path / "ws"), "--words", str(words)],
                         cwd=ROOT, capture_output=True, text=True, encoding="utf-8")
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["ሰላም\ts ə l a m", "ሁለተኛ\th u l ə tː ə ɲː a", "\t", "ሐላሚ\th a l a m i"]


def test_g2p_words_names_a_line_that_holds_two_words(capsys, tmp_path):
    """A two-word line was printed as one word's sounds, with nothing said."""
    words = tmp_path / "words.txt"
    words.write_text("ሰላም\nሰላም ለዓለም\n", encoding="utf-8")
    assert app.main(["g2p", "--workspace", str(tmp_path / "ws"), "--words", str(words)]) == 0
    said = capsys.readouterr()
    assert said.out.splitlines()[0] == "ሰላም\ts ə l a m"
    assert "line 2 holds 2 words (ሰላም ለዓለም)" in said.err and "line 1" not in said.err


def test_g2p_uses_the_workspace_dictionary(capsys, tmp_path):
    (tmp_path / "pronunciations.tsv").write_text("ሰላም\ts a l a m\n", encoding="utf-8")
    assert app.main(["g2p", "--workspace", str(tmp_path), "ሰላም"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "s a l a m"


def test_g2p_warns_only_of_latin_words_the_dictionary_lacks(capsys, tmp_path):
    """It warned of a word it had just read from the dictionary (the G2P tab did not)."""
    (tmp_path / "pronunciations.tsv").write_text("Google\tɡ u ɡ ə l\n", encoding="utf-8")
    assert app.main(["g2p", "--workspace", str(tmp_path), "ሰላም Google Yahoo"]) == 0
    said = capsys.readouterr()
    assert "ɡ u ɡ ə l" in said.out.splitlines()[1]
    assert "Yahoo" in said.err and "Google" not in said.err


def test_g2p_reads_a_latin_word_by_its_entry_in_another_case(capsys, tmp_path):
    """An entry "Google" was not used for "google", and the warning asked for "google" to be added."""
    (tmp_path / "pronunciations.tsv").write_text("Google\tɡ u ɡ ə l\n", encoding="utf-8")
    assert app.main(["g2p", "--workspace", str(tmp_path), "ሰላም google"]) == 0
    said = capsys.readouterr()
    assert said.out.splitlines()[1] == "s ə l a m | ɡ u ɡ ə l"
    assert "google" not in said.err


def test_g2p_without_text_or_a_readable_file_is_a_user_error(capsys, tmp_path):
    assert app.main(["g2p", "--workspace", str(tmp_path)]) == 2
    assert app.main(["g2p", "--workspace", str(tmp_path), "--words", str(tmp_path / "nope.txt")]) == 2
    assert "nope.txt" in capsys.readouterr().err
