"""What a curator reads when something goes wrong, checked without a browser (the browser tests see the boxes)."""
import logging

import gradio as gr

from utils.events import StudioError
from utils.runs import settings
from utils.workspace import Workspace
from webui.components import says_errors


def test_an_unexpected_error_is_said_in_the_box_with_its_type_and_its_traceback_goes_to_the_log(caplog):
    with gr.Blocks():
        box, other = gr.Markdown(), gr.Markdown()

    def fill_in_the_settings():
        raise KeyError("precision")

    wrapped = says_errors(fill_in_the_settings, [box, other], box, what="Filling in the settings")
    with caplog.at_level(logging.ERROR, logger="webui"):
        said, untouched = wrapped()
    assert said.startswith("**Not done:** Filling in the settings failed on an unexpected error (KeyError: ")
    assert "The app's log" in said and untouched == gr.update()
    assert "Traceback" in caplog.text and "KeyError" in caplog.text


def test_a_refusal_is_said_in_the_box_and_logs_nothing(caplog):
    with gr.Blocks():
        box = gr.Markdown()

    def refuse():
        raise StudioError("Dataset 'news' has no row 'song'.")

    with caplog.at_level(logging.ERROR, logger="webui"):
        assert says_errors(refuse, [box], box)() == "**Not done:** Dataset 'news' has no row 'song'."
    assert "Traceback" not in caplog.text


def test_an_unreadable_settings_file_is_named_and_the_app_still_builds(tmp_path):
    """A hand-edited training_settings.json that does not parse stopped the app at start; now the Optimizations
    tab names the file and the way out, and leaves the file as the curator wrote it."""
    import pytest

    from webui.app import build_ui
    from webui.context import AppContext

    ws = Workspace.open(tmp_path / "workspace")
    for text in ("{hand-edited", "[1, 2]"):
        settings.settings_path(ws).write_text(text, encoding="utf-8")
        with pytest.raises(StudioError, match=r"training_settings\.json cannot be read .*press Reset to recommended"):
            settings.saved_settings(ws)
        build_ui(AppContext(workspace=ws, max_upload_mb=10))
        assert settings.settings_path(ws).read_text(encoding="utf-8") == text
    assert settings.default_steps(ws) == settings.recommended_steps()[0]


def test_a_toast_shows_the_words_of_a_markdown_message_without_its_marks(monkeypatch):
    import gradio as gr

    from webui.components import plain_text, says_errors

    toasts = []
    monkeypatch.setattr(gr, "Warning", lambda text, *a, **k: toasts.append(text))

    def on_start():
        raise StudioError("Run **abebe** is queued: see `train.log` on the *Training* tab, or [the guide](docs/x.md).")

    box = says_errors(on_start, ["box"], "box")()
    assert box == ("**Not done:** Run **abebe** is queued: see `train.log` on the *Training* tab, or "
                   "[the guide](docs/x.md).")  # the box renders Markdown: it keeps the marks
    assert toasts == ["Run abebe is queued: see train.log on the Training tab, or the guide."]
    assert plain_text("2 * 3 frames, ### kept") == "2 * 3 frames, ### kept"


def test_the_command_line_says_a_bad_workspace_speed_or_an_early_ctrl_c_in_words_not_a_traceback(tmp_path, capsys,
                                                                                                   monkeypatch):
    """A file given as the workspace raised NotADirectoryError, --speed 0 a ZeroDivisionError, a missing recording
    was called damaged, and Ctrl+C while torch imported printed a KeyboardInterrupt traceback: each is now a line
    that says what is wrong and what to do (or a stop's exit code)."""
    import app

    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    assert app.main(["list", "--workspace", str(a_file)]) == 2
    assert f"The workspace {a_file} is a file, not a folder" in capsys.readouterr().err
    assert a_file.read_text() == "mine"
    assert app.main(["synth", "ሰላም", "--voice", "v", "--speed", "0", "--workspace", str(tmp_path / "ws")]) == 2
    assert "The speed must be between 0.2x and 10x, not 0 (--speed)" in capsys.readouterr().err
    assert app.main(["synth", "ሰላም", "--voice", "v", "--temperature", "-3", "--workspace", str(tmp_path / "ws")]) == 2
    assert "The temperature must be between 0 and 1.5, not -3 (--temperature" in capsys.readouterr().err

    missing = tmp_path / "interview.wav"  # not "damaged or not a sound file": it is not there
    assert app.main(["separate", str(missing), str(tmp_path / "out.wav"), "--workspace", str(tmp_path / "ws")]) == 2
    assert f"interview.wav: file not found at {missing}" in capsys.readouterr().err

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(app, "torch_problem", interrupted)
    assert app.main(["list", "--workspace", str(tmp_path / "ws")]) == 130


def test_every_flag_of_every_command_says_what_it_does():
    """`prepare --help` listed --format with its choices and no word of what they were; six more flags said nothing
    (--port, --backend, --overwrite, three --dataset)."""
    import argparse

    import app

    def silent(parser, command):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from silent(sub, name)
            elif action.help is None and action.dest != "help":
                yield f"{command} {'/'.join(action.option_strings) or action.dest}"

    assert list(silent(app.build_parser(), "app.py")) == []


def test_a_progress_bar_says_whole_words():
    """The batch's bar read "...this voice needs Amharic words, numbers, ca - 75.0%": cut at 120 characters."""
    from webui.components import cut_at_word

    long = ("batch [3/4] line 00004: The text has no Amharic (Ethiopic) letters: this voice needs Amharic words, "
            "numbers, capital letters")
    said = cut_at_word(long)
    assert said.endswith("numbers, capital ...") and len(said) <= 124 and cut_at_word("short") == "short"
