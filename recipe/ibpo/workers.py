"""verl's actor/rollout worker plus one method: the gradient-variance probe (paper App. A "Empirical
Verification"; issue: IBPO's ≈30% lower policy-gradient variance).

The probe needs the actor's own model, which lives in the worker processes, so it is a worker method
dispatched like ``compute_log_prob`` (each data-parallel rank gets a shard of the batch). The math is
``ibpo.grad_probe``: per-sample policy-gradient projections on a fixed random subset of weight entries,
computed under several advantage tensors of the *same* samples in one forward. The driver computes the
variances from the gathered projections.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from verl.single_controller.base.decorator import make_nd_compute_dataproto_dispatch_fn, register
from verl.utils import tensordict_utils as tu
from verl.workers.engine_workers import ActorRolloutRefWorker

# The advantage vectors the probe can compare, in order: the trained ones (GSPO's group-normalised reward vs the
# IBPO advantages the step trains on) and Theorem A.2's un-normalised ones (r − mean_g vs r + λΔ − mean_g).
PROBE_ADVANTAGES = ("baseline", "candidate", "theorem_baseline", "theorem_candidate")


class IBPOActorRolloutRefWorker(ActorRolloutRefWorker):
    """``ActorRolloutRefWorker`` with :meth:`ibpo_grad_probe`; everything else is verl's."""

    _ibpo_probe_subset = None

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def ibpo_grad_probe(self, data: TensorDict) -> TensorDict:
        """Per-sample gradient projections ``proj_<name>`` (B, K) for this rank's rows, one per advantage tensor
        ``adv_<name>`` the data holds (:data:`PROBE_ADVANTAGES`), all from one set of per-sample gradients.

        ``data`` holds padded ``(B, L)`` ``input_ids``/``attention_mask``/``position_ids``, ``response_mask``
        and the ``(B, R)`` advantage tensors; meta ``num_coordinates``, ``seed``, ``micro_batch_size``.
        """
        from ibpo.grad_probe import projected_per_sample_gradients, select_parameter_subset

        engine = self.actor.engine
        module = engine.module
        if self._ibpo_probe_subset is None:  # fixed across steps: the same coordinates every probe
            self._ibpo_probe_subset = select_parameter_subset(module, int(tu.get(data, "num_coordinates")),
                                                              int(tu.get(data, "seed")))
        names = [name for name in PROBE_ADVANTAGES if f"adv_{name}" in data.keys()]
        with engine.eval_mode():
            projections = projected_per_sample_gradients(
                module,
                data["input_ids"],
                data["attention_mask"],
                data["response_mask"],
                [data[f"adv_{name}"] for name in names],
                self._ibpo_probe_subset,
                position_ids=data["position_ids"],
                aggregation="token_mean",
                micro_batch_size=int(tu.get(data, "micro_batch_size")) or None,
            )
        return TensorDict({f"proj_{name}": p.float() for name, p in zip(names, projections)},
                          batch_size=[int(data["input_ids"].shape[0])])


def probe_input(batch, num_coordinates: int, seed: int, micro_batch_size: int,
                **advantages: torch.Tensor) -> TensorDict:
    """The TensorDict :meth:`IBPOActorRolloutRefWorker.ibpo_grad_probe` takes, from a padded verl batch and
    ``(B, R)`` advantages named as in :data:`PROBE_ADVANTAGES` (an unknown name stops here)."""
    unknown = sorted(set(advantages) - set(PROBE_ADVANTAGES))
    if unknown:
        raise ValueError(f"grad probe: unknown advantage name(s) {unknown}; known: {PROBE_ADVANTAGES}")
    td = TensorDict({
        "input_ids": batch.batch["input_ids"],
        "attention_mask": batch.batch["attention_mask"],
        "position_ids": batch.batch["position_ids"],
        "response_mask": batch.batch["response_mask"],
        **{f"adv_{name}": adv.float() for name, adv in advantages.items()},
    }, batch_size=[len(batch)])
    tu.assign_non_tensor(td, num_coordinates=int(num_coordinates), seed=int(seed),
                         micro_batch_size=int(micro_batch_size))
    return td
