"""Backend service layer: plain Python, no Gradio. The UI and the CLI both call these modules.

Before torch loads (it reads it once): how long an idle OpenMP thread spins before it sleeps. libgomp's 300,000 spins
keep each of a process's threads on a core between two ops; where another program (or a second training, or the
browser) wants a core too, the spinning threads take it and each op waits for the one preempted. On 2 cores a tiny
Matcha step took 14.4 s instead of 0.29 with two trainings at once, and 0.9 s beside one busy core; at 1,000 spins
0.51 and 0.51 s, for 4 % more when the machine is quiet (`python bench/cpu_sharing.py`, bench/RESULTS.md). A value
the user set is kept.
"""
import os

os.environ.setdefault("GOMP_SPINCOUNT", "1000")
