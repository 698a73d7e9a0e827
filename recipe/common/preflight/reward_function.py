"""The reward function verl's reward loop will call: loaded as verl loads it, its keyword arguments against
its signature, one row scored as verl calls it, and the self-test (known-right and
known-wrong answers: exact for the project's own verifiers, relative for any other function)."""

from __future__ import annotations

import math
import typing

from omegaconf import DictConfig, OmegaConf

from recipe.common.preflight.errors import SetupError
from recipe.common.preflight.option_types import matches, type_name

REWARD_PATH_KEY = "reward.custom_reward_function.path"
REWARD_NAME_KEY = "reward.custom_reward_function.name"
# The project's own reward function (path, name): the one whose verifiers self-test and check gold answers.
PROJECT_REWARD = ("pkg://reward_fns", "compute_score")
REWARD_KWARGS_KEY = "reward.custom_reward_function.reward_kwargs"
# The keywords the pinned verl's reward managers call the function with (experimental/reward_loop/reward_manager).
VERL_REWARD_CALL = ("data_source", "solution_str", "ground_truth", "extra_info")
# ... and add when a reward model is served (not options a user sets).
VERL_REWARD_EXTRAS = ("reward_router_address", "reward_model_tokenizer")
# What verl's reward managers read from `reward.reward_kwargs` (dapo: overlong buffer); nothing else reads it.
REWARD_MANAGER_KWARGS = {"dapo": ("overlong_buffer_cfg", "max_resp_len")}


def raw_reward_function(fn):
    """The user's function behind verl's ``partial(_call_with_kwargs, fn, reward_kwargs)`` wrapper."""
    import functools

    while isinstance(fn, functools.partial):
        fn = next((a for a in fn.args if callable(a)), fn.func) if fn.args else fn.func
    return fn


