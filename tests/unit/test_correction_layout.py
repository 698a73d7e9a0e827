"""Correction-pass layout and cost (docs/correction_pass.md): candidate order, one reference per group,
candidate budgets on re-tokenised text derived from the context, the prefix-sharing proxy, the benchmarks'
CPU-side parts."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from omegaconf import OmegaConf

from lab.analysis.correction_workload import build_workload, chat_prompt_ids, correction_requests, zipf_text_ids
from ibpo.options import IBPOConfig, IBPOConfigError
from ibpo.pipeline import plan_corrections
from ibpo.prefix_sharing import common_prefix_length, shared_prefix_fraction, shared_prefix_lengths
from ibpo.prompts import TRUNCATION_MARKER, render_candidate
from ibpo.references import get_reference_rule, select_references_in_group
from ibpo.correction_lengths import TRUNCATION_MARKER_TOKENS, CorrectionBudgetError, correction_budget
from recipe.common.preflight import SetupError
from recipe.ibpo.start_checks import check_trainer_config
from verl_cpu.tiny_assets import build_tiny_tokenizer

PER_GROUP = get_reference_rule("per_group")

# chi-square critical values at p = 0.001 (df -> value): a fixed-seed test that fails only on a real bias
CHI2_CRIT_001 = {1: 10.83, 2: 13.82, 3: 16.27, 5: 20.52}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return build_tiny_tokenizer(tmp_path_factory.mktemp("tok"))


def _decode(tokenizer):
    return lambda ids: tokenizer.decode(list(ids), skip_special_tokens=True)


def _encode(tokenizer):
    return lambda text: tokenizer.encode(text, add_special_tokens=False)


# ------------------------------------------------------------------ layout options
def test_layout_options_validate():
    assert IBPOConfig().candidate_order == "target_first" and IBPOConfig().reference_rule == "independent"
    with pytest.raises(IBPOConfigError, match="candidate_order"):
        IBPOConfig(candidate_order="ref_first")
    with pytest.raises(IBPOConfigError, match="shuffle_candidates=True with ibpo.candidate_order='reference_first'"):
        IBPOConfig(candidate_order="reference_first", shuffle_candidates=True)


def _group_prompts(tokenizer, order: str):
    """One group: row 0 correct, rows 1-2 wrong, responses starting with distinct characters."""
    texts = ["7 is the answer since 3 + 4 = 7", "1 + 1 = 9 so 9", "2 * 4 = 6 hence 6"]
    ids = [_encode(tokenizer)(t) for t in texts]
    problem = [{"role": "user", "content": "What is 3 + 4? Put the answer in \\boxed{}."}]
    config = IBPOConfig(candidate_order=order, reference_rule="per_group", max_candidate_tokens=512)
    requests = plan_corrections([0, 0, 0], [True, False, False], [problem] * 3, ids, _decode(tokenizer), config,
                                step=0, encode=_encode(tokenizer))
    prompts = [chat_prompt_ids(tokenizer, r.messages) for r in requests]
    return texts, problem[0]["content"], requests, prompts


def test_reference_first_shares_exactly_problem_and_reference(tokenizer):
    texts, problem, requests, (a, b) = _group_prompts(tokenizer, "reference_first")
    assert [r.reference_rows for r in requests] == [(0,), (0,)]
    rendered = tokenizer.apply_chat_template(requests[0].messages, tokenize=False, add_generation_prompt=True)
    prefix_text = rendered[: rendered.index(texts[1])]  # everything before the target
    assert prefix_text.endswith(f"### Problem\n{problem}\n\n### Solution 1\n{texts[0]}\n\n### Solution 2\n")
    shared = common_prefix_length(a, b)
    assert tokenizer.decode(a[:shared]) == prefix_text  # token level: exactly instruction + problem + reference
    assert shared == len(tokenizer.encode(prefix_text, add_special_tokens=False))


def test_target_first_shares_only_problem(tokenizer):
    texts, problem, requests, (a, b) = _group_prompts(tokenizer, "target_first")
    shared_text = tokenizer.decode(a[: common_prefix_length(a, b)])
    assert shared_text.endswith(f"### Problem\n{problem}\n\n### Solution 1\n")
    assert texts[0] not in shared_text


def _chi2(counts: Counter, support) -> float:
    n = sum(counts.values())
    expected = n / len(support)
    assert set(counts) <= set(support)
    return sum((counts.get(s, 0) - expected) ** 2 / expected for s in support)


def test_per_group_reference_rule_is_shared_and_marginally_uniform():
    rng = np.random.default_rng(1234)
    ok = [False, True, False, True, True, False]  # correct: 1, 3, 4
    firsts = {i: Counter() for i in (0, 2, 5)}
    for _ in range(3000):
        refs = select_references_in_group(ok, 1, rng, rule=PER_GROUP)
        assert refs[0] == refs[2] == refs[5] and refs[1] is refs[3] is refs[4] is None  # one shared draw
        for i in firsts:
            firsts[i][refs[i][0]] += 1
    for counts in firsts.values():
        assert _chi2(counts, (1, 3, 4)) < CHI2_CRIT_001[2]

    # no correct sibling: each wrong response's reference is uniform over the *other* responses, never itself
    counts = {i: Counter() for i in range(4)}
    for _ in range(4000):
        refs = select_references_in_group([False] * 4, 1, rng, rule=PER_GROUP)
        for i in range(4):
            counts[i][refs[i][0]] += 1
    for i, c in counts.items():
        assert i not in c and _chi2(c, [j for j in range(4) if j != i]) < CHI2_CRIT_001[2]

    # K-1 = 2 of 3 correct: the ordered pair is uniform over the 6 permutations, as the independent draw's
    pairs = Counter(tuple(select_references_in_group([False, True, True, True], 2, rng, rule=PER_GROUP)[0])
                    for _ in range(3000))
    assert _chi2(pairs, list(itertools.permutations((1, 2, 3), 2))) < CHI2_CRIT_001[5]
    # duplicates when too few correct, self-correction for G = 1, K = 1 unchanged
    assert select_references_in_group([False, True], 3, rng, rule=PER_GROUP) == [[1, 1, 1], None]
    assert select_references_in_group([False], 1, rng, rule=PER_GROUP) == [[]]
    assert select_references_in_group([False, True], 0, rng, rule=PER_GROUP) == [[], None]


def test_independent_draw_is_what_per_group_changes():
    """With the independent rule (the default) the wrong responses of a group often disagree (2 right of 8: ~2 distinct)."""
    rng = np.random.default_rng(0)
    ok = [True, True] + [False] * 6
    distinct = [len({tuple(r) for r in select_references_in_group(ok, 1, rng) if r is not None}) for _ in range(500)]
    assert 1.9 < np.mean(distinct) < 2.0  # 2 - 2 * 0.5^6 = 1.97


# ------------------------------------------------------------------ budgets
def test_budget_is_explicit_or_derived_from_context():
    explicit = correction_budget(1024, 8192, 1, 3000, template_tokens=200, context=32768)
    assert (explicit.candidate_tokens, explicit.derived) == (3000, False)
    fits = correction_budget(1024, 8192, 1, 0, template_tokens=200, context=32768)
    assert fits.candidate_tokens == 8192 and fits.derived  # room for whole responses: capped at one response
    tight = correction_budget(1024, 16384, 1, 0, template_tokens=200, context=32768)
    assert tight.candidate_tokens == (32768 - 16384 - 1024 - 200) // 2 - TRUNCATION_MARKER_TOKENS == 7564
    assert correction_budget(1024, 8192, 1, 0).candidate_tokens == 8192  # no bound known: one response
    with pytest.raises(CorrectionBudgetError, match="ibpo.max_candidate_tokens=0 derives"):
        correction_budget(1024, 32000, 1, 0, template_tokens=200, context=32768)
    with pytest.raises(CorrectionBudgetError, match="ibpo.max_candidate_tokens=9000 does not fit"):
        correction_budget(1024, 16384, 1, 9000, template_tokens=200, context=32768)


@pytest.mark.parametrize("max_prompt,max_response,refs,context", [
    (512, 2048, 1, 8192), (1024, 16384, 1, 32768), (2048, 32768, 1, 40960), (256, 4096, 0, 6000),
    (512, 8192, 2, 32768), (128, 100, 1, 4096)])
def test_derived_budget_leaves_max_tokens_a_whole_response(max_prompt, max_response, refs, context):
    budget = correction_budget(max_prompt, max_response, refs, 0, template_tokens=150, context=context)
    assert budget.max_tokens == max_response  # a correction may write as long as a main response
    assert budget.prompt_tokens + budget.max_tokens <= context
    assert 0 < budget.candidate_tokens <= max_response


def _trainer_config(max_prompt: int, max_response: int, prompt_length: int, max_model_len=None, **ibpo):
    return OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"n": 8, "prompt_length": prompt_length, "response_length": max_response,
                                          "max_model_len": max_model_len}},
        "algorithm": {"adv_estimator": "ibpo"}, "ibpo": ibpo,
        "data": {"max_prompt_length": max_prompt, "max_response_length": max_response},
        "reward": {"reward_model": {"enable": False}},
    })


def test_a_32k_candidate_is_cut_to_the_derived_budget(tokenizer):
    """Qwen3-like: 40,960-token context, 32,768-token responses. The start check derives the candidate budget
    from the context; a 32k-token wrong response and its reference then fit the correction prompt."""
    from recipe.ibpo.config import ibpo_prompt_length

    prompt_length = ibpo_prompt_length(True, 2048, 32768, 1, 0, 40960)  # the config-time default
    assert prompt_length + 32768 <= 40960
    cfg = _trainer_config(2048, 32768, prompt_length=prompt_length, max_model_len=40960)
    ibpo = check_trainer_config(cfg, IBPOConfig(), tokenizer)
    assert 0 < ibpo.max_candidate_tokens < 32768 // 8  # derived, not "unbounded"
    rng = np.random.default_rng(0)
    responses = [zipf_text_ids(tokenizer, 32768, rng) for _ in range(2)]
    problem = [{"role": "user", "content": "What is 3 + 4?"}]
    requests = plan_corrections([0, 0], [True, False], [problem] * 2, responses, _decode(tokenizer), ibpo, step=0,
                                encode=_encode(tokenizer))
    ids = chat_prompt_ids(tokenizer, requests[0].messages)
    assert requests[0].messages[-1]["content"].count("tokens omitted ...]") == 2  # both candidates cut
    assert prompt_length - 2048 - 100 < len(ids) <= prompt_length  # fits, and uses the room (x is short here)


def test_start_check_fails_naming_the_option_when_the_context_cannot_fit(tokenizer):
    cfg = _trainer_config(512, 40500, prompt_length=400, max_model_len=40960)
    with pytest.raises(SetupError, match="ibpo.max_candidate_tokens=0 derives"):
        check_trainer_config(cfg, IBPOConfig(), tokenizer)
    cfg = _trainer_config(512, 2048, prompt_length=3000, max_model_len=8192, max_candidate_tokens=4000)
    with pytest.raises(SetupError, match="ibpo.max_candidate_tokens=4000 does not fit"):
        check_trainer_config(cfg, IBPOConfig(max_candidate_tokens=4000), tokenizer)
    cfg = _trainer_config(512, 2048, prompt_length=3000, max_model_len=8192, max_candidate_tokens=2000)
    with pytest.raises(SetupError, match="prompt_length=3000 is too small.*ibpo.max_candidate_tokens=2000"):
        check_trainer_config(cfg, IBPOConfig(max_candidate_tokens=2000), tokenizer)
    cfg = _trainer_config(512, 2048, prompt_length=6144, max_model_len=8192)
    assert check_trainer_config(cfg, IBPOConfig(), tokenizer).max_candidate_tokens == 2048  # room for whole ones


# ------------------------------------------------------------------ re-tokenisation
def test_budget_counts_retokenised_tokens(tokenizer):
    """Random generated ids decode to text that re-tokenises longer: cutting the generated ids would overrun
    the budget, cutting the re-tokenised text does not."""
    rng = np.random.default_rng(0)
    generated = rng.integers(4, len(tokenizer) - 1, size=3000).tolist()
    decode, encode = _decode(tokenizer), _encode(tokenizer)
    assert len(encode(decode(generated))) > len(generated)  # re-tokenises longer
    config = IBPOConfig(max_candidate_tokens=1000)
    on_text = render_candidate(generated, decode, config, encode)
    on_ids = render_candidate(generated, decode, config)
    marker = len(encode(TRUNCATION_MARKER.format(n=99999)))
    assert len(encode(on_text)) <= 1000 + marker + 2
    assert len(encode(on_ids)) > 1000 + marker + 2


# ------------------------------------------------------------------ prefix-sharing proxy
def test_shared_prefix_lengths_match_brute_force():
    rng = np.random.default_rng(3)
    stem = rng.integers(0, 5, size=40).tolist()
    prompts = [stem[: rng.integers(0, 40)] + rng.integers(0, 3, size=rng.integers(1, 30)).tolist() for _ in range(60)]
    for block in (1, 4, 16):
        expected = []
        for i, p in enumerate(prompts):
            best = max([common_prefix_length(p, q) for q in prompts[:i]], default=0)
            best = min(best, len(p) - 1)
            expected.append(best - best % block)
        assert shared_prefix_lengths(prompts, block) == expected
    assert shared_prefix_lengths([[1, 2, 3], [1, 2, 3]]) == [0, 2]  # the last token is always computed
    assert shared_prefix_fraction([]) == 0.0


def test_cpu_proxy_ranks_the_layouts(tokenizer):
    workload = build_workload(tokenizer, num_prompts=3, group_size=8, num_correct=2, response_tokens=200, seed=1)
    share = {}
    for name, layout in {"today": {}, "ref": {"candidate_order": "reference_first"},
                         "ref_group": {"candidate_order": "reference_first", "reference_rule": "per_group"}}.items():
        requests = correction_requests(tokenizer, workload, layout, max_candidate_tokens=200)
        assert len(requests) == 3 * 6
        share[name] = shared_prefix_fraction([chat_prompt_ids(tokenizer, r.messages) for r in requests])
    assert share["today"] < share["ref"] < share["ref_group"]
    assert len(zipf_text_ids(tokenizer, 123, np.random.default_rng(0))) == 123
