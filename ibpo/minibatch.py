"""How many rows the actor's optimizer updates take when joint-training rows join the batch (App. E.2).

verl's actor (``verl/workers/engine_workers.py`` ``TrainingWorker.train_mini_batch``) cuts the batch into
mini-batches of ``mini_batch_size`` rows (the driver passes ``ppo_mini_batch_size · rollout.n``) and makes
one optimizer update per mini-batch and epoch. With a fixed mini-batch, the 14 correction rows (+ 2 no-op
padding rows) of a 16-row step double the number of updates, so IBPO + joint training would take more,
smaller optimizer steps than the GSPO baseline it is compared with. The paper describes one policy update
on the mixed batch; ``grow`` keeps the baseline's number of updates by growing the mini-batch with the
joint rows, ``verl`` keeps verl's fixed mini-batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ActorMiniBatchPlan:
    """One step's actor update layout."""

    mini_batch_rows: int  # rows per optimizer update, passed to verl as mini_batch_size / global_batch_size
    padded_rows: int  # rows of the training batch after no-op padding (a multiple of mini_batch_rows)
    updates_per_epoch: int  # optimizer updates per ppo epoch = padded_rows / mini_batch_rows


@dataclass(frozen=True)
class RowMultiples:
    """What the per-step row counts must be multiples of (verl's ``prepare_micro_batches`` asserts each)."""

    update: int  # each optimizer mini-batch: whole actor micro-batches on every data-parallel rank
    batch: int  # the whole padded batch: also whole old-log-prob and reference micro-batches on every rank


def row_multiples(dp_size: int, actor_micro_batch: int | None, log_prob_micro_batch: int | None,
                  ref_micro_batch: int | None = None) -> RowMultiples:
    """Each data-parallel rank must get whole micro-batches of the actor update (per mini-batch) and of the
    old-log-prob and (when used) reference forwards (over the whole batch, which they take at once); pass
    ``None`` for a pass that uses dynamic batch sizes, whose only constraint is the DP split. The forwards'
    micro-batches constrain the batch, not each mini-batch: folding them into the mini-batch would pad runs
    that need no padding (a log-prob micro-batch of 16 would grow mini-batches of 8 to 16)."""
    if dp_size < 1:
        raise ValueError(f"dp_size must be >= 1, got {dp_size}")
    for micro in (actor_micro_batch, log_prob_micro_batch, ref_micro_batch):
        if micro is not None and micro < 1:
            raise ValueError(f"micro-batch sizes must be >= 1, got {micro}")
    update = dp_size if actor_micro_batch is None else dp_size * actor_micro_batch
    batch = update
    for micro in (log_prob_micro_batch, ref_micro_batch):
        if micro is not None:
            batch = math.lcm(batch, dp_size * micro)
    return RowMultiples(update, batch)


def actor_minibatch_plan(main_rows: int, joint_rows: int, baseline_mini_batch_rows: int, multiples: RowMultiples,
                         mode: str) -> ActorMiniBatchPlan:
    """The mini-batch size and padded batch size of one step.

    ``main_rows`` = train_batch_size · n, ``baseline_mini_batch_rows`` = ppo_mini_batch_size · n (verl's
    mini-batch, which divides ``main_rows``: the run without joint rows makes
    ``main_rows / baseline_mini_batch_rows`` updates per epoch), ``multiples`` from :func:`row_multiples`.

    - ``grow``: the same number of updates k as without joint rows; each mini-batch has the fewest rows that
      hold ceil((main + joint) / k) rows, are a multiple of ``multiples.update`` and make a batch that is a
      multiple of ``multiples.batch``.
    - ``verl``: verl's fixed mini-batch; the batch is padded to whole mini-batches (and to ``multiples.batch``),
      so joint rows add updates.

    Without joint rows both give verl's own layout (no padding) for any layout verl itself accepts.
    """
    m = multiples
    if main_rows < 1 or joint_rows < 0 or baseline_mini_batch_rows < 1 or m.update < 1 or m.batch % m.update:
        raise ValueError(f"bad sizes: main_rows={main_rows}, joint_rows={joint_rows}, "
                         f"baseline_mini_batch_rows={baseline_mini_batch_rows}, multiples={m}")
    if main_rows % baseline_mini_batch_rows:
        raise ValueError(f"train_batch_size·n = {main_rows} rows is not a whole number of actor mini-batches of "
                         f"ppo_mini_batch_size·n = {baseline_mini_batch_rows} rows")
    total = main_rows + joint_rows
    if mode == "verl":
        if baseline_mini_batch_rows % m.update:
            raise ValueError(f"ppo_mini_batch_size·n = {baseline_mini_batch_rows} rows does not split into whole "
                             f"micro-batches on every DP rank (multiple {m.update})")
        whole = math.lcm(baseline_mini_batch_rows, m.batch)
        padded = math.ceil(total / whole) * whole
        return ActorMiniBatchPlan(baseline_mini_batch_rows, padded, padded // baseline_mini_batch_rows)
    if mode == "grow":
        updates = main_rows // baseline_mini_batch_rows
        mini = math.ceil(total / (updates * m.update)) * m.update
        while (mini * updates) % m.batch:  # ends: mini = m.batch is a multiple of m.update that divides
            mini += m.update
        return ActorMiniBatchPlan(mini, mini * updates, updates)
    raise ValueError(f"unknown ibpo.joint_minibatch {mode!r}: must be 'grow' or 'verl'")


def optimizer_updates_reported(actor_metrics: dict) -> int:
    """Optimizer updates the actor made, counted from verl's update output: the engine's ``train_batch``
    runs one ``optimizer_step`` and reports one ``grad_norm`` per mini-batch, which ``train_mini_batch``
    collects into a list (``actor/grad_norm`` after the trainer's renaming)."""
    values = actor_metrics.get("actor/grad_norm", actor_metrics.get("grad_norm"))
    if values is None:
        raise KeyError("the actor update output has no grad_norm: cannot count its optimizer updates")
    return len(values) if isinstance(values, (list, tuple)) else 1
