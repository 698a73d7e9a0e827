"""The verl text our trainer copies, and the checks that keep the copy honest across verl upgrades.

``ray_trainer_fit_0_9_1.py.txt`` is ``inspect.getsource(verl.trainer.ppo.ray_trainer.RayPPOTrainer.fit)``
of verl 0.9.1, byte for byte. :class:`recipe.ibpo.trainer_base.HookedRayPPOTrainer` ``.fit`` is that
text plus one-line hook calls (:data:`HOOK_CALLS`) and nothing else. Two checks, both plain functions
of source text so that tests can feed them modified copies:

- :func:`check_upstream_fit_unchanged`: the installed verl's ``fit`` still equals the stored text
  (otherwise: the merge instructions of :data:`MERGE_INSTRUCTIONS`);
- :func:`check_fit_is_upstream_plus_hooks`: our ``fit`` differs from the stored text only by added
  lines, each one of the hook calls.
"""

from __future__ import annotations

import difflib
import inspect
import textwrap
from pathlib import Path

UPSTREAM_VERL_VERSION = "0.9.1"
UPSTREAM_FIT_PATH = Path(__file__).with_name("ray_trainer_fit_0_9_1.py.txt")
# Every RayPPOTrainer method the recipe copies, with its stored verl 0.9.1 text. ``_update_actor`` is
# copied by RayIBPOTrainer with its ``# IBPO`` lines (the step's mini-batch plan, the update count).
UPSTREAM_METHOD_PATHS = {
    "fit": UPSTREAM_FIT_PATH,
    "_update_actor": Path(__file__).with_name("ray_trainer_update_actor_0_9_1.py.txt"),
}

# The only lines our fit adds to verl's (stripped of indentation), in the order they appear.
HOOK_CALLS = (
    "self._before_generation(combined_gen_batch, metrics, timing_raw)",
    "self._after_generation(combined_gen_batch, combined_gen_output, metrics, timing_raw)",
    "batch = self._extend_batch_before_balance(batch, metrics)",
    "self._shape_rewards(batch, metrics)",
    "self._after_advantage(batch, metrics, timing_raw)",
    "self._step_metrics(batch, metrics, timing_raw)",
)

MERGE_INSTRUCTIONS = """\
The installed verl's RayPPOTrainer.fit differs from the copy this recipe was written against
(verl {version}, recipe/ibpo/upstream/ray_trainer_fit_0_9_1.py.txt). To merge the new version:
  1. python -c "import inspect; from verl.trainer.ppo.ray_trainer import RayPPOTrainer; \\
print(inspect.getsource(RayPPOTrainer.fit), end='')" > recipe/ibpo/upstream/ray_trainer_fit_<new>.py.txt
  2. replace HookedRayPPOTrainer.fit (recipe/ibpo/trainer_base.py) with that text and re-insert the six
     one-line hook calls of recipe.ibpo.upstream.HOOK_CALLS at the same places: before and after the main
     generate_sequences (the second one *before* checkpoint_manager.sleep_replicas()), before
     `if self.config.trainer.balance_batch:`, after token_level_rewards is set (before the rollout
     correction), after compute_advantage(...) (inside the `adv` timer), and before logger.log(...);
  3. point UPSTREAM_FIT_PATH / UPSTREAM_VERL_VERSION at the new file and update recipe/ibpo/REQUIRED_VERL.txt;
  4. run tests/unit/test_trainer_upstream.py, tests/integration/test_recipe_correction.py and the e2e tier.
If a hook's anchor line disappeared upstream, the hook's contract (its docstring in trainer_base.py) says
what state it needs; find the equivalent place. Changes upstream ({num_changed} lines):
{diff}"""


class UpstreamDriftError(AssertionError):
    """The installed verl's trainer no longer matches the text our trainer copies."""


def upstream_fit_source(method: str = "fit") -> str:
    """The stored verl 0.9.1 source of ``RayPPOTrainer.<method>`` (a key of :data:`UPSTREAM_METHOD_PATHS`)."""
    return UPSTREAM_METHOD_PATHS[method].read_text(encoding="utf-8")


def installed_fit_source(method: str = "fit") -> str:
    """``RayPPOTrainer.<method>`` of the verl installed in this environment."""
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    return inspect.getsource(getattr(RayPPOTrainer, method))


def _diff(a: str, b: str, a_name: str, b_name: str) -> list[str]:
    return list(difflib.unified_diff(a.splitlines(), b.splitlines(), a_name, b_name, lineterm="", n=1))


def check_upstream_fit_unchanged(installed_source: str, stored_source: str | None = None,
                                 method: str = "fit") -> None:
    """Raise :class:`UpstreamDriftError`, with merge instructions and the diff, when ``installed_source``
    (verl's current ``RayPPOTrainer.<method>``) is not the stored verl 0.9.1 text."""
    stored = upstream_fit_source(method) if stored_source is None else stored_source
    if installed_source == stored:
        return
    diff = _diff(stored, installed_source, f"verl {UPSTREAM_VERL_VERSION}", "installed verl")
    changed = [d for d in diff if d[:1] in "+-" and d[:3] not in ("+++", "---")]
    if method != "fit":
        raise UpstreamDriftError(
            f"The installed verl's RayPPOTrainer.{method} differs from the verl {UPSTREAM_VERL_VERSION} text "
            f"that recipe/ibpo/ibpo_ray_trainer.py copies ({UPSTREAM_METHOD_PATHS[method].name}): store the new "
            f"text there, re-apply the lines marked `# IBPO` in the copy, and run "
            f"tests/integration/test_actor_minibatches.py and the e2e tier. Changes upstream ({len(changed)} "
            f"lines):\n" + "\n".join(diff[:80]))
    raise UpstreamDriftError(MERGE_INSTRUCTIONS.format(
        version=UPSTREAM_VERL_VERSION, num_changed=len(changed), diff="\n".join(diff[:80])))


def fit_changes(ours: str, upstream: str) -> tuple[list[str], list[str]]:
    """(lines added, lines removed) going from ``upstream`` to ``ours`` (difflib, indentation stripped)."""
    added, removed = [], []
    for line in difflib.ndiff(upstream.splitlines(), ours.splitlines()):
        if line.startswith("+ "):
            added.append(line[2:].strip())
        elif line.startswith("- "):
            removed.append(line[2:].strip())
    return added, removed


def check_fit_is_upstream_plus_hooks(ours: str, upstream: str | None = None) -> None:
    """Raise :class:`UpstreamDriftError` unless ``ours`` is ``upstream`` plus exactly the :data:`HOOK_CALLS`
    lines (in that order), with no line of upstream removed or changed."""
    upstream = upstream_fit_source() if upstream is None else upstream
    added, removed = fit_changes(textwrap.dedent(ours), textwrap.dedent(upstream))
    if removed or tuple(added) != HOOK_CALLS:
        raise UpstreamDriftError(
            f"HookedRayPPOTrainer.fit must be verl's fit plus the hook calls {list(HOOK_CALLS)} only; "
            f"lines added: {added}; lines removed or changed: {removed}")
