"""Counterfactual weighting on verl DataProtos (recipe/counterfactual/batch.py).

Batches are built by hand in verl's layout (left-padded prompts, right-padded responses) with the
locally built tiny tokenizer; a tiny Qwen2 model run in-process (float64) stands in for the actor's
``compute_log_prob`` with the same output convention: per-token response log-probs, (bs, response_length).
"""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from tensordict import TensorDict

from compute_accounting.flops import ModelShape, forward_flops, step_flops
from counterfactual.importance import (
    CounterfactualConfig,
    ResponseSegmentation,
    Span,
    answer_log_prob,
    response_weights,
    span_drops,
)
from recipe.counterfactual.batch import (
    FILLER,
    UNMASKED,
    CounterfactualPlan,
    build_masked_copies,
    compute_masked_log_probs,
    counterfactual_token_weights,
    make_decode_fn,
    measured_answer_log_probs,
    plan_counterfactuals,
    rows_with_signal,
)
from verl_cpu.tiny_assets import build_tiny_model, build_tiny_tokenizer
from verl import DataProto
from verl.utils import tensordict_utils as tu
from verl.utils.model import compute_position_id_with_mask

TEMPERATURE = 0.7

# (uid, reward, response text). Group "b" has equal rewards (skipped); in group "c" nothing is measurable.
ROWS = [
    ("a", 1.0, "Let me think step by step about this.\n\n1. She sold 48 clips in April.\n"
               "2. In May she sold 48 / 2 = 24 clips.\n3. So 48 + 24 = 72 clips.\n\n#### 72"),
    ("a", 0.0, "To find the total we add the two months. We get $48 + 20 = 68$ clips in total.\n"
               "Therefore the answer is $\\boxed{68}$."),
    ("b", 1.0, "First compute the sum of both numbers here. 3 + 4 = 7. Final Answer: 7"),
    ("b", 1.0, "Adding them up gives us the total. 3 + 4 = 7 #### 7"),
    ("c", 0.0, "We add the two numbers together now. 17 + 25 = 42 so that is our total count."),
    ("c", 1.0, "#### 42"),
]
PROMPTS = ["What is 48 + 24? Answer after ####.", "What is 3 + 4?", "What is 17 + 25?"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return build_tiny_tokenizer(tmp_path_factory.mktemp("cfb_tok"))


@pytest.fixture(scope="module")
def model(tmp_path_factory, tokenizer):
    m = build_tiny_model(tmp_path_factory.mktemp("cfb_model"), tokenizer).double().eval()
    return m


@pytest.fixture(scope="module")
def batch(tokenizer) -> DataProto:
    """Six rows in verl's layout, as the agent loop and reward step leave them."""
    pad = tokenizer.pad_token_id
    prompt_ids = []
    for uid, _, _ in ROWS:
        messages = [{"role": "user", "content": PROMPTS["abc".index(uid)]}]
        prompt_ids.append(
            tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        )
    response_ids = [tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id] for _, _, text in ROWS]
    p_len = max(map(len, prompt_ids))
    r_len = max(map(len, response_ids)) + 3  # some right padding on every row
    bs = len(ROWS)
    prompts = torch.full((bs, p_len), pad)
    responses = torch.full((bs, r_len), pad)
    attention_mask = torch.zeros(bs, p_len + r_len, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompt_ids, response_ids)):
        prompts[i, p_len - len(p) :] = torch.tensor(p)
        responses[i, : len(r)] = torch.tensor(r)
        attention_mask[i, p_len - len(p) : p_len + len(r)] = 1
    response_mask = attention_mask[:, p_len:].clone()
    scores = torch.zeros(bs, r_len)
    lengths = response_mask.sum(-1)
    for i, (_, reward, _) in enumerate(ROWS):
        scores[i, lengths[i] - 1] = reward
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": compute_position_id_with_mask(attention_mask),
            "response_mask": response_mask,
            "token_level_scores": scores,
        },
        non_tensors={
            "uid": np.array([u for u, _, _ in ROWS], dtype=object),
            "multi_modal_inputs": np.array([{} for _ in ROWS], dtype=object),
        },
        meta_info={"temperature": TEMPERATURE, "global_token_num": attention_mask.sum(-1).tolist()},
    )


def padded_response_log_probs(model, data: DataProto) -> torch.Tensor:
    """Stand-in for the actor's compute_log_prob on a padded DataProto: log p(response_t | prefix), (bs, R)."""
    with torch.no_grad():
        logits = model(
            input_ids=data.batch["input_ids"],
            attention_mask=data.batch["attention_mask"],
            position_ids=data.batch["position_ids"],
        ).logits.double() / data.meta_info["temperature"]
    p_len = data.batch["prompts"].shape[1]
    log_probs = torch.log_softmax(logits[:, p_len - 1 : -1], dim=-1)
    return log_probs.gather(-1, data.batch["responses"].unsqueeze(-1)).squeeze(-1)


