"""The UI's and the CLI's training service, one module for each thing it does:

    views     what a run has written, shaped for display (RunView, view, metrics, run_table, state_line, last_cer)
    control   starting, queueing, resuming and deleting runs (through utils/jobs.py)
    settings  the Optimizations tab's settings: saved choices, the form with each recommendation and its reason
    probe     the batch probe: the largest batch that fits, measured as a zero-step run

Deleting a dataset, told which runs were trained on it, is utils/datasets/deletion.py.
"""
