"""The ``hf`` rollout backend: request handling, generation numerics, weight loads, micro-batching, server.

Generation is checked against slow references: token-by-token log-probs from a plain forward pass,
and unbatched greedy decoding.
"""

from __future__ import annotations

import asyncio
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from verl_cpu.hf_rollout import (  # noqa: E402
    GenRequest,
    GenResult,
    HFGenerator,
    HFServer,
    MicroBatcher,
    SamplingSpec,
    cut_at_eos,
    left_pad,
    parse_sampling_spec,
    request_seed,
    resolve_max_tokens,
    server_actor_name,
    state_norm,
)

GREEDY = parse_sampling_spec({"temperature": 0})


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> str:
    from verl_cpu.tiny_assets import build_tiny_assets

    return build_tiny_assets(tmp_path_factory.mktemp("tiny"))["model"]


@pytest.fixture(scope="module")
def generator(tiny_dir) -> HFGenerator:
    return HFGenerator.from_pretrained(tiny_dir)


@pytest.fixture(scope="module")
def prompts(tiny_dir) -> list[list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    texts = ["What is 3 + 4?", "What is 123 * 45? Please reason step by step and put your final answer", "Hi"]
    return [
        list(
            tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=True)[
                "input_ids"
            ]
        )
        for t in texts
    ]


def _request(prompt, spec=GREEDY, max_tokens=8, want_logprobs=False, seed=None) -> GenRequest:
    return GenRequest(prompt_ids=prompt, spec=spec, max_tokens=max_tokens, want_logprobs=want_logprobs, seed=seed)


# ------------------------------------------------------------------------------------------------
# Pure request handling


def test_parse_sampling_spec_maps_vllm_conventions():
    assert parse_sampling_spec({"temperature": 0.0, "top_p": 0.5, "top_k": 7}) == SamplingSpec(False, 1.0, 1.0, 0, 1.0)
    spec = parse_sampling_spec({"temperature": 0.7, "top_p": 0.9, "top_k": -1, "repetition_penalty": 1.1})
    assert spec == SamplingSpec(True, 0.7, 0.9, 0, 1.1)
    assert parse_sampling_spec({"temperature": 1.0, "top_k": 20}).top_k == 20
    assert parse_sampling_spec({"max_tokens": 3, "ignore_eos": False}).do_sample  # defaults: temperature 1


@pytest.mark.parametrize(
    "params, match",
    [
        ({"stop": ["\n"]}, "unsupported sampling params \\['stop'\\]"),
        ({"ignore_eos": True}, "ignore_eos"),
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
    ],
)
def test_parse_sampling_spec_rejects_bad_params_by_name(params, match):
    with pytest.raises(ValueError, match=match):
        parse_sampling_spec(params)


def test_resolve_max_tokens_follows_vllm_server():
    # Explicit max_tokens / max_new_tokens win, clamped to the room left in the context.
    assert resolve_max_tokens({"max_tokens": 5}, 10, 64, 16, 100) == 5
    assert resolve_max_tokens({"max_new_tokens": 7}, 10, 64, 16, 100) == 7
    assert resolve_max_tokens({"max_tokens": 500}, 10, 64, 16, 100) == 90
    assert resolve_max_tokens({"max_tokens": 0}, 10, 64, 16, 100) == 1
    # Default: response_length, reduced when the prompt overflows its budget (multi-turn).
    assert resolve_max_tokens({}, 10, 64, 16, 100) == 16
    assert resolve_max_tokens({}, 70, 64, 16, 100) == 10
    with pytest.raises(ValueError, match="no room to generate"):
        resolve_max_tokens({}, 100, 64, 16, 100)