def single_sequence_answer_log_prob(model, prompt: list[int], response: list[int], seg) -> float:
    """Slow reference: the unpadded sequence alone through the model, answer tokens' log-probs summed."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits.double()[0] / TEMPERATURE
    log_probs = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    token_lp = log_probs.gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1)
    return answer_log_prob(token_lp, seg).item()


class InProcessActor:
    """Stands in for ``actor_rollout_wg``: ``compute_log_prob`` on verl's no-padding TensorDict, returning
    ``log_probs`` as a jagged tensor where position t holds log p(token t+1), as verl's engine does."""

    def __init__(self, model):
        self.model = model
        self.calls = []

    def compute_log_prob(self, td: TensorDict) -> TensorDict:
        entropy, temperature = tu.get(td, "calculate_entropy"), tu.get(td, "temperature")
        self.calls.append({"rows": td.batch_size[0], "entropy": entropy, "temperature": temperature})
        input_ids, position_ids = td["input_ids"], td["position_ids"]
        values = []
        for ids, pos in zip(input_ids.unbind(), position_ids.unbind()):
            with torch.no_grad():
                logits = self.model(input_ids=ids[None], position_ids=pos[None]).logits.double()[0]
            logp = torch.log_softmax(logits / tu.get(td, "temperature"), dim=-1)
            values.append(logp.gather(-1, torch.roll(ids, -1).unsqueeze(-1)).squeeze(-1))
        nested = torch.nested.nested_tensor_from_jagged(torch.cat(values), offsets=input_ids.offsets())
        return tu.get_tensordict({"log_probs": nested})


# --------------------------------------------------------------------------------------------------


def test_group_skip_and_plan(batch, tokenizer):
    signal = rows_with_signal(batch, key="token_level_scores")
    assert signal.tolist() == [True, True, False, False, True, True]
    config = CounterfactualConfig()
    plan = plan_counterfactuals(batch, config, make_decode_fn(tokenizer), signal)
    segs = plan.segmentations
    assert segs[2] is None and segs[3] is None  # group "b": equal rewards, not even segmented
    assert segs[0].measurable and segs[1].measurable
    assert not segs[4].has_answer and segs[4].spans  # spans, but no answer to measure
    assert segs[5].has_answer and not segs[5].spans
    expected_rows = [0] * len(segs[0].spans) + [1] * len(segs[1].spans)
    assert plan.copy_rows.tolist() == expected_rows
    assert plan.copy_spans.tolist() == list(range(len(segs[0].spans))) + list(range(len(segs[1].spans)))
    capped = plan_counterfactuals(batch, config.replace(max_spans=2), make_decode_fn(tokenizer), signal)
    assert capped.copy_rows.tolist() == [0, 0, 1, 1]
    # controls without forward passes
    assert plan_counterfactuals(batch, config.replace(mode="random"), make_decode_fn(tokenizer), signal).num_copies == 0
    vanilla = plan_counterfactuals(batch, config.replace(mode="vanilla"), make_decode_fn(tokenizer), signal)
    assert vanilla.num_copies == 0 and all(s is None for s in vanilla.segmentations)
    with pytest.raises(ValueError, match="signal"):
        plan_counterfactuals(batch, config, make_decode_fn(tokenizer), signal[:3])


def test_masked_copies_layout(batch, tokenizer):
    plan = plan_counterfactuals(batch, CounterfactualConfig(), make_decode_fn(tokenizer), rows_with_signal(batch))
    pad = tokenizer.pad_token_id
    masked = build_masked_copies(batch, plan, pad)
    spans = [len(plan.segmentations[row].spans) for row in (0, 1)]
    assert plan.measured_rows.tolist() == [0, 1] and plan.num_measured == 2
    assert len(masked) == plan.num_forward_rows == plan.num_copies + 2 == sum(spans) + 2
    # per measured response: its unmasked row, then its masked copies in span order
    assert plan.forward_rows.tolist() == [0] * (spans[0] + 1) + [1] * (spans[1] + 1)
    assert plan.forward_spans.tolist() == [UNMASKED, *range(spans[0]), UNMASKED, *range(spans[1])]
    assert set(masked.batch.keys()) == {
        "prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask"
    }
    assert set(masked.non_tensor_batch) == {"multi_modal_inputs"}
    assert masked.meta_info["temperature"] == TEMPERATURE
    assert masked.meta_info["global_token_num"] == masked.batch["attention_mask"].sum(-1).tolist()
    p_len = batch.batch["prompts"].shape[1]
    for j, (row, k) in enumerate(zip(plan.forward_rows, plan.forward_spans)):
        if k == UNMASKED:  # the response itself, scored in the same call as its masked copies
            for key in masked.batch.keys():
                assert torch.equal(masked.batch[key][j], batch.batch[key][row]), key
            continue
        span = plan.segmentations[row].spans[k]
        src = batch.batch["responses"][row]
        got = masked.batch["responses"][j]
        changed = (got != src).nonzero().flatten().tolist()
        assert set(changed) <= set(range(span.start, span.end))
        assert (got[span.start : span.end] == pad).all()
        assert torch.equal(masked.batch["input_ids"][j, p_len:], got)
        assert torch.equal(masked.batch["input_ids"][j, :p_len], batch.batch["input_ids"][row, :p_len])
        for key in ("prompts", "attention_mask", "position_ids", "response_mask"):
            assert torch.equal(masked.batch[key][j], batch.batch[key][row]), key
    empty = plan_counterfactuals(batch, CounterfactualConfig(mode="random"), make_decode_fn(tokenizer))
    with pytest.raises(ValueError, match="no masked copies"):
        build_masked_copies(batch, empty, pad)


