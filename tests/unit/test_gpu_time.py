"""The GPU-time cost model (compute_accounting/gpu_time.py) against a pass-by-pass reference, the roofline's
model shapes against the published parameter counts, and the coefficient file's round trip."""

from __future__ import annotations

import json

import numpy as np
import pytest

from compute_accounting.budget import ComputeBudgetConfig, ComputeBudgetError, ComputeLedger
from compute_accounting.flops import StepWork
from compute_accounting.gpu_time import (MODEL_SHAPES, GenerationWork, GpuTimeCoefficients, coefficients_from_json,
                                         coefficients_to_json, generation_seconds, resolve_coefficients,
                                         roofline_coefficients, step_seconds)

COEFF = GpuTimeCoefficients(decode_step_s=1e-3, decode_s_per_token=2e-5, decode_s_per_context_token=3e-8,
                            prefill_tokens_per_s=1e5, train_forward_tokens_per_s=5e4, weight_sync_s=0.2,
                            max_num_seqs=3, sources={"decode_step_s": "test"})


def reference_seconds(p, g, s, d, coeff):
    """Pass by pass: waves of max_num_seqs requests in order; in pass k of a wave, each request with s_i >= k
    computes 1 + d_i/s_i tokens and reads p_i + k·g_i/s_i context tokens; every pass costs decode_step_s."""
    decode = 0.0
    for lo in range(0, len(p), coeff.max_num_seqs):
        wave = range(lo, min(lo + coeff.max_num_seqs, len(p)))
        for k in range(1, int(max(s[i] for i in wave)) + 1):
            decode += coeff.decode_step_s
            for i in wave:
                if s[i] >= k:
                    decode += (1 + d[i] / s[i]) * coeff.decode_s_per_token
                    decode += (p[i] + k * g[i] / s[i]) * coeff.decode_s_per_context_token
    return sum(p) / coeff.prefill_tokens_per_s, decode


@pytest.mark.parametrize("seed", range(5))
def test_generation_seconds_match_the_pass_by_pass_reference(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 9))
    p = rng.integers(0, 50, n).tolist()
    g = rng.integers(0, 40, n).tolist()
    s = [int(rng.integers(1, gi)) if gi > 1 else 0 for gi in g]  # a decode pass emits one token or more
    # the accepted drafts (output - 1 - passes) were drafted, and some drafts were rejected
    d = [gi - 1 - si + int(rng.integers(0, 2 * si + 1)) if si else 0 for gi, si in zip(g, s)]
    prefill, decode = reference_seconds(p, g, s, d, COEFF)
    got = generation_seconds(GenerationWork(p, g, s, d), COEFF)
    assert got["prefill"] == pytest.approx(prefill, rel=1e-12)
    assert got["decode"] == pytest.approx(decode, rel=1e-12, abs=1e-15)


def test_without_speculation_a_request_takes_output_minus_one_passes():
    plain = generation_seconds(GenerationWork([10, 10], [5, 9]), COEFF)
    explicit = generation_seconds(GenerationWork([10, 10], [5, 9], [4, 8], [0, 0]), COEFF)
    assert plain == explicit
    # a copying request needs fewer passes: cheaper, though each pass verifies its drafts
    fewer = generation_seconds(GenerationWork([10, 10], [5, 9], [2, 3], [6, 12]), COEFF)
    assert fewer["decode"] < plain["decode"] and fewer["prefill"] == plain["prefill"]


def test_work_whose_drafts_cannot_explain_its_passes_is_refused():
    """A request's passes emit output - 1 tokens after the prefill, one each plus the drafts they accept: fewer
    passes than that need as many drafted tokens, and a draft needs a pass to verify it."""
    generation_seconds(GenerationWork([10], [9], [3], [5]), COEFF)  # 3 passes, 5 accepted of 5 drafted: possible
    with pytest.raises(ValueError, match="request 1 has output - 1 - decode steps tokens were accepted"):
        generation_seconds(GenerationWork([10, 10], [9, 9], [3, 3], [5, 4]), COEFF)
    with pytest.raises(ValueError, match="request 0 has draft tokens but no decode pass"):
        generation_seconds(GenerationWork([10], [1], [0], [4]), COEFF)
    with pytest.raises(ValueError, match="accepted, more than were drafted"):
        generation_seconds(GenerationWork([10], [9], [3]), COEFF)  # fewer passes and no drafts at all
    # the bench's averages (fractions) keep the rule
    generation_seconds(GenerationWork([10, 10], [8.5, 8.5], [3.25, 3.25], [4.25, 4.25]), COEFF)


def test_bad_generation_work_is_refused():
    with pytest.raises(ValueError, match="at most output - 1"):
        generation_seconds(GenerationWork([1], [3], [3]), COEFF)
    with pytest.raises(ValueError, match="prompt lengths"):
        generation_seconds(GenerationWork([1, 2], [3]), COEFF)


def test_step_seconds_price_each_phase():
    work = StepWork(main_gen=[30, 40], train_main=[30, 40], train_joint=[20], ppo_epochs=2,
                    gradient_checkpointing=True, reference_forward=True, backward_phases={"grad_probe": [10]})
    main, corr = GenerationWork([10, 20], [20, 20]), GenerationWork([50], [5], [1], [6])
    out = step_seconds(work, main, corr, COEFF).phases
    per_fwd = 1 / COEFF.train_forward_tokens_per_s
    assert out["old_log_prob"] == pytest.approx(90 * per_fwd) and out["ref_log_prob"] == pytest.approx(90 * per_fwd)
    assert out["actor_update"] == pytest.approx(2 * 4 * 90 * per_fwd)
    assert out["grad_probe"] == pytest.approx(4 * 10 * per_fwd)
    assert out["weight_sync"] == COEFF.weight_sync_s
    assert out["correction_gen_prefill"] == pytest.approx(50 / COEFF.prefill_tokens_per_s)
    none = step_seconds(work, main, None, COEFF).phases
    assert none["correction_gen_prefill"] == none["correction_gen_decode"] == 0.0


