"""Tab: the Amharic text frontend. Type text and see what the model will be told to say; edit the
pronunciation dictionary that overrides the rules; convert a whole dataset's transcripts."""
from __future__ import annotations

from functools import partial

import gradio as gr

from utils.events import StudioError
from utils.text import load_user_dict, save_user_dict
from utils.text.convert import SPEAKABLE_WORDS, analyze, speakable
from utils.datasets.curate import convert_dataset
from utils.text.g2p import rules_reading
from utils.text.lexicon import dict_from_rows, entry, usable_symbols_hint
from utils.workspace import Workspace
from webui.components import dataset_pick, dataset_picker, says_errors
from webui.context import AppContext

EXAMPLE = "በ፲፰፻፹፯ ዓ.ም ዶ/ር አበበ ወደ ት/ቤት ሄዱ። 2ኛው ቀን 25 ብር ከፈሉ፤ ልጆቻቸው ደስ አላቸው!"


def _user_dict(ws: Workspace) -> dict:
    try:
        return load_user_dict(ws)
    except StudioError as exc:
        raise gr.Error(str(exc))


NOT_SPOKEN = (f"**A voice will not speak this text alone** (Speak refuses it): it has no {SPEAKABLE_WORDS}. Inside "
              "Amharic text its Latin words are read as shown here.")


def explain(ws: Workspace, text: str) -> tuple[str, str, str, str]:
    """Text -> normalized text, IPA, the symbols the model reads and how many (not their ids: a curator has no use
    for those numbers), warnings."""
    if not (text or "").strip():
        return "", "", "", "Type Amharic text above to see how it is read."
    user_dict = _user_dict(ws)
    a = analyze(text, user_dict)
    alone = [] if speakable(text, user_dict) else [NOT_SPOKEN]
    notes = "\n".join(f"- {w}" for w in alone + a.warnings + [f"not in the model's symbols: {m}" for m in a.missing])
    symbols = " ".join("|" if s == " " else s for s in a.symbols)
    if a.symbols:
        symbols += f"\n\nThe model reads {len(a.symbols)} symbols (each | between words is one)."
    return a.normalized, a.ipa, symbols, notes or "No warnings."


def dictionary_limits() -> str:
    """What the dictionary cannot do for the engines that read text their own way (each family says it)."""
    from utils import families

    notes = [(f.TITLE, f.DICTIONARY_NOTE) for f in map(families.get, families.names()) if f.DICTIONARY_NOTE]
    return "\n".join(f"**{title} voices:** {note}" for title, note in notes)


def dict_rows(ws: Workspace) -> list[list[str]]:
    return [[w, " ".join(s)] for w, s in sorted(_user_dict(ws).items())]


def save_rows(ws: Workspace, rows) -> tuple[list[list[str]], str]:
    values = rows.values.tolist() if hasattr(rows, "values") else rows
    mapping, problems = dict_from_rows(values)
    if problems:
        raise gr.Error("; ".join(problems[:5]) + f". The model can use: {usable_symbols_hint()}.")  # after "Not done:"
    before = _user_dict(ws)
    path = save_user_dict(ws, mapping)
    gone, changed = [w for w in before if w not in mapping], [w for w in mapping if w in before and before[w] != mapping[w]]
    added = [w for w in mapping if w not in before]
    what = "; ".join(f"{label} {', '.join(words[:8])}{' ...' if len(words) > 8 else ''}" for label, words in
                     (("removed", gone), ("changed", changed), ("added", added)) if words)  # a cleared row, named
    return dict_rows(ws), (f"Saved {len(mapping)} word(s) to `{path}`" + (f" ({what})" if what else " (no change)")
                           + "; training and inference use them.")


def add_word(ws: Workspace, word: str, ipa: str) -> tuple[list[list[str]], str]:
    """Save one entry at once. The message gives the segments saved (a word typed without spaces is split, "nn"
    made "nː") and the reading an entry replaced, which would otherwise be lost without a word."""
    key, segments, problem = entry(word, ipa)
    if problem:  # a sentence of its own here (in the table's check it follows "row 2 (ሰላም): ")
        raise gr.Error(problem[0].upper() + problem[1:]
                       + (f". The model can use: {usable_symbols_hint()}." if "no symbol" in problem else "."))
    current = _user_dict(ws)
    save_user_dict(ws, {**current, key: segments})
    said = f"{word.strip()} → {' '.join(segments)} saved"
    if key not in current:
        return dict_rows(ws), said + "."
    if current[key] == segments:
        return dict_rows(ws), said + " (unchanged)."
    return dict_rows(ws), said + f" (it was {' '.join(current[key])})."


def suggest(word: str) -> str:
    """The rules' reading of a word as a sentence would say it (BBC spelled), a starting point for its entry."""
    return " ".join(rules_reading(word or ""))


def fill_from_rules(word: str) -> tuple[str, str]:
    """(IPA box, dictionary line) for Fill from rules: with no word it did nothing, and an older line stayed."""
    if not (word or "").strip():
        raise StudioError("Type a word in the Word box first: Fill from rules puts the rules' reading of it beside it.")
    return suggest(word), f"{word.strip()}: the rules' reading is filled in; correct it if needed and press Add / update."


def dataset_choices(ws: Workspace, current: str | None = None):
    return dataset_pick(ws, current)


