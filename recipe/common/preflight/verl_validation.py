"""verl's own validation in the driver: the option types its defaults declare, then ``validate_config`` and
the dataclass conversions its workers do, as stock ``main_ppo`` runs them before Ray."""

from __future__ import annotations

import difflib
import functools
import importlib
import math
import re
import typing
from typing import Any, Iterable

from omegaconf import DictConfig, OmegaConf

from recipe.common.preflight.errors import SetupError
from recipe.common.preflight.option_types import is_interpolation


@functools.lru_cache(maxsize=1)
def verl_default_config() -> DictConfig:
    """The pinned verl's full default PPO config (``verl/trainer/config/_generated_ppo_trainer.yaml``, the flattened
    ``ppo_trainer`` composition verl generates and tests against)."""
    from importlib.resources import files

    return OmegaConf.load(str(files("verl.trainer.config").joinpath("_generated_ppo_trainer.yaml")))


# Options of verl's plain (dataclass-less) config nodes (``data.*``, ``trainer.*``, ...) whose int default is a
# count, a size, a length or an index: a fraction there is a mistake (``data.train_batch_size=2.5`` would reach a
# DataLoader or ``range`` inside Ray), not a setting. Nodes with a ``_target_`` dataclass use its annotations.
_COUNT_OPTION = re.compile(
    r"(^n$|^seed$|^rank$|^port$|size|length|_len$|steps?$|epochs|freq|^num_|_num_|workers|nnodes|n_gpus|samples"
    r"|replicas|shards|prefetch|generations|warmup$|stack_depth|entries)")


def _field_hints(node: dict) -> dict[str, Any]:
    """The type annotations of the dataclass a verl config node names in ``_target_`` (``{}`` without one)."""
    target = node.get("_target_")
    if not isinstance(target, str) or "." not in target:
        return {}
    return _dataclass_hints(target)


@functools.lru_cache(maxsize=None)
def _dataclass_hints(target: str) -> dict[str, Any]:
    """Annotations of ``module.Class`` (cached: the actor, ref and rollout nodes share classes, and the check
    runs before and after interpolations are resolved)."""
    module, _, name = target.rpartition(".")
    try:
        return typing.get_type_hints(getattr(importlib.import_module(module), name))
    except Exception:  # a target that cannot be imported here (an optional backend): fall back to the name rule
        return {}


def _takes_fraction(key: str, annotation: Any) -> bool:
    """Whether an option whose verl default is an int may hold a non-integer number: by its dataclass
    annotation where verl declares one (``entropy_coeff: float``, default ``0``), else unless its name is a
    count (:data:`_COUNT_OPTION`)."""
    if annotation is not None:
        args = typing.get_args(annotation) or (annotation,)
        return float in args
    return not _COUNT_OPTION.search(key)


def check_verl_option_types(config: DictConfig, defaults: DictConfig | None = None, resolve: bool = True) -> None:
    """Every option whose verl default is a number or a bool must hold one (``data.train_batch_size=abc``
    otherwise reaches ``validate_config`` as a string: ``"abc" * n`` is string repetition), and an integer
    option an integer (``data.train_batch_size=2.5``, ``trainer.total_epochs=1.5``). Raises naming the key, its
    value and the expected type. An int default takes a float where verl's dataclass declares a float
    (``entropy_coeff: 0``, ``top_p: 1``) or, without a dataclass, where the option is not a count."""
    defaults = verl_default_config() if defaults is None else defaults
    ours = OmegaConf.to_container(config, resolve=resolve)
    theirs = OmegaConf.to_container(defaults, resolve=False)

    def walk(mine: Any, default: Any, prefix: str, key: str = "", annotation: Any = None) -> None:
        if isinstance(default, dict) and isinstance(mine, dict):
            hints = _field_hints(default)
            for child, value in mine.items():
                if child in default:
                    walk(value, default[child], f"{prefix}.{child}" if prefix else str(child), str(child),
                         hints.get(child))
            return
        if mine is None or default is None or is_interpolation(mine):
            return
        if isinstance(default, bool):
            ok, expected = isinstance(mine, bool), "bool (true/false)"
        elif isinstance(default, int) and not _takes_fraction(key, annotation):
            ok, expected = isinstance(mine, int) and not isinstance(mine, bool), "an integer"
        elif isinstance(default, (int, float)):
            ok, expected = isinstance(mine, (int, float)) and not isinstance(mine, bool), "a number"
        else:
            return
        if not ok:
            raise SetupError(f"{prefix}={mine!r} has type {type(mine).__name__}; verl expects {expected} "
                                 f"(default {default!r})")
        if isinstance(mine, float) and mine != mine:  # nan passes verl's range checks (nan < 0 is False)
            raise SetupError(f"{prefix}=nan is not a number verl can train with (default {default!r})")

    walk(ours, theirs, "")


# verl's estimators that normalise within a prompt's group: a group of one sample has advantage 0, so G = 1 trains
# on nothing (a method's own group estimator is checked by its start check)
GROUP_ESTIMATORS = frozenset({"grpo", "grpo_passk", "grpo_vectorized", "rloo", "rloo_vectorized", "opo", "gpg",
                              "reinforce_plus_plus_baseline", "gdpo"})

