"""The pre-flight: every check that needs no Ray worker, in the driver, before Ray starts, so a misconfigured
run fails in seconds with one line naming the option (``recipe.common.main.run_preflight`` calls
:func:`resolve_config` then :func:`preflight`). One module per job:

- ``errors``: :class:`SetupError`, what every check raises;
- ``option_types``: an option value against its declared type;
- ``legacy_reward_keys``: top-level reward keys the pinned verl no longer reads;
- ``verl_validation``: verl's option types and its own ``validate_config``, in the driver;
- ``model``: the model's path, context length and FLOP shape, from its config;
- ``reward_function``: the reward function loaded as verl loads it, its keyword arguments, the self-test;
- ``data_files``: the data files and every row in them;
- ``row_limits``: the longest row of each phase against verl's micro-batch token limits (a method's start check
  calls it with its rows) and the ``${row_tokens_per_gpu:...}`` config default that fits them.

A method's own check lives in its folder and is given to the
registry (``recipe.common.methods.Method.check``) by the method's registration; nothing here imports a method's
folder."""

from __future__ import annotations

import re
from typing import Any

from omegaconf import DictConfig, OmegaConf

from recipe.common.preflight.data_files import check_data_rows, data_files
from recipe.common.preflight.errors import SetupError
from recipe.common.preflight.legacy_reward_keys import check_legacy_reward_keys
from recipe.common.preflight.compute_budget import compute_budget_from, gpu_time_coefficients
from recipe.common.preflight.model import check_context_length, check_model_path, configured_context_length, sampling_report
from recipe.common.preflight.reward_function import check_reward_kwargs, load_reward_function, run_verifier_self_test
from recipe.common.preflight.verl_validation import (check_unknown_keys, check_verl_option_types, check_verl_ranges,
                                                     run_verl_validation)

__all__ = ["SetupError", "preflight", "resolve_config"]


def resolve_config(config: DictConfig) -> None:
    """Resolve the config's interpolations in place, after checking the option types the interpolations read
    (a wrong-typed option would otherwise fail inside a method's resolver with a traceback naming the key that
    interpolates it); a resolution failure raises naming the key."""
    from omegaconf.errors import OmegaConfBaseException

    from recipe.common.methods import check_option_block_types  # the registry imports this package's checks

    check_option_block_types(config)
    check_verl_option_types(config, resolve=False)
    try:
        OmegaConf.resolve(config)
    except (OmegaConfBaseException, ValueError, TypeError) as exc:
        key = unresolvable_key(config) or getattr(exc, "full_key", None)
        raise SetupError(f"{key or 'config'}: cannot resolve its interpolation: "
                             f"{' '.join(str(exc).split())}") from exc


def unresolvable_key(config: DictConfig) -> str | None:
    """The dotted key of the option whose interpolation does not resolve (``ibpo.lam=${nope}`` names
    ``ibpo.lam``; OmegaConf's own error names the missing key ``nope``), None when every one resolves. Where one
    broken option breaks others that read it (verl's ``rollout.trace.project_name: ${trainer.project_name}``), the
    one named is the first that reads no other failing option: the option the user wrote."""
    raw = OmegaConf.to_container(config, resolve=False)
    failing = {}
    for key, value in interpolated_options(raw):
        try:
            OmegaConf.select(config, key, throw_on_resolution_failure=True)
        except Exception:  # any resolver's failure: the key is what the user needs
            failing[key] = value
    for key, value in failing.items():
        if not any(re.search(rf"(?<![\w.]){re.escape(other)}(?!\w)", value) for other in failing if other != key):
            return key
    return next(iter(failing), None)


def interpolated_options(node: Any, path: str = ""):
    """(dotted key, raw string) of every option whose unresolved value holds an interpolation, in config order."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        name = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else str(key)
        if isinstance(value, str) and "${" in value:
            yield name, value
        else:
            yield from interpolated_options(value, name)


def preflight(config: DictConfig) -> None:
    """Every check that needs no Ray worker, cheapest first: ``method`` and its option block with types,
    legacy reward keys, verl's option types, the data files, the model path, the reward function and its
    keyword arguments, every data row (before the rest, so a bad row is always the error named), keys verl's
    config does not have, the model's context, the method's own check (IBPO: the tokenizer against the
    correction prompt budget), the ranges of verl's numbers, verl's own validation and the reward function's
    self-test (right answers paid more than wrong ones). ``config`` must be resolved (:func:`resolve_config` first, as the launcher does).
    Raises :class:`SetupError` (or ``ValueError`` from the option dataclasses) naming the option."""
    # the registry imports this package's checks
    from recipe.common.methods import method_of, recipe_top_level_keys, run_method_check

    method = method_of(config)  # validates the method's option block, rejects the other method's
    budget = compute_budget_from(config)  # the compute budget's options, and validation by budget, not by step count
    check_legacy_reward_keys(config)
    check_verl_option_types(config)
    train_files = data_files(config, "train_files")
    val_files = data_files(config, "val_files")
    model = config.actor_rollout_ref.model
    check_model_path(str(model.path))
    val_kwargs = config.actor_rollout_ref.rollout.get("val_kwargs")
    if val_kwargs is not None and val_kwargs.get("do_sample", False):
        print("[recipe] " + sampling_report(val_kwargs, str(model.path), "validation sampling (rollout.val_kwargs)"),
              flush=True)
    reward_fn = load_reward_function(config)
    check_reward_kwargs(config, reward_fn)
    # Every row before the model's context and verl's validation: a bad row (file, row, field, what is allowed)
    # is reported whatever else the config still lacks, and needs nothing but the files and the reward function.
    sources = check_data_rows(config, reward_fn, train_files + [f for f in val_files if f not in train_files])
    check_unknown_keys(config, recipe_top_level_keys())  # a key verl would drop (added with '+')
    context = configured_context_length(model)
    check_context_length(config, context)
    gpu_time_coefficients(config, budget)  # compute_budget.cost_model names a known GPU or a readable JSON
    run_method_check(config, method, context)
    check_verl_ranges(config)  # after the method's check: it names the method-specific reason (e.g. G >= 2)
    run_verl_validation(config)  # after the method's checks: they name the method-specific reason for a setting
    run_verifier_self_test(config, sources, reward_fn)
