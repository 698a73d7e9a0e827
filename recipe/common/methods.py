"""The method registry: the config's top-level ``method:`` picks a registered :class:`Method`, which gives its
option block's dataclass, its Hydra config, the trainer class that runs it and its own start check.

The registry names no method. Each method registers itself from its own package: the module
``recipe/<folder>/method.py`` calls :func:`register_method` at import, and :func:`registered_methods` imports
every such module it finds under ``recipe/``, plus the modules the environment variable ``RECIPE_METHOD_MODULES``
lists (comma-separated; a method that lives outside this tree, e.g. the test tree's: the variable reaches the
Ray processes as the rest of the environment does). A new method is one folder (docs/architecture.md,
"Adding a method").
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from recipe.common.preflight.errors import SetupError
from recipe.common.preflight.option_types import check_option_types, is_interpolation

RECIPE_DIR = Path(__file__).resolve().parents[1]
METHOD_MODULE = "method"  # recipe/<folder>/method.py registers the folder's method
EXTRA_MODULES_ENV = "RECIPE_METHOD_MODULES"  # more modules that register a method (comma-separated)


@dataclass(frozen=True)
class Method:
    """One ``method:`` value. Its option block is the config key of the same name."""

    name: str
    options: type  # the option block's dataclass (with ``from_mapping``)
    config_dir: Path  # the folder of the Hydra config a run of this method starts from
    config_name: str  # that config's name (without .yaml)
    trainer: Callable[[], type]  # returns the trainer class (imported when a run builds it: Ray, verl workers)
    # the method's own start check, called as ``check(config, context)`` with the model's context length (None
    # when the model config gives none); None when the method has none
    check: Callable[[DictConfig, int | None], None] | None = None
    # verl advantage estimators (``algorithm.adv_estimator``) only this method's trainer may run
    owned_estimators: tuple[str, ...] = ()
    # the generated option block file (config_dir/<block_file>) and its header comment (recipe.common.config_blocks)
    block_file: str = ""
    block_header: str = ""
    # called before Hydra composes a config (OmegaConf resolvers the method's config uses)
    register_resolvers: Callable[[], None] | None = None
    # the actor worker class the method's trainer calls (None: verl's own)
    actor_worker: Callable[[], type] | None = None
    # the config key of its option block when it runs another method's options with a trainer of its own (the GPU
    # bench's IBPO-then-GSPO reads ``ibpo:``); "" = its own name
    options_block: str = ""
    module: str = field(default="", compare=False)  # the module that registered it

    def block_key(self) -> str:
        """The config key of this method's option block."""
        return self.options_block or self.name


_REGISTRY: dict[str, Method] = {}


def register_method(method: Method) -> Method:
    """Add ``method`` under ``method.name`` (called at import of the method's own ``method`` module);
    registering the same name twice with a different entry raises."""
    existing = _REGISTRY.get(method.name)
    if existing is not None and existing != method:
        raise SetupError(f"method {method.name!r} is registered twice ({existing.module} and {method.module})")
    _REGISTRY[method.name] = method
    return method


def register_folder_method(module: str, **fields: Any) -> Method:
    """Register the method that a folder's ``method`` module describes (``module``: that module's ``__name__``),
    so the module holds only what is its own. The folder's layout fills the rest: its Hydra config is
    ``config/<name>_trainer.yaml`` beside the module and its generated option block ``config/<name>_block.yaml``,
    unless ``fields`` names ``config_dir``, ``config_name`` or ``block_file``."""
    name = fields["name"]
    folder = Path(sys.modules[module].__file__).resolve().parent
    layout = {"config_dir": folder / "config", "config_name": f"{name}_trainer", "block_file": f"{name}_block.yaml"}
    return register_method(Method(module=module, **{**layout, **fields}))


def method_modules() -> list[str]:
    """The in-tree registration modules: ``recipe.<folder>.method`` for every folder of ``recipe/`` that has one."""
    return [f"recipe.{info.name}.{METHOD_MODULE}" for info in pkgutil.iter_modules([str(RECIPE_DIR)])
            if info.ispkg and (RECIPE_DIR / info.name / f"{METHOD_MODULE}.py").is_file()]