# The few verl numbers a user sets whose wrong value trains silently: (dotted key, test, what is allowed).
VERL_RANGES = (
    ("actor_rollout_ref.actor.optim.lr", lambda v: math.isfinite(v) and v >= 0,
     "a finite number >= 0 (a negative rate is gradient ascent)"),
    ("critic.optim.lr", lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0"),
    ("actor_rollout_ref.rollout.temperature", lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0"),
    ("actor_rollout_ref.rollout.top_p", lambda v: 0 < v <= 1, "in (0, 1]"),
    ("actor_rollout_ref.rollout.n", lambda v: v >= 1, ">= 1 (the responses sampled per prompt)"),
    ("trainer.total_training_steps", lambda v: v >= 1, "null (from the epochs) or >= 1"),
    ("trainer.total_epochs", lambda v: v >= 1, ">= 1"),
    ("data.train_batch_size", lambda v: v >= 1, ">= 1"),
)


def check_verl_ranges(config: DictConfig) -> None:
    """The options of :data:`VERL_RANGES` in range, and ``actor_rollout_ref.rollout.n >= 2`` for an estimator of
    :data:`GROUP_ESTIMATORS`; raises naming the option. verl's own validation lets these through (a negative or
    infinite learning rate, ``total_training_steps=0``, which verl runs as one step)."""
    for key, allowed, description in VERL_RANGES:
        value = OmegaConf.select(config, key, default=None)
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue  # unset (null: verl's default), or a wrong type: check_verl_option_types' message
        if not allowed(value):
            raise SetupError(f"{key}={value!r} is out of range: must be {description}")
    estimator = OmegaConf.select(config, "algorithm.adv_estimator", default=None)
    n = OmegaConf.select(config, "actor_rollout_ref.rollout.n", default=None)
    if estimator in GROUP_ESTIMATORS and isinstance(n, int) and n < 2:
        raise SetupError(f"actor_rollout_ref.rollout.n={n} with algorithm.adv_estimator={estimator!r}: the advantage "
                         "is normalised within each prompt's group, and a group of one sample gets 0 (nothing is "
                         "learned); set n >= 2")


# Nodes that take any key by design: Ray's own init keywords (num_gpus, runtime_env, ...)
FREE_FORM_NODES = frozenset({"ray_kwargs.ray_init"})
# Options verl reads with ``.get`` that its generated yaml leaves out (their contents: reward_function's
# check_reward_kwargs)
READ_BUT_NOT_IN_YAML = {"reward": {"reward_kwargs"}, "reward.custom_reward_function": {"reward_kwargs"}}


def check_unknown_keys(config: DictConfig, extra_top_level: Iterable[str] = (), defaults: DictConfig | None = None
                       ) -> None:
    """A key that is no option of verl's config is refused, naming it and the nearest option: Hydra's ``+`` adds
    any key, and verl reads its plain nodes (``trainer``, ``data``, the reward function's) by name, so
    ``+trainer.total_trainng_steps=5`` or ``+foo=1`` would be dropped without a word. A node's options are its
    keys in verl's defaults plus, where it names a dataclass (``_target_``), that dataclass's fields; a node whose
    default is empty (``engine_kwargs``, ``override_config``) or in :data:`FREE_FORM_NODES` takes any key (and
    ``data`` when ``data.custom_cls.path`` names a dataset class of the user's, which may read its own keys); the
    keys of :data:`READ_BUT_NOT_IN_YAML` and, at the top, ``extra_top_level`` (the method blocks and the recipe's
    own keys) are options too."""
    defaults = verl_default_config() if defaults is None else defaults
    ours = OmegaConf.to_container(config, resolve=False)
    theirs = OmegaConf.to_container(defaults, resolve=False)
    allowed_top = set(extra_top_level)
    free_form = set(FREE_FORM_NODES)
    if OmegaConf.select(config, "data.custom_cls.path", default=None):
        free_form.add("data")  # a custom dataset class may read keys of its own from data.*

    def walk(mine: Any, default: Any, prefix: str) -> None:
        if not (isinstance(mine, dict) and isinstance(default, dict)) or not default or prefix in free_form:
            return
        known = (set(default) | set(_field_hints(default)) | READ_BUT_NOT_IN_YAML.get(prefix, set())
                 | (allowed_top if not prefix else set()))
        for child, value in mine.items():
            key = f"{prefix}.{child}" if prefix else str(child)
            if child not in known:
                near = difflib.get_close_matches(str(child), sorted(map(str, known)), n=1)
                raise SetupError(f"{key} is not an option of verl's config (nor of this recipe)"
                                 + (f"; did you mean {prefix + '.' if prefix else ''}{near[0]}?" if near else "")
                                 + " A key added with '+' is otherwise dropped without a word")
            if child in default:
                walk(value, default[child], key)

    walk(ours, theirs, "")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    import re

    unexpected = re.search(r"unexpected keyword argument '(\w+)'.*?full_key: ([\w.]+)", text)
    if unexpected:
        return f"{unexpected.group(2)}.{unexpected.group(1)} is not an option of verl's config ({text})"
    return text


def run_verl_validation(config: DictConfig) -> None:
    """What stock ``main_ppo.main`` runs in the driver before Ray: ``verl.utils.config.validate_config``
    (batch sizes, micro-batch options, the actor config's dataclass with its own ``validate``), plus the
    dataclass conversion verl's workers do of the rollout and algorithm blocks (an unknown key or a bad value
    there otherwise surfaces inside a Ray worker). Raises :class:`SetupError` with verl's message."""
    import contextlib
    import io

    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    steps = [("validate_config", lambda: validate_config(config=config,
                                                         use_reference_policy=need_reference_policy(config),
                                                         use_critic=need_critic(config))),
             ("actor_rollout_ref.rollout", lambda: omega_conf_to_dataclass(config.actor_rollout_ref.rollout)),
             ("algorithm", lambda: omega_conf_to_dataclass(config.algorithm))]
    for what, step in steps:
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # validate_config prints its passing line
                step()
        except Exception as exc:  # noqa: BLE001 - AssertionError/ValueError/TypeError/Hydra errors from verl
            raise SetupError(f"verl's config validation ({what}, as main_ppo runs it in the driver) failed: "
                                 f"{type(exc).__name__}: {_one_line(exc)}") from exc