def convert(ws: Workspace, name: str, progress=gr.Progress()) -> str:
    if not name:
        raise gr.Error("Pick a dataset first.")
    summary = None
    try:
        for event in convert_dataset(ws, name):
            progress(event.fraction, desc=event.message)
            summary = event.result or summary
    except StudioError as exc:
        raise gr.Error(str(exc))
    lines = [f"**{summary['changed']} of {summary['rows']}** transcripts updated in `{name}`."]
    if summary["missing"]:
        lines.append("Symbols the phoneme vocabulary lacks (skipped): " + ", ".join(summary["missing"]))
    lines += [f"- {w}" for w in summary["warnings"][:50]]
    if len(summary["warnings"]) > 50:
        lines.append(f"... and {len(summary['warnings']) - 50} more warnings.")
    return "\n".join(lines)


def build(ctx: AppContext) -> list:
    ws = ctx.workspace
    gr.Markdown("Type Amharic to see the words a voice will say (numbers, dates and abbreviations "
                "read out), their IPA, and the symbols the model receives.")
    with gr.Row():
        text = gr.Textbox(label="Amharic text", value=EXAMPLE, lines=3, elem_id="g2p-input", scale=3)
        run = gr.Button("Show how it is read", variant="primary", elem_id="g2p-run", scale=1)
    normalized = gr.Textbox(label="Normalized text", interactive=False, elem_id="g2p-normalized")
    ipa = gr.Textbox(label="IPA (| between words)", interactive=False, elem_id="g2p-ipa")
    symbols = gr.Textbox(label="Symbols the model reads (| between words)", interactive=False, lines=2,
                         elem_id="g2p-symbols")
    notes = gr.Markdown(elem_id="g2p-warnings")

    gr.Markdown("### Pronunciation dictionary\nA word here is read exactly as written, in training and "
                "inference alike. IPA segments are separated by spaces; a geminate is written `tː`. What you "
                "type is saved as the model's own symbols (`tʃ` as `t͡ʃ`, `g` as `ɡ`, `t:` as `tː`; `bunna`, typed "
                "without spaces, as `b u nː a`).\n\n**Add / update** saves one word to the dictionary at once. To "
                "change or remove several, edit the table (clear a row to remove it) and press **Save table "
                "edits**; **Reload** shows the saved dictionary again, dropping unsaved table edits.")
    gr.Markdown(dictionary_limits(), elem_id="g2p-dict-limits")
    with gr.Row():
        word = gr.Textbox(label="Word", elem_id="g2p-dict-word")
        word_ipa = gr.Textbox(label="IPA segments", elem_id="g2p-dict-ipa")
        fill = gr.Button("Fill from rules", elem_id="g2p-dict-suggest")
        add = gr.Button("Add / update", elem_id="g2p-dict-add")
    def g2p_dictionary() -> list[list[str]]:  # re-read on every page load (its name is its API name)
        return dict_rows(ws)

    table = gr.Dataframe(value=g2p_dictionary, headers=["word", "IPA"], datatype=["str", "str"],
                         column_count=2, interactive=True, elem_id="g2p-dict-table")
    with gr.Row():
        save = gr.Button("Save table edits", elem_id="g2p-dict-save")
        reload = gr.Button("Reload (drop unsaved edits)", elem_id="g2p-dict-reload")
    dict_status = gr.Markdown(elem_id="g2p-dict-status")

    gr.Markdown("### Convert a dataset\nFills `normalized` and `phonemes` of every transcript in the "
                "dataset's manifest with the current rules and dictionary. Preparing did this already, and a run "
                "does it itself when the dictionary changed since (its log says so): convert now to see the "
                "new readings in the Dataset tab.")
    with gr.Row():
        dataset = dataset_picker(ws, elem_id="g2p-dataset")
        refresh = gr.Button("Refresh list", elem_id="g2p-dataset-refresh")
        go = gr.Button("Convert transcripts", variant="primary", elem_id="g2p-convert")
    convert_status = gr.Markdown(elem_id="g2p-convert-status")

    # a refusal is written where the curator looks (warnings, dictionary status, conversion result)
    explained = says_errors(partial(explain, ws), [normalized, ipa, symbols, notes], notes)
    run.click(explained, text, [normalized, ipa, symbols, notes], api_name="g2p_explain")
    fill.click(says_errors(fill_from_rules, [word_ipa, dict_status], dict_status), word, [word_ipa, dict_status],
               api_name="g2p_suggest")
    # the reading above is of the dictionary as it was: shown again once an entry came in (its warning asking for
    # that word's entry is then no longer true)
    shown = [normalized, ipa, symbols, notes]
    add.click(says_errors(partial(add_word, ws), [table, dict_status], dict_status), [word, word_ipa],
              [table, dict_status], api_name="g2p_dict_add").then(explained, text, shown, show_progress="hidden")
    save.click(says_errors(partial(save_rows, ws), [table, dict_status], dict_status), table, [table, dict_status],
               api_name="g2p_dict_save").then(explained, text, shown, show_progress="hidden")
    reload.click(says_errors(lambda: (dict_rows(ws), ""), [table, dict_status], dict_status), None,
                 [table, dict_status], api_name="g2p_dict_load").then(explained, text, shown, show_progress="hidden")
    refresh.click(partial(dataset_choices, ws), dataset, dataset, api_name="g2p_datasets")
    go.click(says_errors(partial(convert, ws), [convert_status], convert_status), dataset, convert_status,
             api_name="g2p_convert")
    # the example text is already in the box: show its reading at page load, not three empty boxes, unless the
    # curator typed first ("restore": dropped on an edit; answered late on a busy server, the example's reading was
    # drawn over that of the text typed and read); the dataset picker as the workspace is at page load and each time
    # the tab opens (a dataset prepared or deleted meanwhile)
    picker = (partial(dataset_choices, ws), [dataset], [dataset])
    return [(explained, [text], [normalized, ipa, symbols, notes], "restore"), picker, (*picker, "open")]
