"""Transcripts: find the wrong ones, draft the missing ones, and score how intelligible a voice is.

    check_transcripts(ws, name, method="auto")   generator of Events; the last carries the ranking
    load_ranking(ws, name) / decide(ws, name, row_id, action, text)   the review list and its decisions
    asr.transcribe_missing(ws, name)             machine drafts for clips without text
    asr.available(ws)                            the workspace's speech recognizer folder, or None

Modules: signals (per-clip alignment signals), ranking (score + reason), scoring (the check),
review (the saved ranking and decisions), asr (the recognizer: fetch, load, decode, drafts, CER).
"""
from utils.transcripts.review import decide, load_ranking, review_rows
from utils.transcripts.scoring import METHODS, check_transcripts

__all__ = ["METHODS", "check_transcripts", "decide", "load_ranking", "review_rows"]