def test_weights_match_single_sequence_reference(batch, tokenizer, model):
    """The batched path (padded copies, plan indexing) gives the weights of a one-sequence-at-a-time reference."""
    config = CounterfactualConfig()
    plan = plan_counterfactuals(batch, config, make_decode_fn(tokenizer), rows_with_signal(batch))
    masked = build_masked_copies(batch, plan, tokenizer.pad_token_id)
    full_lp = padded_response_log_probs(model, batch)
    masked_lp = padded_response_log_probs(model, masked)
    weights, metrics = counterfactual_token_weights(batch, plan, config, full_lp, masked_lp)
    assert weights.shape == batch.batch["responses"].shape and weights.dtype == torch.float32

    p_len = batch.batch["prompts"].shape[1]
    all_drops = []
    for row in (0, 1):
        seg = plan.segmentations[row]
        prompt = batch.batch["prompts"][row][batch.batch["attention_mask"][row, :p_len].bool()].tolist()
        response = batch.batch["responses"][row, : seg.num_tokens].tolist()
        full = single_sequence_answer_log_prob(model, prompt, response, seg)
        masked_scores = []
        for span in seg.spans:
            copy = list(response)
            copy[span.start : span.end] = [tokenizer.pad_token_id] * span.length
            masked_scores.append(single_sequence_answer_log_prob(model, prompt, copy, seg))
        drops = span_drops(full, torch.tensor(masked_scores, dtype=torch.float64))
        all_drops.extend(drops.tolist())
        expected = response_weights(seg, config, drops)
        torch.testing.assert_close(weights[row, : seg.num_tokens].double(), expected, rtol=1e-5, atol=1e-6)
        assert weights[row, : seg.num_tokens].double().mean().item() == pytest.approx(1.0, abs=1e-5)
        assert (weights[row, seg.num_tokens :] == 1.0).all()  # padding stays neutral
    for row in (2, 3, 4, 5):  # skipped group, no answer marker, no spans
        assert (weights[row] == 1.0).all()

    assert metrics["counterfactual/masked_copies"] == plan.num_copies
    assert metrics["counterfactual/unmasked_rows"] == 2
    assert metrics["counterfactual/extra_forward_rows"] == plan.num_copies + 2 == len(masked)
    assert metrics["counterfactual/unmasked_abs_shift_mean"] < 1e-9  # float64, one model: the two calls agree
    assert metrics["counterfactual/weighted_responses"] == 2
    assert metrics["counterfactual/segmented_responses"] == 4
    assert metrics["counterfactual/no_answer_share"] == pytest.approx(1 / 4)
    spans = sum(len(plan.segmentations[r].spans) for r in (0, 1, 4, 5))
    assert metrics["counterfactual/spans_per_response"] == pytest.approx(spans / 4)
    assert metrics["counterfactual/distractor_share"] == pytest.approx(np.mean(np.array(all_drops) < 0))
    assert metrics["counterfactual/drop_mean"] == pytest.approx(np.mean(all_drops), rel=1e-4, abs=1e-7)
    arith = [(r, s) for r in (0, 1) for s in plan.segmentations[r].spans if s.kind == "arithmetic"]
    arith_weight = sum(weights[r, s.start : s.end].double().sum().item() for r, s in arith)
    expected_arith = arith_weight / sum(s.length for _, s in arith)
    assert metrics["counterfactual/weight_arithmetic_mean"] == pytest.approx(expected_arith, rel=1e-6)


