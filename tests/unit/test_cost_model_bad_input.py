"""Bad input to the GPU-time cost model, the FLOP counter, the compute ledger and the ngram replay fails early,
as a ValueError naming the option, field or file, instead of pricing a step at 0, NaN, inf or a negative time."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from compute_accounting.budget import ComputeBudgetConfig, ComputeBudgetError, ComputeLedger
from compute_accounting.flops import ModelShape, StepWork, forward_flops, step_flops, token_counts
from compute_accounting.gpu_time import (GenerationWork, GpuTimeCoefficients, ServingShape, coefficients_from_json,
                                         fit_decode_coefficients, generation_seconds, resolve_coefficients,
                                         roofline_coefficients, step_seconds, train_forward_tokens_per_s)
from ibpo.lookup_decoding import NgramParams, NgramProposer, ngram_params_from_speculative_config

COEFF = roofline_coefficients("H200", "Qwen3-1.7B")
SHIPPED = "compute_accounting/measured/H200_Qwen3-1.7B.json"
NAN, INF = float("nan"), float("inf")


# ------------------------------------------------------------------------------------------ the ledger
@pytest.mark.parametrize("costs, unit", [((1.0, 1.0, NAN), "modelled_gpu_seconds"), ((NAN, 1.0, 1.0), "flops"),
                                         ((1.0, -2.0, 1.0), "gpu_seconds"), ((INF, 1.0, 1.0), "flops")])
def test_a_non_finite_or_negative_step_cost_is_refused_naming_its_unit(costs, unit):
    """Before: a NaN spend made ``next_step_is_last`` False forever (the run ignored its budget) and a negative
    one un-spent the budget."""
    ledger = ComputeLedger(ComputeBudgetConfig(limit=10.0, unit="modelled_gpu_seconds"))
    with pytest.raises(ComputeBudgetError, match=f"the step's {unit}"):
        ledger.add_step(*costs)
    assert ledger.steps == 0 and ledger.spent() == 0.0


def test_a_checkpointed_ledger_with_a_non_finite_spend_is_refused():
    state = ComputeLedger(ComputeBudgetConfig(limit=10.0)).state_dict()
    with pytest.raises(ComputeBudgetError, match=r"^the checkpoint: flops='nan' has type str"):
        ComputeLedger(ComputeBudgetConfig(limit=10.0)).load_state_dict({**state, "flops": "nan"})
    with pytest.raises(ComputeBudgetError, match=r"^the checkpoint: modelled_gpu_seconds = -1\.0"):
        ComputeLedger(ComputeBudgetConfig(limit=10.0)).load_state_dict({**state, "modelled_gpu_seconds": -1.0})


@pytest.mark.parametrize("options, field", [
    ({"limit": True}, "limit"), ({"limit": "1e9"}, "limit"), ({"limit": None}, "limit"),
    ({"cost_model": None}, "cost_model"), ({"cost_model": 5}, "cost_model"),
    ({"val_fractions": "0.5"}, "val_fractions"), ({"val_fractions": [0.5, True]}, "val_fractions")])
def test_the_budget_block_refuses_wrong_types_naming_the_option(options, field):
    """Before: a TypeError or AttributeError from a comparison, or ``limit=True`` taken as a budget of 1."""
    with pytest.raises(ComputeBudgetError, match=f"compute_budget.{field}="):
        ComputeBudgetConfig(**options)


# ------------------------------------------------------------------------------------------ generation work
@pytest.mark.parametrize("field, bad", [("prompt_lengths", NAN), ("prompt_lengths", INF), ("output_lengths", NAN),
                                        ("decode_steps", NAN), ("drafted_tokens", NAN), ("drafted_tokens", INF)])
def test_generation_work_refuses_non_finite_counts_naming_the_field(field, bad):
    """Before: NaN or inf seconds for the phase (NaN fails every ``< 0`` check)."""
    work = {"prompt_lengths": [3, 4], "output_lengths": [5, 6], "decode_steps": [2, 3], "drafted_tokens": [4, 0]}
    work[field] = [bad, work[field][1]]
    with pytest.raises(ValueError, match=f"GenerationWork.{field}"):
        generation_seconds(GenerationWork(**work), COEFF)


def test_generation_work_refuses_counts_that_are_not_one_per_request():
    with pytest.raises(ValueError, match="GenerationWork.prompt_lengths must be one count per row"):
        generation_seconds(GenerationWork([[1, 2]], [[3, 4]]), COEFF)


# ------------------------------------------------------------------------------------------ training work
@pytest.mark.parametrize("change, match", [({"train_main": [-100]}, "StepWork.train_main"),
                                           ({"train_joint": [NAN]}, "StepWork.train_joint"),
                                           ({"forward_phases": {"scan": [-5]}}, r"StepWork.forward_phases\['scan'\]"),
                                           ({"backward_phases": {"probe": [INF]}}, r"StepWork.backward_phases\['probe'\]"),
                                           ({"forward_phases": {"actor_update": [5]}}, "'actor_update' is a shared phase"),
                                           ({"forward_phases": {"p": [5]}, "backward_phases": {"p": [5]}}, "'p' is"),
                                           ({"ppo_epochs": 0}, "ppo_epochs"), ({"ppo_epochs": -1}, "ppo_epochs"),
                                           ({"ppo_epochs": 1.5}, "ppo_epochs"), ({"ppo_epochs": True}, "ppo_epochs")])
def test_step_seconds_and_step_flops_refuse_work_no_step_did(change, match):
    """Before: step_seconds priced negative or NaN training seconds (and ppo_epochs=0 a free update) where
    step_flops refused the same work; step_flops took NaN rows and 1.5 epochs."""
    work = StepWork(**{"main_gen": [10], "train_main": [10], **change})
    with pytest.raises(ValueError, match=match):
        step_seconds(work, GenerationWork([4], [6]), None, COEFF)
    with pytest.raises(ValueError, match=match):
        step_flops(work, ModelShape(matmul_params=1000, num_layers=2, attention_dim=8))


@pytest.mark.parametrize("lengths", [[NAN], [INF], [3, -1]])
def test_forward_flops_refuses_non_finite_or_negative_lengths(lengths):
    with pytest.raises(ValueError, match="sequence lengths must be finite numbers >= 0"):
        forward_flops(lengths, ModelShape(matmul_params=1000, num_layers=2, attention_dim=8))


@pytest.mark.parametrize("lengths, shown", [([True, 2], "[True]"), (["10"], "['10']"), ([3, "4"], "['4']"),
                                            (np.array([True, False]), "[True, False]"), (np.array(["7"]), "['7']"),
                                            (np.array([5, b"6"], dtype=object), "[b'6']")])
def test_token_counts_refuse_bools_and_strings_naming_the_argument(lengths, shown):
    """Before: np.asarray(..., float) read True as 1 and "10" as 10 (and [True, 2] became an int array)."""
    with pytest.raises(ValueError, match=rf"^GenerationWork\.output_lengths must be numbers, not bools or strings: "
                                         rf"got {re.escape(shown)}$"):
        token_counts(lengths, "GenerationWork.output_lengths")
    with pytest.raises(ValueError, match=r"^StepWork\.train_main must be numbers, not bools or strings"):
        step_flops(StepWork(main_gen=[10], train_main=lengths), ModelShape(matmul_params=1000, num_layers=2,
                                                                            attention_dim=8))


def test_token_counts_take_what_the_callers_pass():
    """Lists of ints (tensor.tolist()), numpy int and float arrays, torch tensors, numpy scalars: counted as is."""
    import torch

    for lengths in ([3, 4], (3.0, 4.0), np.array([3, 4]), np.array([3.0, 4.0]), torch.tensor([3, 4]),
                    [np.int64(3), np.float32(4.0)], np.array([3, 4], dtype=object), []):
        assert token_counts(lengths).tolist() == ([3.0, 4.0] if len(lengths) else [])


@pytest.mark.parametrize("shape", [dict(matmul_params=-100, num_layers=2, attention_dim=8),
                                   dict(matmul_params=100, num_layers=0, attention_dim=8),
                                   dict(matmul_params=100, num_layers=2, attention_dim=NAN)])
def test_a_model_shape_with_a_non_positive_size_is_refused(shape):
    """Before: negative FLOPs."""
    with pytest.raises(ValueError, match="ModelShape."):
        ModelShape(**shape)


@pytest.mark.parametrize("sizes, field", [((0, 0.0, 0.0), "matmul_params"), ((10, NAN, 1.0), "weight_bytes"),
                                          ((10, 20.0, -1.0), "kv_bytes_per_token")])
def test_a_serving_shape_with_a_non_positive_size_is_refused(sizes, field):
    """Before: ``roofline_coefficients`` died of a ZeroDivisionError on a zero-parameter shape."""
    with pytest.raises(ValueError, match=f"ServingShape 'z': {field}="):
        roofline_coefficients("H200", ServingShape("z", *sizes))


# ------------------------------------------------------------------------------------------ coefficients
def shipped_with(tmp_path, **changes):
    data = json.loads(open(SHIPPED).read())
    data["coefficients"].update(changes)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("field, bad", [("decode_step_s", True), ("max_num_seqs", 2.5), ("max_num_seqs", True),
                                        ("gpus", 0.5), ("sources", "measured"), ("sources", None),
                                        ("sources", {"decode_step_s": 1})])
def test_a_bench_json_with_a_bool_a_fractional_count_or_bad_sources_is_refused(tmp_path, field, bad):
    """Before: ``true`` read as 1 s per pass, ``max_num_seqs=2.5`` failed later in a slice (TypeError),
    ``gpus=0.5`` halved the ledger's modelled seconds, and a string ``sources`` broke ``describe``."""
    path = shipped_with(tmp_path, **{field: bad})
    with pytest.raises(ValueError, match=f"GpuTimeCoefficients.{field}="):
        coefficients_from_json(path, "Qwen3-1.7B")


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe\x00garbage"])
def test_a_malformed_bench_json_is_a_value_error_naming_the_file(tmp_path, content):
    """Before: a bare JSONDecodeError / UnicodeDecodeError that did not name the file (``--cost-model: Expecting
    property name ...``)."""
    path = tmp_path / "broken.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="broken.json: not a readable lab/scripts/bench_gpu.py JSON"):
        resolve_coefficients(str(path), "Qwen3-1.7B")


