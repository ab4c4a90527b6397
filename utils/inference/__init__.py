"""Speaking with trained voices, comparing checkpoints, batch synthesis and export.

    from utils.inference import synthesize, speak, export_voice, Voice
    wave, sr, info = synthesize(ws, "my-voice", "ሰላም ነው። እንዴት ነህ?")     # voice, run name or checkpoint
    for chunk in speak(ws, "run-1", long_text): ...                         # streamed, one chunk per batch
    export_voice(ws, "run-1", "my-voice", vocoder="runs/v/checkpoints/step-500", onnx=True)
    Voice.load("path/to/my-voice").synthesize("ሰላም")                        # outside any workspace
"""
from utils.inference.batch import read_lines, speak_file
from utils.inference.export import export_voice, same_name_note, usage_snippet, zip_voice
from utils.inference.speech import (DEFAULT_STEPS, DEFAULT_TEMPERATURE, MAX_CHARS, SAMPLE_SENTENCES, Chunk, Voice,
                                    describe, join_chunks, speak, spectrogram_image, split_sentences, synthesize,
                                    workspace_voice)
from utils.inference.voices import (DEVICES, GRIFFIN_LIM, auto_vocoder, auto_vocoder_label, best_checkpoint,
                                    default_voice, import_vocoder, list_acoustic_checkpoints, list_vocoders,
                                    list_voices, other_voice, pick_device, resolve_voice, speakers, voice_choices,
                                    voice_engine, vocoder_menu, vocoder_note, vocoder_source)

__all__ = ["read_lines", "speak_file", "export_voice", "same_name_note", "usage_snippet", "zip_voice", "DEFAULT_STEPS",
           "DEFAULT_TEMPERATURE", "MAX_CHARS", "SAMPLE_SENTENCES", "Chunk", "Voice", "describe", "join_chunks", "speak",
           "spectrogram_image", "split_sentences", "synthesize", "workspace_voice", "DEVICES", "GRIFFIN_LIM",
           "auto_vocoder", "auto_vocoder_label", "vocoder_menu", "best_checkpoint", "default_voice", "import_vocoder",
           "other_voice", "list_acoustic_checkpoints", "list_vocoders", "list_voices", "pick_device", "resolve_voice",
           "speakers", "voice_choices", "voice_engine", "vocoder_note", "vocoder_source"]
