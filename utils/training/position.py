"""Where a run is in its data, for resume: the next (epoch, batch) of its batch sampler, and the batch sizes that the
order of batches depends on. A resumed run reads on from there with the sizes it had, so its curve goes on as one
uninterrupted run's would (the tests compare them step by step).

    class MyAdapter(DataPosition):      # self.data yields batches with "pos": (epoch, batch); self.machine, self.cfg
        KEPT = ("max_frames_per_batch",)  # the sizes kept (default: micro-batch and accumulation)
"""
from __future__ import annotations

from utils.training import resumed_batch
from utils.training.config import AUTO


class DataPosition:
    """next_batch, state_dict and load_state_dict of a TrainingAdapter whose loader yields batches with their "pos"."""
    KEPT = ("max_frames_per_batch", "grad_accumulation")  # probed or guessed sizes that decide the batches' order
    pos: tuple = (0, 0)

    def next_batch(self) -> dict:
        batch = next(self.data)
        self.pos = (batch["pos"][0], batch["pos"][1] + 1)  # the next batch to read
        return batch

    def stop_data(self) -> None:
        """The loader's worker processes end with the run (persistent ones outlived it, in the caller's process)."""
        if getattr(self, "data", None) is not None:
            self.data.close()

    def data_counts(self) -> tuple[int, int] | None:
        """(training, held-out) clips the run trains on now, saved with its position (None: not counted)."""
        return None

    def state_dict(self) -> dict:
        return {"next_pos": list(self.pos), **{name: getattr(self.machine, name) for name in self.KEPT},
                "data": self.data_counts(), **resumed_batch.kept(self.machine, self.ctx.dist.world_size)}

    def load_state_dict(self, state: dict) -> None:
        """The saved position; the saved sizes where the curator left them "auto" (a size set by hand is theirs).
        A dataset whose clips changed since the checkpoint is said: the resumed curve is not the same run's."""
        self.pos = tuple(state.get("next_pos", (0, 0)))
        before, now = state.get("data"), self.data_counts()
        if before and now and tuple(before) != tuple(now):
            self.ctx.log(f"resume: the dataset changed since this run last trained: {before[0]} -> {now[0]} training "
                         f"clips, {before[1]} -> {now[1]} held-out (rows added, removed, excluded or included "
                         "again since)")
        for name in self.KEPT:
            if state.get(name) and getattr(self.cfg, name) == AUTO:
                self.machine.set(name, state[name], "kept from the run being resumed (the batch order depends on it)")
        processes = self.ctx.dist.world_size
        trained_on = int(state.get("processes") or processes)
        micro = getattr(self.machine, "max_frames_per_batch", 0)  # the run's, before another count regroups it
        batch = resumed_batch.restore(state, self.machine, self.cfg, processes)
        if processes != trained_on:
            self._move_position(trained_on, processes, micro, batch)

    def _move_position(self, before: int, processes: int, micro_before: int, batch: str) -> None:
        """A run resumed on another number of processes: each reads every `processes`-th batch of the epoch now (of
        batches regrouped when the micro-batch changed), so its place in its share moves to about the same place in
        the epoch (exact only for the same count)."""
        (epoch, index), micro = self.pos, getattr(self.machine, "max_frames_per_batch", 0) or micro_before
        self.pos = (epoch, index * before * max(1, micro_before) // (processes * max(1, micro)))
        self.ctx.log(f"resume: this run trained on {before} process(es) and goes on with {processes}. Data: each "
                     f"process reads on from batch {self.pos[1]} of its share of epoch {epoch} (it was batch {index} "
                     f"of {before} shares), about the same place in the epoch; until the epoch ends a few clips may "
                     f"be read twice or skipped. Batch: {batch}.")