def test_a_bench_json_whose_model_shape_is_not_a_name_is_refused(tmp_path):
    """Before: ``TypeError: unhashable type: 'list'``, which the pre-flight and the toy loop do not catch."""
    data = json.loads(open(SHIPPED).read())
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({**data, "model_shape": ["Qwen3-1.7B"]}))
    with pytest.raises(ValueError, match="model_shape=\\['Qwen3-1.7B'\\] must be a model name"):
        coefficients_from_json(path, "Qwen3-1.7B")


def test_valid_coefficients_still_load():
    data = json.loads(open(SHIPPED).read())["coefficients"]
    assert GpuTimeCoefficients(**data).max_num_seqs == 256
    assert coefficients_from_json(SHIPPED, "Qwen3-1.7B").decode_step_s == data["decode_step_s"]


# ------------------------------------------------------------------------------------------ the bench's fits
@pytest.mark.parametrize("batch, context", [([1, 8, NAN, 64], [256, 2048, 256, 2048]),
                                            ([1, -8, 32, 64], [256, 2048, 256, 2048]),
                                            ([1, 8, 32, 64], [256, 2048, -256, 2048]),
                                            ([0, 8, 32, 64], [256, 2048, 256, 2048])])
def test_the_decode_fit_refuses_a_non_finite_or_negative_grid(batch, context):
    """Before: a NaN batch size died in the SVD (LinAlgError); a negative one was fitted."""
    with pytest.raises(ValueError, match="every batch size must be a finite number >= 1"):
        fit_decode_coefficients(batch, context, [1e-3, 2e-3, 3e-3, 4e-3])