def check_reward_kwargs(config: DictConfig, fn) -> None:
    """``reward.custom_reward_function.reward_kwargs`` against the function's signature (``inspect``): an unknown
    keyword (a typo) raises naming it and the keywords the function takes; a value of the wrong type for an
    annotated parameter raises too; and the function must accept verl's call keywords. A function taking
    ``**kwargs`` cannot be checked: a warning says so. ``reward.reward_kwargs`` holds only what the reward
    manager reads (verl passes none of it to the function)."""
    import inspect
    import warnings

    kwargs = project_reward_kwargs(config)  # as verl binds them to any function (get_custom_reward_fn)
    manager = str((config.reward.get("reward_manager") or {}).get("name", "naive"))
    manager_kwargs = config.reward.get("reward_kwargs")
    if manager_kwargs:
        known = REWARD_MANAGER_KWARGS.get(manager, ())
        for key in manager_kwargs:
            if key not in known:
                raise SetupError(
                    f"reward.reward_kwargs.{key}: verl's reward manager {manager!r} does not read it (it reads "
                    f"{list(known) or 'no reward.reward_kwargs'}); options of the reward function go under "
                    f"{REWARD_KWARGS_KEY}.{key}")
    raw = raw_reward_function(fn)
    try:
        signature = inspect.signature(raw)
    except (TypeError, ValueError):
        return
    name = f"{REWARD_NAME_KEY}={getattr(raw, '__name__', raw)!s}"
    params = signature.parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    named = [p.name for p in params.values()
             if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    missing = [k for k in VERL_REWARD_CALL if k not in named and not takes_any]
    if missing:
        raise SetupError(f"{name}: verl calls it with the keywords {list(VERL_REWARD_CALL)} but it takes no "
                             f"{missing}; it takes {named}")
    options = [p for p in named if p not in VERL_REWARD_CALL + VERL_REWARD_EXTRAS]
    for key, value in kwargs.items():
        if key in VERL_REWARD_CALL + VERL_REWARD_EXTRAS:
            raise SetupError(f"{REWARD_KWARGS_KEY}.{key}: verl passes {key} itself for every sample")
        if key not in params:
            if takes_any:
                continue
            raise SetupError(f"{REWARD_KWARGS_KEY}.{key}: {name} takes no keyword {key!r}; it takes "
                                 f"{sorted(options)}")
        try:
            annotation = typing.get_type_hints(raw).get(key)
        except Exception:  # noqa: BLE001 - unresolvable annotations are simply not checked
            annotation = None
        if annotation is not None and not matches(value, annotation):
            raise SetupError(f"{REWARD_KWARGS_KEY}.{key}={value!r} has type {type(value).__name__}; {name} "
                                 f"expects {type_name(annotation)}")
    unchecked = [k for k in kwargs if k not in params]
    if unchecked:
        warnings.warn(f"{REWARD_KWARGS_KEY} {unchecked}: {name} takes **kwargs, so these keywords cannot be "
                      "checked against its signature; a misspelt one would be ignored", stacklevel=2)


def _call_reward(reward_fn, **kwargs):
    import asyncio
    import inspect

    result = reward_fn(**kwargs)
    return asyncio.run(result) if inspect.isawaitable(result) else result


def score_row(config: DictConfig, reward_fn, path: str, row_index: int, row: dict) -> float:
    """Score an empty response to one row with ``reward_fn`` the way verl's reward loop calls it (keywords
    ``data_source``, ``solution_str``, ``ground_truth``, ``extra_info``); the result must be a number or a dict
    with a numeric ``score``. Returns the score."""
    block = config.reward.get("custom_reward_function") or {}
    where = (f"{REWARD_PATH_KEY}={block.get('path')} {REWARD_NAME_KEY}={block.get('name')} on {path}, row "
             f"{row_index} (data_source={row['data_source']!r})")
    try:
        result = _call_reward(reward_fn, data_source=row["data_source"], solution_str="",
                              ground_truth=(row.get("reward_model") or {}).get("ground_truth"),
                              extra_info=dict(row.get("extra_info") or {}))
    except Exception as exc:  # noqa: BLE001 - any failure of the user's function is reported with its option
        raise SetupError(f"{where}: the reward function raised {type(exc).__name__}: "
                             + " ".join(str(exc).split())) from exc
    score = result.get("score") if isinstance(result, dict) else result
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        raise SetupError(f"{where}: returned {result!r:.200}; verl needs a number or a dict with a numeric "
                             "'score'")
    if not math.isfinite(score):  # a NaN reward turns the group's advantages (and the loss) into NaN
        raise SetupError(f"{where}: returned the score {score!r} for an empty response; verl needs a finite number")
    return float(score)


def load_reward_function(config: DictConfig):
    """The reward function verl's reward loop will call, loaded the way verl loads it
    (``verl.trainer.ppo.reward.get_custom_reward_fn``: ``reward_kwargs`` bound), or verl's
    ``default_compute_score`` when no custom function is configured. A wrong path or name raises
    :class:`SetupError` naming the option."""
    from verl.trainer.ppo.reward import get_custom_reward_fn
    from verl.utils.reward_score import default_compute_score

    block = config.reward.get("custom_reward_function") or {}
    path, name = block.get("path"), block.get("name")
    if not path:
        if name not in (None, "", "compute_score"):  # verl ignores the name without a path: its own scorer runs
            raise SetupError(f"{REWARD_NAME_KEY}={name} is set but {REWARD_PATH_KEY} is empty: verl would ignore "
                             "the name and score with its built-in default_compute_score; set the path too")
        return default_compute_score
    if not name:
        raise SetupError(f"{REWARD_PATH_KEY}={path} is set but {REWARD_NAME_KEY} is empty")
    try:
        fn = get_custom_reward_fn(config)
    except (ImportError, FileNotFoundError) as exc:
        raise SetupError(f"{REWARD_PATH_KEY}={path}: cannot import it ({type(exc).__name__}: {exc}); use "
                             "pkg://<module> for an installed module or a file path that exists") from exc
    except AttributeError as exc:
        raise SetupError(f"{REWARD_NAME_KEY}={name}: {path} has no function of that name ({exc})") from exc
    except RuntimeError as exc:  # verl's wrapper around an exception raised while executing a file module
        raise SetupError(f"{REWARD_PATH_KEY}={path}: importing it failed ({exc.__cause__ or exc})") from exc
    return fn


def run_verifier_self_test(config: DictConfig, data_sources: list[str], reward_fn=None) -> None:
    """Score built-in known-right and known-wrong samples for every data source of the run's files through the
    configured reward function (``reward_fns.self_test``). The project's own (``pkg://reward_fns``
    ``compute_score``) must score them exactly 1 and 0: a verifier that cannot run (sandbox, broken install) fails
    here instead of scoring every response 0. Any other (``reward_fn``, as :func:`load_reward_function` returns
    it) must pay each right answer at least its wrong one's score and some strictly more (``relative=True``): one
    that ignores the response or the gold (always 1, always 0) is refused naming its path and name. Data sources
    the project has no samples for are not tested; a line says which."""
    from reward_fns import KNOWN_DATA_SOURCES, VerifierSelfTestError, compute_score, self_test

    block = config.reward.get("custom_reward_function") or {}
    label, fn, kwargs, relative = "pkg://reward_fns", compute_score, project_reward_kwargs(config), False
    sources = data_sources
    if not uses_project_reward(config):
        if reward_fn is None:
            return
        label = (f"{block.get('path')} {REWARD_NAME_KEY}={block.get('name')}" if block.get("path")
                 else "(unset, so verl's default_compute_score)")
        sources = [s for s in data_sources if s in KNOWN_DATA_SOURCES]
        untested = [s for s in data_sources if s not in KNOWN_DATA_SOURCES]
        if untested:
            print(f"[recipe] reward self-test: no built-in samples for data sources {untested}; "
                  f"{REWARD_PATH_KEY}={label} is not checked to tell a right answer from a wrong one there",
                  flush=True)

        def as_verl_calls(data_source, solution_str, ground_truth, extra_info):  # keywords, awaited if async
            return _call_reward(reward_fn, data_source=data_source, solution_str=solution_str,
                                ground_truth=ground_truth, extra_info=extra_info)

        fn, kwargs, relative = as_verl_calls, {}, True  # verl has bound reward_kwargs to reward_fn already
    try:
        self_test(sources, fn, kwargs, relative=relative)
    except VerifierSelfTestError as exc:
        raise SetupError(f"{REWARD_PATH_KEY}={label}: verifier self-test failed: "
                             + " | ".join(str(exc).splitlines())) from exc


def uses_project_reward(config: DictConfig) -> bool:
    """Whether the configured reward function is the project's own (:data:`PROJECT_REWARD`)."""
    block = config.reward.get("custom_reward_function") or {}
    return (block.get("path"), block.get("name")) == PROJECT_REWARD


def project_reward_kwargs(config: DictConfig) -> dict:
    """``reward.custom_reward_function.reward_kwargs`` as verl binds them to the function
    (``get_custom_reward_fn``), for the project's function or any other."""
    block = config.reward.get("custom_reward_function") or {}
    value = block.get("reward_kwargs")
    return dict(OmegaConf.to_container(value, resolve=True)) if value is not None else {}