def test_cut_at_eos_and_left_pad():
    eos = frozenset({2, 9})
    assert cut_at_eos([5, 6, 2, 7, 2], eos, 10) == ([5, 6, 2], "stop")
    assert cut_at_eos([5, 9, 2], eos, 10) == ([5, 9], "stop")
    assert cut_at_eos([5, 6, 7, 2], eos, 3) == ([5, 6, 7], "length")
    ids, mask = left_pad([[1, 2, 3], [4]], pad_id=0)
    assert ids.tolist() == [[1, 2, 3], [0, 0, 4]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_server_actor_name_is_unique_per_role():
    names = {server_actor_name(0), server_actor_name(1), server_actor_name(0, "reward"), server_actor_name(0, "", "_x")}
    assert len(names) == 4 and server_actor_name(3) == "hf_server_3"


# ------------------------------------------------------------------------------------------------
# Generation against slow references


def _reference_logprobs(model, prompt: list[int], response: list[int], temperature: float) -> list[float]:
    """Unbatched forward pass over prompt+response; log-softmax of temperature-scaled logits."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    out = []
    for i, tok in enumerate(response):
        step_logits = logits[len(prompt) + i - 1] / temperature
        out.append(float(torch.log_softmax(step_logits, dim=-1)[tok]))
    return out


def test_batched_greedy_equals_unbatched_greedy(generator, prompts):
    batched = generator.generate_batch([_request(p) for p in prompts])
    for prompt, result in zip(prompts, batched, strict=True):
        alone = generator.generate_batch([_request(prompt)])[0]
        assert result.token_ids == alone.token_ids
        assert len(result.token_ids) == 8 and result.finish_reason in ("length", "stop")


def test_sampled_logprobs_match_forward_pass(generator, prompts):
    torch.manual_seed(0)
    spec = parse_sampling_spec({"temperature": 0.7, "top_p": 1.0, "top_k": -1})
    results = generator.generate_batch([_request(p, spec, max_tokens=6, want_logprobs=True) for p in prompts])
    for prompt, result in zip(prompts, results, strict=True):
        expected = _reference_logprobs(generator.model, prompt, result.token_ids, temperature=0.7)
        assert result.log_probs == pytest.approx(expected, abs=2e-4)


def test_greedy_logprobs_match_forward_pass(generator, prompts):
    result = generator.generate_batch([_request(prompts[0], want_logprobs=True)])[0]
    assert result.log_probs == pytest.approx(
        _reference_logprobs(generator.model, prompts[0], result.token_ids, 1.0), abs=2e-4
    )


def test_logprobs_only_for_requests_that_ask(generator, prompts):
    results = generator.generate_batch([_request(prompts[0], want_logprobs=True), _request(prompts[1])])
    assert len(results[0].log_probs) == len(results[0].token_ids) and results[1].log_probs is None


def test_top_k_1_and_tiny_top_p_reduce_sampling_to_greedy(generator, prompts):
    greedy = [r.token_ids for r in generator.generate_batch([_request(p) for p in prompts])]
    for params in ({"temperature": 1.5, "top_k": 1}, {"temperature": 1.5, "top_p": 1e-6}):
        spec = parse_sampling_spec(params)
        torch.manual_seed(1)
        sampled = [r.token_ids for r in generator.generate_batch([_request(p, spec) for p in prompts])]
        assert sampled == greedy, params


HOT = parse_sampling_spec({"temperature": 3.0, "top_p": 1.0, "top_k": -1})  # near-uniform: seeds must matter


def test_seeded_sampling_reproduces_and_seeds_differ(generator, prompts):
    """Two identical seeded calls give identical tokens whatever torch's global RNG holds; other seeds differ;
    a request's tokens do not depend on which other requests share its batch."""
    def run(seeds, global_seed, which=(0, 1, 2)):
        torch.manual_seed(global_seed)
        reqs = [_request(prompts[i], HOT, max_tokens=12, seed=s) for i, s in zip(which, seeds)]
        return [r.token_ids for r in generator.generate_batch(reqs)]

    first = run([11, 12, 13], global_seed=0)
    assert run([11, 12, 13], global_seed=999) == first
    other = run([21, 22, 23], global_seed=0)
    assert all(a != b for a, b in zip(first, other))
    assert run([12], global_seed=5, which=(1,)) == [first[1]]  # alone vs batched with two others
    assert run([12, 11], global_seed=5, which=(1, 0)) == [first[1], first[0]]  # order in the batch


def test_request_seed_is_stable_and_sensitive():
    assert request_seed(1, "det-3", 2) == request_seed(1, "det-3", 2)
    assert 0 <= request_seed(1, "det-3", 2) < 2**63
    seeds = {request_seed(1, "det-3", 2), request_seed(2, "det-3", 2), request_seed(1, "det-4", 2),
             request_seed(1, "det-3", 3), request_seed(1, "det-3", None)}
    assert len(seeds) == 5


def test_per_request_max_tokens_and_eos_cut(tiny_dir, generator, prompts):
    results = generator.generate_batch([_request(prompts[0], max_tokens=3), _request(prompts[1], max_tokens=8)])
    assert [len(r.token_ids) for r in results] == [3, 8]
    assert results[0].finish_reason == "length"
    # Declare the 3rd greedy token an EOS: generation must stop right after its first occurrence.
    full = generator.generate_batch([_request(prompts[0], max_tokens=8)])[0].token_ids
    stop_token = full[2]
    custom = HFGenerator(generator.model, eos_ids=[stop_token], pad_id=generator.pad_id)
    cut = custom.generate_batch([_request(prompts[0], max_tokens=8)])[0]
    assert cut.token_ids == full[: full.index(stop_token) + 1] and cut.finish_reason == "stop"


def test_batch_must_share_sampling_spec(generator, prompts):
    other = parse_sampling_spec({"temperature": 0.5})
    with pytest.raises(ValueError, match="share one sampling spec"):
        generator.generate_batch([_request(prompts[0]), _request(prompts[1], other)])


# ------------------------------------------------------------------------------------------------
# Weight loads


def test_load_weights_replaces_every_tensor_and_reports_the_loaded_norm(tiny_dir):
    gen = HFGenerator.from_pretrained(tiny_dir)
    new_state = {k: v.detach().clone() * 1.5 for k, v in gen.model.state_dict().items()}
    norm = gen.load_weights(new_state)
    assert norm == pytest.approx(state_norm(new_state.values()), rel=1e-9)
    for name, tensor in gen.model.state_dict().items():
        assert torch.equal(tensor, new_state[name]), name
    assert gen.param_norm() == pytest.approx(norm, rel=1e-9)


def test_load_weights_allows_tied_alias_only(tiny_dir):
    gen = HFGenerator.from_pretrained(tiny_dir)
    state = {k: v.detach().clone() for k, v in gen.model.state_dict().items()}
    assert gen.model.config.tie_word_embeddings
    tied = dict(state)
    del tied["lm_head.weight"]  # aliases model.embed_tokens.weight
    gen.load_weights(tied)
    partial = dict(state)
    del partial["model.norm.weight"]
    with pytest.raises(ValueError, match="did not send: \\['model.norm.weight'\\]"):
        gen.load_weights(partial)
    with pytest.raises(ValueError, match="lacks: \\['bogus.weight'\\]"):
        gen.load_weights({**state, "bogus.weight": torch.zeros(1)})
    bad = {**state, "model.norm.weight": torch.zeros(3)}
    with pytest.raises(ValueError, match="model.norm.weight has shape \\(3,\\)"):
        gen.load_weights(bad)


def test_state_norm_reference():
    tensors = [torch.tensor([3.0, 4.0]), torch.tensor([[12.0]]), torch.tensor([7])]  # ints are skipped
    assert state_norm(tensors) == pytest.approx(13.0)


# ------------------------------------------------------------------------------------------------
# Micro-batcher


def _spec(t: float) -> SamplingSpec:
    return parse_sampling_spec({"temperature": t})


class _Recorder:
    """A batch function that records the batches it receives and echoes prompts back."""

    def __init__(self, fail_when=None):
        self.batches: list[list[int]] = []
        self.fail_when = fail_when

    def __call__(self, requests: list[GenRequest]) -> list[GenResult]:
        firsts = [r.prompt_ids[0] for r in requests]
        self.batches.append(firsts)
        if self.fail_when is not None and self.fail_when in firsts:
            raise RuntimeError(f"boom {firsts}")
        return [GenResult(token_ids=r.prompt_ids[::-1], log_probs=None, finish_reason="length") for r in requests]


async def _submit_all(batcher, requests):
    return await asyncio.gather(*[batcher.submit(r) for r in requests], return_exceptions=True)


def test_micro_batcher_groups_concurrent_requests_by_spec_and_size():
    rec = _Recorder()
    batcher = MicroBatcher(rec, max_batch_size=3, window_s=0.01)
    reqs = [_request([i, 100 + i], _spec(0.5 if i % 2 else 1.0)) for i in range(7)]
    results = asyncio.run(_submit_all(batcher, reqs))
    assert [r.token_ids for r in results] == [[100 + i, i] for i in range(7)]  # each caller gets its own result
    assert sorted(sum(rec.batches, [])) == list(range(7))
    for batch in rec.batches:
        assert len(batch) <= 3 and len({i % 2 for i in batch}) == 1  # one spec per batch
    assert rec.batches[0] == [0, 2, 4]  # arrival order within a spec
    assert batcher.batch_sizes == [len(b) for b in rec.batches] and len(rec.batches) == 3


def test_micro_batcher_delivers_errors_to_the_failing_batch_only():
    rec = _Recorder(fail_when=1)
    batcher = MicroBatcher(rec, max_batch_size=2, window_s=0.01)
    results = asyncio.run(_submit_all(batcher, [_request([i]) for i in range(4)]))
    assert [type(r) for r in results[:2]] == [RuntimeError, RuntimeError]
    assert [r.token_ids for r in results[2:]] == [[2], [3]]


# ------------------------------------------------------------------------------------------------
# The server class, in process (the Ray actor wrapper is exercised by the e2e test)


@pytest.fixture(scope="module")
def rollout_and_model_config(tiny_dir):
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    with initialize_config_module("verl.trainer.config", version_base=None):
        cfg = compose(
            "ppo_trainer",
            overrides=[
                f"actor_rollout_ref.model.path={tiny_dir}",
                "actor_rollout_ref.rollout.name=hf",
                "data.max_prompt_length=64",
                "data.max_response_length=8",
            ],
        )
    OmegaConf.resolve(cfg)  # as verl's TaskRunner does before handing sub-configs to workers
    return cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.model


def test_server_generates_batches_and_syncs_weights(rollout_and_model_config, prompts):
    rollout_cfg, model_cfg = rollout_and_model_config
    server = HFServer(rollout_cfg, model_cfg, replica_rank=0, name="hf_server_0")

    async def scenario():
        greedy = {"temperature": 0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
        outs = await asyncio.gather(
            *[
                server.generate(prompt_ids=p, sampling_params=dict(greedy), request_id=str(i))
                for i, p in enumerate(prompts)
            ]
        )
        before = server.weight_stats()
        state = {k: v.detach().clone() * 0.5 for k, v in server.generator.model.state_dict().items()}
        norm = await server.update_weights(state, global_steps=3)
        after_out = await server.generate(prompt_ids=prompts[0], sampling_params=dict(greedy), request_id="x")
        return outs, before, norm, after_out

    outs, before, norm, after_out = asyncio.run(scenario())
    assert all(len(o.token_ids) == 8 and len(o.log_probs) == 8 and o.stop_reason == "completed" for o in outs)
    assert outs[0].extra_fields == {"global_steps": None}
    assert before["batch_sizes"] == [3]  # three concurrent requests, one generate call
    assert norm == pytest.approx(before["param_norm"] * 0.5, rel=1e-6)
    assert server.weight_stats()["num_weight_updates"] == 1
    assert after_out.extra_fields == {"global_steps": 3}
    with pytest.raises(ValueError, match="multimodal"):
        asyncio.run(server.generate(prompt_ids=prompts[0], sampling_params={}, request_id="m", image_data=[object()]))
    with pytest.raises(ValueError, match="unsupported sampling params"):
        asyncio.run(server.generate(prompt_ids=prompts[0], sampling_params={"n": 2}, request_id="n"))


def _sampled_outputs(rollout_cfg, model_cfg, prompts, seed: int, request_ids: list[str]) -> list[list[int]]:
    """A fresh server's sampled responses: the n=3 samples of prompt 0, then prompt 1, at step 4."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.merge(rollout_cfg, {"seed": seed})
    server = HFServer(cfg, model_cfg, replica_rank=0, name="hf_server_0")
    hot = {"temperature": 3.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": False}

    async def scenario():
        await server.set_global_steps(4)
        order = [prompts[0], prompts[0], prompts[0], prompts[1]]
        outs = await asyncio.gather(*[server.generate(prompt_ids=p, sampling_params=dict(hot), request_id=rid)
                                      for p, rid in zip(order, request_ids)])
        return [o.token_ids for o in outs]

    return asyncio.run(scenario())


def test_server_sampling_is_reproducible_across_identical_runs(rollout_and_model_config, prompts):
    """Identical runs (same rollout.seed, same requests, same step) draw identical tokens even with fresh uuid
    request ids (identity = prompt + occurrence); another rollout.seed draws others; verl's full_determinism
    ids ("det-<index>") are used as the identity directly."""
    rollout_cfg, model_cfg = rollout_and_model_config
    torch.manual_seed(0)
    a = _sampled_outputs(rollout_cfg, model_cfg, prompts, seed=7, request_ids=["u1", "u2", "u3", "u4"])
    torch.manual_seed(1)
    b = _sampled_outputs(rollout_cfg, model_cfg, prompts, seed=7, request_ids=["v1", "v2", "v3", "v4"])
    assert a == b
    assert len({tuple(t) for t in a[:3]}) == 3  # the n samples of one prompt get different streams
    c = _sampled_outputs(rollout_cfg, model_cfg, prompts, seed=8, request_ids=["u1", "u2", "u3", "u4"])
    assert all(x != y for x, y in zip(a, c))
    det = [f"det-{i}" for i in range(4)]
    assert (_sampled_outputs(rollout_cfg, model_cfg, prompts, seed=7, request_ids=det)
            == _sampled_outputs(rollout_cfg, model_cfg, prompts, seed=7, request_ids=det))