@pytest.mark.parametrize("tokens, seconds", [(NAN, 1.0), (INF, 1.0), (100.0, INF), (100.0, NAN)])
def test_the_training_rate_refuses_non_finite_measurements(tokens, seconds):
    """Before: NaN, inf or 0 tokens per second."""
    with pytest.raises(ValueError, match="must be finite numbers > 0"):
        train_forward_tokens_per_s(tokens, seconds, gradient_checkpointing=True)


# ------------------------------------------------------------------------------------------ the ngram replay
@pytest.mark.parametrize("args, field", [
    ((True, 5, 8), "prompt_lookup_min"), ((2.0, 5, 8), "prompt_lookup_min"), ((2, 5, 2.5), "num_speculative_tokens"),
    ((2, 5, True), "num_speculative_tokens"), ((2, 5, 8, 1.5), "max_model_len"), ((2, 5, 8, 0), "max_model_len"),
    ((2, 5, 8, -4), "max_model_len")])
def test_ngram_params_must_be_integers_and_a_context_limit_positive(args, field):
    """Before: a float window failed later in a slice or a range (TypeError); ``max_model_len <= 0`` silently
    turned every replay into plain decode."""
    with pytest.raises(ValueError, match=f"NgramParams.{field}="):
        NgramParams(*args)


@pytest.mark.parametrize("length", [6, 9, -3, 2.0])
def test_a_proposal_past_the_known_sequence_is_refused(length):
    """Before: an IndexError (past the end) or an empty draft (negative length)."""
    with pytest.raises(ValueError, match="a prefix of the 5-token sequence"):
        NgramProposer([1, 2, 3, 1, 2], NgramParams()).propose(length)


@pytest.mark.parametrize("spec, field", [({"prompt_lookup_min": 2.7}, "prompt_lookup_min"),
                                         ({"num_speculative_tokens": True}, "num_speculative_tokens"),
                                         ({"prompt_lookup_max": None}, "prompt_lookup_max"),
                                         ({"prompt_lookup_max": "5"}, "prompt_lookup_max")])
def test_a_speculative_config_window_that_is_not_an_integer_is_refused_by_name(spec, field):
    """Before: 2.7 truncated to 2, ``True`` read as 1, a missing field a bare KeyError."""
    full = {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 5, "num_speculative_tokens": 8}
    full.update(spec)
    if full[field] is None:
        del full[field]
    with pytest.raises(ValueError, match=f"speculative_config.{field}="):
        ngram_params_from_speculative_config(full)


def test_valid_ngram_configs_still_resolve():
    spec = {"method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 5, "num_speculative_tokens": 8}
    assert ngram_params_from_speculative_config(spec, 4096) == NgramParams(2, 5, 8, 4096)
    assert ngram_params_from_speculative_config({"method": "suffix"}) is None
    assert math.isfinite(COEFF.decode_step_s)


def test_a_cost_model_path_that_does_not_exist_says_so(tmp_path):
    from compute_accounting.gpu_time import resolve_coefficients

    for spec in (str(tmp_path / "nowhere.json"), "runs/coefficients.json"):
        with pytest.raises(ValueError, match=rf"cost model '{spec}': no such file"):
            resolve_coefficients(spec, None)
