"""What every method's trainer reads off a step's batches and writes to (and reads back from) its checkpoints,
without the trainer (``recipe.common.trainer_base`` imports verl's whole ``RayPPOTrainer``; a module that needs
one of these does not): a generation's work for the GPU-time model, the stop on a non-finite reward, and the
checkpointed state files (written atomically, read back checked)."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import torch

from compute_accounting.gpu_time import GenerationWork

if TYPE_CHECKING:
    from verl import DataProto


class NonFiniteRewardError(RuntimeError):
    """A reward function returned nan or ±inf: training on it would turn the advantages and then the weights
    into nan (verl trains on whatever the reward manager stored)."""


def write_json_atomically(path: str, data) -> None:
    """Write ``data`` as JSON through a temporary file: a crash mid-write leaves the previous file, never half of
    one (every checkpointed state file: the compute ledger, a method's own state)."""
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)


class ResumedStateError(ValueError):
    """A checkpoint's state file (the compute ledger, a method's own state) is not what this recipe's trainer
    writes: a resumed run would continue from garbage."""


def json_kind(value) -> str:
    """What JSON calls the type of a value :func:`json.load` returned (for a refusal: "a JSON array")."""
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def read_state_file(path: str) -> dict:
    """The JSON object a checkpoint's state file holds; a file that is not one (truncated, not JSON, a JSON list)
    is refused naming it (:class:`ResumedStateError`)."""
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ResumedStateError(f"{path} is not a JSON file ({error}): resume from a checkpoint this recipe's trainer "
                                "wrote whole, or start a new run (trainer.resume_mode=disable)") from None
    if not isinstance(state, dict):
        raise ResumedStateError(f"{path} holds a JSON {json_kind(state)}, not an object: resume from a checkpoint "
                                "this recipe's trainer wrote, or start a new run (trainer.resume_mode=disable)")
    return state


def generation_work(output: DataProto) -> GenerationWork:
    """The GPU-time model's view of a generation (``compute_accounting.gpu_time.GenerationWork``): each row's
    prompt tokens (valid tokens less the response) and response tokens, decoded without speculation."""
    generated = output.batch["response_mask"].sum(-1)
    return GenerationWork((output.batch["attention_mask"].sum(-1) - generated).tolist(), generated.tolist())


def require_finite_scores(scores: torch.Tensor, data_sources, what: str) -> None:
    """Stop the run when a sequence score is not finite, naming the rows and their ``data_source``
    (``scores``: one per row; ``data_sources``: the batch's ``non_tensor_batch["data_source"]`` or None)."""
    bad = ~torch.isfinite(scores)
    if not bool(bad.any()):
        return
    rows = bad.nonzero().flatten().tolist()
    sources = sorted({str(data_sources[i]) for i in rows}) if data_sources is not None else "unknown"
    raise NonFiniteRewardError(
        f"{what}: the reward function returned a non-finite score for {len(rows)} of {len(scores)} rows "
        f"(rows {rows[:8]}, values {[float(scores[i]) for i in rows[:3]]}, data_source {sources}); "
        "a verifier must return a finite number (reward.custom_reward_function)")