def recipe_top_level_keys() -> set[str]:
    """The top-level config keys a run has beyond verl's generated defaults: ``method``, every method's option
    block (its name), the shared ``compute_budget`` block, and verl's ``model_engine`` (a Hydra group of
    ``ppo_trainer`` that its generated yaml leaves out)."""
    return {"method", "compute_budget", "model_engine", *registered_methods()}


def registered_methods() -> dict[str, Method]:
    """Every registered method, after importing the in-tree registration modules and those
    ``RECIPE_METHOD_MODULES`` names."""
    extra = [m.strip() for m in os.environ.get(EXTRA_MODULES_ENV, "").split(",") if m.strip()]
    for module in method_modules() + extra:
        importlib.import_module(module)
    return dict(_REGISTRY)


# (method, option dataclass, the block's resolved values as JSON) -> the validated dataclass (frozen)
_VALIDATED: dict[tuple[str, type, str], Any] = {}


def method_options(config: DictConfig, method: str) -> Any:
    """The validated option block of ``method`` (its config key), as its dataclass: the one way a trainer, a
    start check or the pre-flight reads a method's options. A block is validated once per process (the
    pre-flight, the trainer and its start checks read the same values); an invalid one raises every time."""
    entry = registered_methods()[method]
    block = config.get(entry.block_key())
    if block is None:
        raise SetupError(f"config has no `{entry.block_key()}:` block; start from "
                         f"{entry.config_dir / entry.config_name}.yaml")
    options = OmegaConf.to_container(block, resolve=True)
    key = (method, entry.options, json.dumps(options, sort_keys=True, default=repr))
    if key not in _VALIDATED:
        check_option_types(options, entry.options, method)
        _VALIDATED[key] = entry.options.from_mapping(options)
    return _VALIDATED[key]


def method_of(config: DictConfig) -> str:
    """The config's ``method``, its option block validated; a bad value, a missing block, another method's block
    or an advantage estimator another method owns fails here, naming the key."""
    methods = registered_methods()
    method = config.get("method")
    if method not in methods:
        raise SetupError(f"method={method!r} must be one of {sorted(methods)} (top-level key of the method's "
                         "trainer config): it picks the trainer")
    estimator = (config.get("algorithm") or {}).get("adv_estimator")
    own_block = methods[method].block_key()
    for owner in methods.values():
        if estimator in owner.owned_estimators and owner.block_key() != own_block:
            raise SetupError(f"algorithm.adv_estimator={estimator} with method={method}: the {estimator} estimator "
                             f"normalises the reward {owner.name}'s trainer shapes, which only method={owner.name} "
                             f"runs; use algorithm.adv_estimator=grpo (or method={owner.name})")
    for other in methods.values():
        if other.block_key() != own_block and config.get(other.block_key()) is not None:
            raise SetupError(f"method={method} but the config has a `{other.block_key()}:` block; one method per run "
                             f"(start from {other.config_name}.yaml for `{other.name}`)")
    method_options(config, method)
    return method


def trainer_class_for(config: DictConfig) -> type:
    """The trainer class of the config's ``method`` (imported on demand)."""
    return registered_methods()[method_of(config)].trainer()


def holds_interpolation(value: Any) -> bool:
    """Whether an option value (a list's items included) is or holds an unresolved ``${...}``."""
    if isinstance(value, (list, tuple)):
        return any(holds_interpolation(v) for v in value)
    return is_interpolation(value)


def check_option_block_types(config: DictConfig) -> None:
    """The declared types of every method option block present, and of the shared ``compute_budget:`` block,
    before the config is resolved (its interpolations read them). A block without interpolations is validated
    whole too (its dataclass's ranges), so an out-of-range option is named before an interpolation that reads it
    fails on it (``ibpo.num_references=-1``: a division by zero sizing ``rollout.prompt_length``)."""
    from recipe.common.preflight.compute_budget import check_compute_budget_types

    for name, entry in registered_methods().items():
        if config.get(name) is not None:
            block = OmegaConf.to_container(config[name], resolve=False)
            check_option_types(block, entry.options, name)
            if not any(holds_interpolation(v) for v in block.values()):
                entry.options.from_mapping(block)
    check_compute_budget_types(config)


def run_method_check(config: DictConfig, method: str, context: int | None) -> None:
    """The method's own start check (IBPO: the tokenizer against the correction prompt budget), if any."""
    check = registered_methods()[method].check
    if check is not None:
        check(config, context)