def test_compute_masked_log_probs_through_verl_no_padding_format(batch, tokenizer, model):
    """Pad to the DP size, verl's left_right_2_no_padding / no_padding_2_padding round trip, unpad."""
    plan = plan_counterfactuals(batch, CounterfactualConfig(), make_decode_fn(tokenizer), rows_with_signal(batch))
    masked = build_masked_copies(batch, plan, tokenizer.pad_token_id)
    actor = InProcessActor(model)
    rows = plan.num_forward_rows
    divisor = 4 if rows % 4 else 3
    assert rows % divisor, "the padding path must be exercised"
    got = compute_masked_log_probs(actor, masked, size_divisor=divisor)
    padded_rows = rows + (-rows) % divisor
    assert actor.calls == [{"rows": padded_rows, "entropy": False, "temperature": TEMPERATURE}]
    expected = padded_response_log_probs(model, masked)
    valid = masked.batch["attention_mask"][:, batch.batch["prompts"].shape[1] :].bool()
    assert got.shape == expected.shape
    torch.testing.assert_close(got[valid].double(), expected[valid], rtol=1e-5, atol=1e-5)
    assert (got[~valid] == 0).all()


def test_controls_on_a_batch(batch, tokenizer, model):
    signal = rows_with_signal(batch)
    decode = make_decode_fn(tokenizer)
    base = CounterfactualConfig()
    plan = plan_counterfactuals(batch, base, decode, signal)
    masked = build_masked_copies(batch, plan, tokenizer.pad_token_id)
    full_lp = padded_response_log_probs(model, batch)
    masked_lp = padded_response_log_probs(model, masked)
    cf, _ = counterfactual_token_weights(batch, plan, base.replace(gradient_conservation=False), full_lp, masked_lp)
    inverted_cfg = base.replace(mode="inverted", gradient_conservation=False)
    inv, _ = counterfactual_token_weights(batch, plan, inverted_cfg, full_lp, masked_lp)
    for row in (0, 1):
        seg = plan.segmentations[row]
        r = seg.reasoning_end
        plain = [t for t in range(r) if not seg.is_formatting[t]]
        a, b = cf[row, plain], inv[row, plain]
        assert a.argmax() == b.argmin() or a[b.argmin()] == a.max()  # the most important becomes the least
        torch.testing.assert_close(a + b, torch.full_like(a, float(a.max() + a.min())))  # order reversed, range kept

    random_cfg = base.replace(mode="random")
    random_plan = plan_counterfactuals(batch, random_cfg, decode, signal)
    empty = torch.empty(0, batch.batch["responses"].shape[1])
    rnd, _ = counterfactual_token_weights(
        batch, random_plan, random_cfg, full_lp, empty, torch.Generator().manual_seed(0)
    )
    assert not torch.equal(rnd[0], torch.ones_like(rnd[0]))
    assert (rnd[2:] == 1.0).all()
    vanilla_cfg = base.replace(mode="vanilla")
    vanilla_plan = plan_counterfactuals(batch, vanilla_cfg, decode, signal)
    van, metrics = counterfactual_token_weights(batch, vanilla_plan, vanilla_cfg, full_lp, empty)
    assert (van == 1.0).all() and metrics["counterfactual/masked_copies"] == 0


def test_shape_errors_name_the_argument(batch, tokenizer):
    plan = plan_counterfactuals(batch, CounterfactualConfig(), make_decode_fn(tokenizer), rows_with_signal(batch))
    r_len = batch.batch["responses"].shape[1]
    with pytest.raises(ValueError, match="masked_log_probs"):
        counterfactual_token_weights(batch, plan, CounterfactualConfig(), torch.zeros(6, r_len), torch.zeros(1, r_len))
    with pytest.raises(ValueError,
                       match=r"masked_log_probs .* one unmasked row per unit of a measured response, 2, and 0 filler"):
        counterfactual_token_weights(  # the masked copies alone: the unmasked rows are missing
            batch, plan, CounterfactualConfig(), torch.zeros(6, r_len), torch.zeros(plan.num_copies, r_len)
        )
    with pytest.raises(ValueError, match="full_log_probs"):
        counterfactual_token_weights(
            batch, plan, CounterfactualConfig(), torch.zeros(5, r_len), torch.zeros(plan.num_forward_rows, r_len)
        )
    with pytest.raises(KeyError, match="prompt_id"):
        rows_with_signal(batch, group_key="prompt_id")


# ------------------------------------------------ log p(a | y) from the masked copies' own forward call


def scored(data: DataProto, table: torch.Tensor, prefix_weight: float, shift_per_row: float) -> torch.Tensor:
    """Stand-in for one forward call: response log-probs ``(len(data), R)``, each row's from its own tokens only
    (the token's entry of ``table`` and, through ``prefix_weight``, the valid tokens before it), plus
    ``shift_per_row`` x the rows in the call on every token: the batch a row is scored in moves its log-probs, as
    bf16 numerics with padding removal and micro-batching can."""
    ids, valid = data.batch["input_ids"], data.batch["attention_mask"].double()
    values = table[ids] * valid
    before = torch.cumsum(values, -1) - values
    log_probs = -torch.nn.functional.softplus(table[ids] + prefix_weight * torch.tanh(before))
    p_len = data.batch["prompts"].shape[1]
    return (log_probs[:, p_len:] + shift_per_row * len(data)) * data.batch["response_mask"]


