"""A bench-only method for ``lab/scripts/bench_gpu.py``'s step part: IBPO's trainer, options and start check, switched to
GSPO (``ibpo.enable=False``, ``ibpo.joint_training=False``: no correction pass, Δ = 0) from step
:data:`GSPO_FROM_STEP` on, so that one launch pays every start-up once and gives IBPO's and GSPO's step times on the
same machine.

Not a product option: it is registered only where ``RECIPE_METHOD_MODULES`` names ``ibpo_then_gspo.method`` (with
``lab/scripts/bench_methods`` on ``PYTHONPATH``), and the one-GPU script runs it with ``METHOD=ibpo_then_gspo``; this
package itself registers nothing (the bench reads its constants). It reads the ``ibpo:`` block
(``Method.options_block``). Its GSPO step keeps the IBPO steps' ``rollout.prompt_length`` (sized for correction
prompts), so verl pads its prompts wider than the GSPO script would; with remove-padding the actor's passes do not
see that padding. It prints ``[bench] workers ready`` when verl's workers, the rollout servers and the agent loop are up.
"""

from __future__ import annotations

import dataclasses
import functools
import time

GSPO_FROM_STEP = 3
WORKERS_READY = "[bench] workers ready"
IBPO_ENABLED_METRIC = "bench/ibpo_enabled"  # 1: the step ran IBPO, 0: GSPO


@functools.cache
def trainer() -> type:
    from recipe.ibpo.ibpo_ray_trainer import RayIBPOTrainer

    class IBPOThenGSPOTrainer(RayIBPOTrainer):
        """IBPO until step ``GSPO_FROM_STEP``, GSPO from it on; :data:`IBPO_ENABLED_METRIC` says which ran."""

        def init_workers(self):
            start = time.perf_counter()
            super().init_workers()
            print(f"{WORKERS_READY} after {time.perf_counter() - start:.1f} s (actor, rollout servers, agent loop)",
                  flush=True)

        def _before_generation(self, gen_batch, metrics: dict, timing_raw: dict) -> None:
            if self.global_steps >= GSPO_FROM_STEP and self.ibpo.enable:
                # as run_gspo_qwen3_1p7b_1gpu.sh runs it: ibpo.enable=False with JOINT=False
                self.ibpo = dataclasses.replace(self.ibpo, enable=False, joint_training=False)
            metrics[IBPO_ENABLED_METRIC] = float(self.ibpo.enable)
            super()._before_generation(gen_batch, metrics, timing_raw)

    return IBPOThenGSPOTrainer