def test_model_shapes_match_the_published_non_embedding_parameters():
    # Qwen3 model cards: non-embedding parameters 1.4B (1.7B), 6.95B (8B), 31.2B (32B); the LM head is
    # hidden x vocab (tied in 1.7B, counted once either way)
    for name, published in (("Qwen3-1.7B", 1.4e9), ("Qwen3-8B", 6.95e9), ("Qwen3-32B", 31.2e9)):
        shape = MODEL_SHAPES[name]
        hidden = {"Qwen3-1.7B": 2048, "Qwen3-8B": 4096, "Qwen3-32B": 5120}[name]
        non_embedding = shape.matmul_params - hidden * 151936
        assert abs(non_embedding - published) / published < 0.01
    assert MODEL_SHAPES["Qwen3-1.7B"].kv_bytes_per_token == 2 * 28 * 8 * 128 * 2


def test_roofline_names_its_sources_and_decode_is_memory_bound():
    c = roofline_coefficients("H100-SXM", "Qwen3-1.7B")
    assert all("roofline" in c.sources[f] for f in ("decode_step_s", "prefill_tokens_per_s", "weight_sync_s"))
    # one decode pass reads 3.4 GB of weights: at 80% of 3.35 TB/s that is ~1.3 ms, ~200x one token's compute
    assert 1.2e-3 < c.decode_step_s < 1.6e-3 and c.decode_step_s > 100 * c.decode_s_per_token
    assert roofline_coefficients("H200").decode_step_s < c.decode_step_s  # more bandwidth, same peak
    with pytest.raises(ValueError, match="unknown GPU"):
        roofline_coefficients("A100")


def test_coefficients_round_trip_through_the_bench_json(tmp_path):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(coefficients_to_json(COEFF)))
    assert coefficients_from_json(path) == COEFF
    assert resolve_coefficients(str(path), "Qwen3-1.7B") == COEFF
    path.write_text(json.dumps({"coefficients": {**coefficients_to_json(COEFF)["coefficients"], "decode_typo": 1}}))
    with pytest.raises(ValueError, match="decode_typo"):
        coefficients_from_json(path)
    with pytest.raises(ValueError, match="must be > 0"):
        GpuTimeCoefficients(1e-3, 0, 0, 0.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="roofline:<GPU>"):
        resolve_coefficients("H100", "Qwen3-1.7B")


@pytest.mark.parametrize("content", ["[1, 2]", '{"coefficients": [1, 2]}', '{"meta": "H200", "weight_sync_s": 1}'])
def test_a_json_that_is_not_a_bench_object_is_a_value_error_naming_it(tmp_path, content):
    # before: AttributeError ('list' object has no attribute 'get'), which the launcher's pre-flight does not catch
    path = tmp_path / "bench.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=rf"^{path}: not a lab/scripts/bench_gpu.py JSON"):
        coefficients_from_json(path)


def test_the_budget_counts_modelled_gpu_seconds():
    ledger = ComputeLedger(ComputeBudgetConfig(limit=10.0, unit="modelled_gpu_seconds"))
    ledger.add_step(flops=1e20, gpu_seconds=100.0, modelled_gpu_seconds=4.0)
    assert ledger.spent() == 4.0 and not ledger.next_step_is_last()
    ledger.add_step(flops=1e20, gpu_seconds=100.0, modelled_gpu_seconds=4.0)
    assert ledger.next_step_is_last()
    assert ledger.metrics()["compute_budget/limit_modelled_gpu_seconds"] == 10.0
    state = ledger.state_dict()
    fresh = ComputeLedger(ComputeBudgetConfig(limit=10.0, unit="modelled_gpu_seconds"))
    fresh.load_state_dict(state)
    assert fresh.modelled_gpu_seconds == 8.0
    with pytest.raises(ComputeBudgetError, match="cost_model"):
        ComputeBudgetConfig(cost_model="H100")


@pytest.mark.parametrize("seed", range(5))
def test_phases_sum_to_the_total_and_more_work_never_costs_less(seed):
    rng = np.random.default_rng(seed)
    rows = rng.integers(1, 200, 6).tolist()
    work = StepWork(main_gen=rows, train_main=rows, train_joint=rows[:2], forward_phases={"scan": rows[:3]},
                    backward_phases={"probe": rows[:1]}, ppo_epochs=int(rng.integers(1, 3)), reference_forward=True)
    main = GenerationWork(rng.integers(0, 50, 6).tolist(), rng.integers(1, 40, 6).tolist())
    step = step_seconds(work, main, GenerationWork([30], [9], [3], [12]), COEFF)
    metrics = step.as_metrics("compute/modelled_gpu_seconds/")
    assert step.phases["scan"] > 0 and step.phases["probe"] > 0  # a method's own phases, by the names it declares
    assert metrics["compute/modelled_gpu_seconds"] == pytest.approx(sum(step.phases.values()), rel=1e-12)
    assert sum(v for k, v in metrics.items() if k != "compute/modelled_gpu_seconds") == pytest.approx(step.total)
    assert all(v >= 0 for v in step.phases.values())
    longer = GenerationWork(list(main.prompt_lengths), [g + 1 for g in main.output_lengths])
    assert generation_seconds(longer, COEFF)["decode"] > generation_seconds(main, COEFF)["decode"]
    more_drafts = GenerationWork([30], [9], [3], [13])
    assert generation_seconds(more_drafts, COEFF)["decode"] > generation_seconds(GenerationWork([30], [9], [3], [12]),
                                                                                 COEFF)["decode"]