def sequence_answer_log_prob(prompt: list[int], response: list[int], seg, table, prefix_weight: float) -> float:
    """Slow reference for :func:`scored` without the call's shift: one sequence, token by token, answer summed."""
    before = sum(float(table[t]) for t in prompt)
    total = 0.0
    for k, token in enumerate(response):
        if k >= seg.reasoning_end:
            context = prefix_weight * torch.tanh(torch.tensor(before, dtype=torch.float64))
            total -= float(torch.nn.functional.softplus(table[token] + context))
        before += float(table[token])
    return total


def test_drops_take_the_unmasked_answer_from_the_same_call(batch, tokenizer):
    """Answer log-probs that no span moves (each token's log-prob depends on the token alone) have every drop 0,
    however differently the training batch's call (``full_log_probs``) shifted them: the drops read log p(a | y)
    from the unmasked row scored beside the masked copies, not from ``full_log_probs``."""
    config = CounterfactualConfig()
    plan = plan_counterfactuals(batch, config, make_decode_fn(tokenizer), rows_with_signal(batch))
    masked = build_masked_copies(batch, plan, tokenizer.pad_token_id)
    table = torch.rand(len(tokenizer) + 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    full_lp = scored(batch, table, prefix_weight=0.0, shift_per_row=1e-3)  # 6 rows: shifted by 0.006 per token
    forward_lp = scored(masked, table, prefix_weight=0.0, shift_per_row=1e-3)
    assert len(masked) != len(batch)
    weights, metrics = counterfactual_token_weights(batch, plan, config, full_lp, forward_lp)
    assert metrics["counterfactual/drop_mean"] == 0.0 and metrics["counterfactual/distractor_share"] == 0.0
    for row in (0, 1):
        seg = plan.segmentations[row]
        unmasked, masked_answers = measured_answer_log_probs(plan, forward_lp)[row]
        assert torch.equal(span_drops(unmasked, masked_answers), torch.zeros(len(seg.spans), dtype=torch.float64))
        old_path = answer_log_prob(full_lp[row, : seg.num_tokens], seg) - masked_answers  # the two-call drop
        assert (old_path.abs() > 1e-3).all()
        expected = response_weights(seg, config, torch.zeros(len(seg.spans), dtype=torch.float64))
        torch.testing.assert_close(weights[row, : seg.num_tokens].double(), expected, rtol=1e-6, atol=1e-7)
    answer_tokens = [plan.segmentations[r].num_tokens - plan.segmentations[r].reasoning_end for r in (0, 1)]
    shift = 1e-3 * (len(masked) - len(batch))
    assert metrics["counterfactual/unmasked_abs_shift_mean"] == pytest.approx(abs(shift) * np.mean(answer_tokens))
    alone, alone_metrics = counterfactual_token_weights(batch, plan, config, None, forward_lp)
    assert torch.equal(alone, weights) and "counterfactual/unmasked_abs_shift_mean" not in alone_metrics


def random_case(seed: int):
    """A random batch (ids, lengths, padding), random segmentations and the plan ``plan_counterfactuals`` would
    list for them: every measurable row of a group with signal, one copy per span, row by row."""
    rng = np.random.default_rng(seed)
    bs, p_len, r_len, vocab = int(rng.integers(1, 7)), int(rng.integers(2, 6)), int(rng.integers(4, 24)), 50
    prompts, responses = torch.zeros(bs, p_len, dtype=torch.long), torch.zeros(bs, r_len, dtype=torch.long)
    attention_mask = torch.zeros(bs, p_len + r_len, dtype=torch.long)
    segmentations, copy_rows, copy_spans = [], [], []
    for row in range(bs):
        p, n = int(rng.integers(1, p_len + 1)), int(rng.integers(1, r_len + 1))
        prompts[row, p_len - p :] = torch.from_numpy(rng.integers(1, vocab, p))
        responses[row, :n] = torch.from_numpy(rng.integers(1, vocab, n))
        attention_mask[row, p_len - p : p_len + n] = 1
        if rng.random() < 0.2:  # a group without signal: not segmented
            segmentations.append(None)
            continue
        has_answer = rng.random() < 0.8
        reasoning_end = int(rng.integers(n // 3, n)) if has_answer else n
        cuts = sorted(set(rng.integers(0, reasoning_end + 1, 2 * int(rng.integers(0, 5))).tolist()))
        spans = tuple(Span(a, b, str(rng.choice(["arithmetic", "sentence"]))) for a, b in zip(cuts[::2], cuts[1::2]))
        seg = ResponseSegmentation(n, reasoning_end, has_answer, spans, tuple(bool(f) for f in rng.random(n) < 0.2))
        segmentations.append(seg)
        if seg.measurable:
            copy_rows += [row] * len(spans)
            copy_spans += list(range(len(spans)))
    data = DataProto.from_dict(tensors={
        "prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask, "position_ids": compute_position_id_with_mask(attention_mask),
        "response_mask": attention_mask[:, p_len:].clone()}, meta_info={"temperature": 1.0})
    plan = CounterfactualPlan(tuple(segmentations), np.asarray(copy_rows, dtype=np.int64),
                              np.asarray(copy_spans, dtype=np.int64))
    return data, plan, torch.from_numpy(rng.normal(size=vocab))


@pytest.mark.parametrize("seed", range(12))
def test_drops_and_weights_match_a_one_sequence_reference_on_random_batches(seed):
    data, plan, table = random_case(seed)
    config = CounterfactualConfig()
    if plan.num_copies:
        forward_lp = scored(build_masked_copies(data, plan, 0), table, prefix_weight=1.0, shift_per_row=1e-2)
    else:
        forward_lp = torch.empty(0, data.batch["responses"].shape[1])
    full_lp = scored(data, table, prefix_weight=1.0, shift_per_row=1e-2)
    weights, metrics = counterfactual_token_weights(data, plan, config, full_lp, forward_lp)
    measured = measured_answer_log_probs(plan, forward_lp) if plan.num_copies else {}
    p_len, all_drops = data.batch["prompts"].shape[1], []
    for row, seg in enumerate(plan.segmentations):
        if seg is None or not seg.measurable:
            assert row not in measured and (weights[row] == 1.0).all()
            continue
        prompt = data.batch["prompts"][row][data.batch["attention_mask"][row, :p_len].bool()].tolist()
        response = data.batch["responses"][row, : seg.num_tokens].tolist()
        full = sequence_answer_log_prob(prompt, response, seg, table, 1.0)
        drops = []
        for span in seg.spans:
            copy = response[: span.start] + [0] * span.length + response[span.end :]
            drops.append(full - sequence_answer_log_prob(prompt, copy, seg, table, 1.0))
        unmasked, masked_answers = measured[row]
        torch.testing.assert_close(span_drops(unmasked, masked_answers), torch.tensor(drops, dtype=torch.float64))
        expected = response_weights(seg, config, torch.tensor(drops, dtype=torch.float64), None,
                                    data.batch["response_mask"][row, : seg.num_tokens])
        torch.testing.assert_close(weights[row, : seg.num_tokens].double(), expected, rtol=1e-6, atol=1e-6)
        all_drops += drops
    assert metrics["counterfactual/masked_copies"] == len(all_drops)
    assert metrics["counterfactual/unmasked_rows"] == len(measured)
    assert metrics["counterfactual/extra_forward_rows"] == len(all_drops) + len(measured) == len(forward_lp)
    if all_drops:
        assert metrics["counterfactual/drop_mean"] == pytest.approx(np.mean(all_drops), abs=1e-9)
    else:
        assert "counterfactual/drop_mean" not in metrics


def run_trainer_step(batch, tokenizer, model, monkeypatch, log_prob_micro_batch: int | None, actor=None,
                     rollout: dict | None = None):
    """The counterfactual trainer's hook on ``batch`` with an in-process actor (1 GPU, ``log_prob_micro_batch`` rows
    per log-prob micro-batch, or the ``rollout`` options given): (trainer, the step's StepWork records, metrics)."""
    from recipe.counterfactual.counterfactual_trainer import RayCounterfactualTrainer

    trainer = RayCounterfactualTrainer.__new__(RayCounterfactualTrainer)
    trainer.config = OmegaConf.create({"algorithm": {}, "actor_rollout_ref": {
        "actor": {"ppo_epochs": 1}, "model": {},
        "rollout": rollout or {"log_prob_micro_batch_size_per_gpu": log_prob_micro_batch}}})
    trainer.counterfactual, trainer.tokenizer = CounterfactualConfig(), tokenizer
    trainer.actor_rollout_wg = actor or InProcessActor(model)
    trainer.actor_rollout_wg.world_size = getattr(trainer.actor_rollout_wg, "world_size", 1)
    trainer.use_reference_policy, trainer.gpu_time_coefficients = False, None
    trainer.model_shape = ModelShape(matmul_params=1000, num_layers=3, attention_dim=8)
    works = []
    plain = trainer._plain_step_work
    monkeypatch.setattr(trainer, "_plain_step_work", lambda b, **extra: works.append(plain(b, **extra)) or works[-1])
    step = copy.deepcopy(batch)
    step.batch["old_log_probs"] = padded_response_log_probs(model, batch).float()
    step.batch["advantages"] = torch.ones(step.batch["responses"].shape)
    metrics: dict = {}
    trainer.apply_counterfactual_weights(step, metrics, {})
    return trainer, works, metrics


def test_trainer_counts_the_unmasked_rows_as_forward_work(batch, tokenizer, model, monkeypatch):
    """``counterfactual/compute/step_flops`` (and the GPU-time model) price every row of the masked-copy call: the
    masked copies and the measured responses' unmasked rows (one slot of 16 rows holds both responses' units)."""
    trainer, works, metrics = run_trainer_step(batch, tokenizer, model, monkeypatch, log_prob_micro_batch=16)

    plan = plan_counterfactuals(batch, CounterfactualConfig(), make_decode_fn(tokenizer), rows_with_signal(batch), 16)
    lengths = batch.batch["attention_mask"].sum(-1)
    expected = lengths[torch.from_numpy(plan.forward_rows)].tolist()  # the call's rows, unmasked ones included
    assert len(expected) == plan.num_copies + 2 and plan.num_forward_rows < 16
    padded = expected + [expected[i % len(expected)] for i in range(16 - len(expected))]  # verl's padding to 16
    assert trainer.actor_rollout_wg.calls == [{"rows": 16, "entropy": False, "temperature": TEMPERATURE}]
    assert len(works) == 1 and list(works[0].forward_phases["counterfactual_forward"]) == padded
    assert metrics["counterfactual/compute/step_flops"] == step_flops(works[0], trainer.model_shape).total
    shape = trainer.model_shape
    assert step_flops(works[0], shape).own["counterfactual_forward"] == forward_flops(padded, shape) > 0
    assert metrics["counterfactual/extra_forward_rows"] == len(expected)
    assert metrics["counterfactual/masked_copies"] == plan.num_copies and metrics["counterfactual/unmasked_rows"] == 2


def test_the_filler_and_padding_rows_are_counted_as_forward_work(batch, tokenizer, model, monkeypatch):
    """With 6 log-prob rows per GPU, each response's unit (its unmasked row and at most 5 copies) is packed into a
    6-row slot (fillers where a unit does not fill one), and verl pads the call to a multiple of 6 by repeating its
    first rows: all of those rows run through the actor, and the step's forward work counts them."""
    trainer, works, metrics = run_trainer_step(batch, tokenizer, model, monkeypatch, log_prob_micro_batch=6)

    plan = plan_counterfactuals(batch, CounterfactualConfig(), make_decode_fn(tokenizer), rows_with_signal(batch), 6)
    own = batch.batch["attention_mask"].sum(-1)[torch.from_numpy(plan.forward_rows)].tolist()
    padded = own + [own[i % len(own)] for i in range((-len(own)) % 6)]
    assert len(own) % 6 != 0 and (plan.forward_spans == FILLER).any(), "the fixture must need fillers and padding"
    assert trainer.actor_rollout_wg.calls[0]["rows"] == len(padded) and len(padded) % 6 == 0
    assert list(works[0].forward_phases["counterfactual_forward"]) == padded
    assert metrics["counterfactual/extra_forward_rows"] == len(own) == plan.num_copies + 2 + 1  # one filler


class MicroBatchedActor(InProcessActor):
    """``actor_rollout_wg`` as verl 0.9.1 runs ``compute_log_prob``: the call's rows chunked over ``world_size``
    ranks (the dispatch), each rank's engine defaults (``infer_batch``: only keys the call did not set) and its
    micro-batches (``engine.utils.prepare_micro_batches``: dynamic by token budget, or fixed chunks). A row's
    log-probs carry an offset of its micro-batch (bf16's batch-dependent numerics, exaggerated): a drop whose two
    terms come from one micro-batch cancels it exactly; one whose terms come from two does not."""

    def __init__(self, model, world_size: int, **engine_defaults):
        super().__init__(model)
        self.world_size, self.engine_defaults, self.micro_batches = world_size, engine_defaults, []

    def compute_log_prob(self, td: TensorDict) -> TensorDict:
        from verl.workers.engine.utils import prepare_micro_batches

        n = td.batch_size[0]
        td["row_index"] = torch.arange(n)
        offsets = torch.zeros(n, dtype=torch.float64)
        for rank_td in tu.chunk_tensordict(td, self.world_size):
            for key, value in self.engine_defaults.items():
                if key not in rank_td.keys():
                    tu.assign_non_tensor(rank_td, **{key: value})
            micro, _ = prepare_micro_batches(rank_td)
            for mb in micro:
                rows = mb["row_index"].tolist()
                self.micro_batches.append(rows)
                offsets[rows] = 0.25 * len(self.micro_batches)
        out = super().compute_log_prob(td)
        values = out["log_probs"]
        shifted = [v + offsets[i] for i, v in enumerate(values.unbind())]
        return tu.get_tensordict({"log_probs": torch.nested.nested_tensor_from_jagged(
            torch.cat(shifted), offsets=values.offsets())})


@pytest.mark.parametrize("rollout, world_size", [
    # the run's log-prob batching is dynamic: verl's rearrange_micro_batches would scatter the rows by length
    ({"log_prob_use_dynamic_bsz": True, "log_prob_max_token_len_per_gpu": 500}, 1),
    ({"log_prob_use_dynamic_bsz": True, "log_prob_max_token_len_per_gpu": 300}, 2),
    ({"log_prob_micro_batch_size_per_gpu": 3}, 2),  # fixed chunks of 3 rows: a response's rows straddle them
])
def test_every_drop_reads_its_unmasked_row_from_its_copys_micro_batch(batch, tokenizer, model, monkeypatch, rollout,
                                                                        world_size):
    """Before: the call took the run's log-prob batching; under ``log_prob_use_dynamic_bsz`` verl's
    ``rearrange_micro_batches`` put a response's unmasked row and its copies in different micro-batches (and fixed
    chunks cut a response's rows apart), so every drop carried the difference of two micro-batches' numerics."""
    engine = {"use_dynamic_bsz": rollout.get("log_prob_use_dynamic_bsz", False),
              "max_token_len_per_gpu": rollout.get("log_prob_max_token_len_per_gpu"),
              "micro_batch_size_per_gpu": rollout.get("log_prob_micro_batch_size_per_gpu")}
    actor = MicroBatchedActor(model, world_size, **engine)
    _, _, metrics = run_trainer_step(batch, tokenizer, model, monkeypatch, None, actor=actor, rollout=rollout)
    _, _, reference = run_trainer_step(batch, tokenizer, model, monkeypatch, 64)  # one micro-batch, no offsets
    assert len(actor.micro_batches) > world_size  # the call was cut into several micro-batches
    # float32 log-probs (verl's): the offsets cancel to rounding; a drop across two micro-batches is off by >= 0.25
    assert metrics["counterfactual/drop_mean"] == pytest.approx(reference["counterfactual/drop_mean"], abs=1e-5)
    assert metrics["counterfactual/distractor_share"] == reference["counterfactual/distractor_share"]


@pytest.mark.parametrize("rollout, named", [
    ({"log_prob_micro_batch_size_per_gpu": 1}, "log_prob_micro_batch_size_per_gpu=1: "),
    ({"log_prob_use_dynamic_bsz": True, "log_prob_max_token_len_per_gpu": 150}, "holds 1 row(s) of "),
])
def test_a_micro_batch_that_cannot_hold_an_unmasked_row_and_a_copy_is_refused(batch, tokenizer, model, monkeypatch,
                                                                                rollout, named):
    with pytest.raises(ValueError, match=re.escape(named)):
        run_trainer_step(batch, tokenizer, model, monkeypatch, None, rollout=rollout)


@pytest.mark.parametrize("slot, sizes", [(4, [11, 1, 3]), (2, [5, 5]), (11, [11, 11, 2, 9]), (3, [1, 1, 1, 1])])
def test_the_layout_keeps_every_unit_in_one_slot(slot, sizes):
    """Units of at most ``slot - 1`` copies after their unmasked row; slot k is rows [k·slot, (k+1)·slot)."""
    segs = tuple(ResponseSegmentation(num_tokens=100, reasoning_end=90, has_answer=True,
                                      spans=tuple(Span(2 * i, 2 * i + 1, "sentence") for i in range(n)),
                                      is_formatting=(False,) * 100)
                 for n in sizes)
    rows = np.repeat(np.arange(len(sizes)), sizes)
    spans = np.concatenate([np.arange(n) for n in sizes])
    plan = CounterfactualPlan(segs, rows, spans, micro_batch_rows=slot)
    f_rows, f_spans = plan.forward_rows, plan.forward_spans
    units = 0
    for lo in range(0, len(f_rows), slot):
        unmasked = None
        for row, span in zip(f_rows[lo:lo + slot].tolist(), f_spans[lo:lo + slot].tolist()):
            if span == UNMASKED:
                unmasked, units = row, units + 1
            elif span >= 0:
                assert unmasked == row  # a copy follows its own row's unmasked row, in the same slot
    assert units == sum(-(-n // (slot - 1)) for n in sizes) == plan.num_unmasked_rows
    assert sorted(zip(rows.tolist(), spans.tolist())) == sorted(
        (r, k) for r, k in zip(f_rows.tolist(), f_spans.tolist()) if k >= 0)  # every copy once
    lp = torch.zeros(len(f_rows), 100)
    lp[:, 95] = torch.from_numpy(np.where(f_spans == UNMASKED, 0.0, -1.0 - f_spans))  # drop_s = 1 + s
    for row, (unmasked_lp, masked_lp) in measured_answer_log_probs(plan, lp).items():
        assert span_drops(unmasked_lp, masked_lp).tolist() == [1.0 + k for k in range(sizes[row])]
    with pytest.raises(ValueError, match="micro_batch_rows=1 must be an integer >= 2"):
        CounterfactualPlan(segs, rows, spans, micro_batch_rows=1)
