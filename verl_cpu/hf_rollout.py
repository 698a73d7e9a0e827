"""An ``hf`` rollout backend for the pinned verl: transformers ``generate`` behind verl's server protocol.

The pinned verl only ships server rollouts (vLLM, SGLang, TRT-LLM), none of which runs without CUDA. This
module provides the same three pieces those backends provide, so verl's agent loop, load balancer
and checkpoint manager drive it unchanged:

* :class:`HFServer` — a Ray actor (one per replica, ``num_cpus=0`` so it takes no logical CPU from
  verl's placement groups) holding the HF model in fp32. ``generate(prompt_ids, sampling_params,
  request_id) -> TokenOutput`` is token-in/token-out like ``vLLMHttpServer.generate``. Concurrent
  requests (the agent loop sends one per sample) are grouped by an asyncio micro-batcher into one
  left-padded ``model.generate`` call. Weight sync is :meth:`HFServer.update_weights`; the memory
  lifecycle methods (``sleep``/``wake_up``/...) are no-ops because the weights live in host memory.
* :class:`HFReplica` — the ``RolloutReplica`` that launches the servers (``RolloutReplicaRegistry``).
* :class:`HFServerAdapter` — the ``BaseRollout`` living in each actor worker
  (``_ROLLOUT_REGISTRY[("hf", "async")]``): on verl's ``naive`` (colocated) weight sync it gathers the
  trainer's full tensors and sends them to its replica's server through Ray.

Set ``IBPO_CPU_ROLLOUT_DEBUG=1`` to print, on every sync, the L2 norm of the weights the actor sent
and of the weights the server holds afterwards (the e2e test uses it to prove the rollout really
receives the updated policy). Text only; tensor/pipeline parallel size 1 per replica.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import math
import os
import threading
import time
from typing import Any, AsyncIterable, Callable, Iterable, Optional

import torch

logger = logging.getLogger(__name__)

DEBUG_ENV = "IBPO_CPU_ROLLOUT_DEBUG"
DEBUG_PREFIX = "[ibpo-hf-rollout]"

# Sampling keys the agent loop sends (temperature, top_p, top_k, repetition_penalty, logprobs), the
# length keys custom loops may send, and ignore_eos=False. Anything else is rejected by name rather
# than silently ignored (vLLM would honour it; this backend would not).
SUPPORTED_SAMPLING_KEYS = frozenset(
    {"temperature", "top_p", "top_k", "repetition_penalty", "logprobs", "max_tokens", "max_new_tokens", "ignore_eos"}
)


def debug_enabled() -> bool:
    """Whether weight-sync norms are printed (``IBPO_CPU_ROLLOUT_DEBUG=1``)."""
    return os.environ.get(DEBUG_ENV, "0").lower() in ("1", "true", "yes")


def state_norm(tensors: Iterable[torch.Tensor]) -> float:
    """L2 norm over all floating-point tensors, accumulated in float64."""
    total = 0.0
    for t in tensors:
        if t.is_floating_point():
            total += float(t.detach().double().pow(2).sum())
    return math.sqrt(total)


def server_actor_name(replica_rank: int, role: str = "", name_suffix: str = "") -> str:
    """Ray actor name of a replica's server; the adapter finds its server by the same name."""
    middle = f"{role}_" if role else ""
    return f"hf_server_{middle}{replica_rank}{name_suffix}"


# ---------------------------------------------------------------------------------------------
# Pure request handling
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SamplingSpec:
    """Normalised sampling parameters; requests with equal specs can share one ``generate`` call."""

    do_sample: bool
    temperature: float
    top_p: float
    top_k: int
    repetition_penalty: float


@dataclasses.dataclass
class GenRequest:
    """One generation request after validation."""

    prompt_ids: list[int]
    spec: SamplingSpec
    max_tokens: int
    want_logprobs: bool
    seed: Optional[int] = None  # sampling seed of this request (None: drawn from torch's global RNG)


@dataclasses.dataclass
class GenResult:
    """One request's completion: response ids (EOS included when it stopped there) and log-probs."""

    token_ids: list[int]
    log_probs: Optional[list[float]]
    finish_reason: str  # "stop" (EOS) or "length"


def parse_sampling_spec(sampling_params: dict[str, Any]) -> SamplingSpec:
    """Map verl/vLLM sampling params to a :class:`SamplingSpec`.

    ``temperature == 0`` means greedy; ``top_k <= 0`` and ``top_p >= 1`` mean "no truncation" (vLLM's
    conventions). Unknown keys and out-of-range values raise ``ValueError`` naming the key.
    """
    unknown = set(sampling_params) - SUPPORTED_SAMPLING_KEYS
    if unknown:
        raise ValueError(
            f"hf rollout: unsupported sampling params {sorted(unknown)}; supported: {sorted(SUPPORTED_SAMPLING_KEYS)}"
        )
    if sampling_params.get("ignore_eos", False):
        raise ValueError("hf rollout: sampling param ignore_eos=True is not supported")
    temperature = float(sampling_params.get("temperature", 1.0))
    top_p = float(sampling_params.get("top_p", 1.0))
    top_k = int(sampling_params.get("top_k", -1))
    repetition_penalty = float(sampling_params.get("repetition_penalty", 1.0))
    if temperature < 0:
        raise ValueError(f"hf rollout: sampling param temperature={temperature} must be >= 0")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"hf rollout: sampling param top_p={top_p} must be in (0, 1]")
    if repetition_penalty <= 0:
        raise ValueError(f"hf rollout: sampling param repetition_penalty={repetition_penalty} must be > 0")
    do_sample = temperature > 0
    return SamplingSpec(
        do_sample=do_sample,
        temperature=temperature if do_sample else 1.0,
        top_p=top_p if do_sample else 1.0,
        top_k=max(top_k, 0) if do_sample else 0,
        repetition_penalty=repetition_penalty,
    )


def resolve_max_tokens(
    sampling_params: dict[str, Any], prompt_len: int, prompt_length: int, response_length: int, max_model_len: int
) -> int:
    """Number of tokens to generate, with vLLM-server semantics.

    An explicit ``max_tokens`` (or SGLang-style ``max_new_tokens``) wins; otherwise the response
    budget is ``min(response_length, prompt_length + response_length - prompt_len)``. The result is
    clamped to ``[1, max_model_len - prompt_len]``; a prompt that fills the context is an error.
    """
    room = max_model_len - prompt_len
    if room < 1:
        raise ValueError(
            f"hf rollout: prompt length ({prompt_len}) leaves no room to generate within the model's "
            f"maximum context length ({max_model_len})"
        )
    if sampling_params.get("max_tokens") is not None:
        max_tokens = int(sampling_params["max_tokens"])
    elif sampling_params.get("max_new_tokens") is not None:
        max_tokens = int(sampling_params["max_new_tokens"])
    else:
        max_tokens = min(response_length, prompt_length + response_length - prompt_len)
    return max(1, min(max_tokens, room))


def request_seed(base_seed: int, identity: str, step: Optional[int]) -> int:
    """A 63-bit sampling seed from the run's seed, the request's identity and the training step.

    Stable across processes and runs (blake2b, not Python's salted ``hash``), so two runs with the same
    ``rollout.seed`` draw the same tokens for the same request at the same step, and any change of one of
    the three gives an unrelated stream.
    """
    key = f"{int(base_seed)}|{identity}|{-1 if step is None else int(step)}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1


def prompt_digest(prompt_ids: list[int]) -> str:
    """A short stable digest of a token-id prompt (part of a request's identity)."""
    return hashlib.blake2b(",".join(map(str, prompt_ids)).encode(), digest_size=8).hexdigest()


class SeededSampler:
    """The last logits processor of a sampled ``generate``: draws each row's token from the processed
    distribution with that row's own ``torch.Generator`` and returns a one-hot score (``generate`` then runs
    in greedy mode and takes it), recording the log-probability of every drawn token.

    A row's tokens therefore depend only on its own seed and logits, not on which other requests share the
    batch (up to float differences of the padded forward, which move a draw only when its uniform number
    falls within rounding error of a CDF boundary).
    """

    def __init__(self, generators: list[torch.Generator]) -> None:
        self.generators = generators
        self.step_logprobs: list[torch.Tensor] = []  # one (batch,) tensor per generated position

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(scores.float(), dim=-1)
        probs = logp.exp()
        picks = torch.cat([torch.multinomial(probs[row], 1, generator=gen) for row, gen in enumerate(self.generators)])
        rows = torch.arange(scores.shape[0])
        self.step_logprobs.append(logp[rows, picks])
        onehot = torch.full_like(scores, float("-inf"))
        onehot[rows, picks] = 0.0
        return onehot


def sampling_processors(spec: SamplingSpec) -> list:
    """transformers' warpers for ``spec`` in ``generate``'s own order (temperature, top-k, top-p)."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    out = []
    if spec.temperature != 1.0:
        out.append(TemperatureLogitsWarper(spec.temperature))
    if spec.top_k > 0:
        out.append(TopKLogitsWarper(top_k=spec.top_k))
    if spec.top_p < 1.0:
        out.append(TopPLogitsWarper(top_p=spec.top_p))
    return out


def cut_at_eos(token_ids: list[int], eos_ids: frozenset[int], max_tokens: int) -> tuple[list[int], str]:
    """Truncate to ``max_tokens`` and just after the first EOS; return ``(ids, finish_reason)``."""
    ids = token_ids[:max_tokens]
    for i, tok in enumerate(ids):
        if tok in eos_ids:
            return ids[: i + 1], "stop"
    return ids, "length"


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad prompts into ``(input_ids, attention_mask)`` of shape ``(batch, longest)``."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        if prompt:
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            attention_mask[row, width - len(prompt) :] = 1
    return input_ids, attention_mask


# ---------------------------------------------------------------------------------------------
# Model wrapper (plain Python: testable without Ray)
# ---------------------------------------------------------------------------------------------


class HFGenerator:
    """A causal LM plus the lock that serialises generation and weight loads on it. ``suppress_ids``: token ids
    never sampled (the checkpoint's ``generation_config.suppress_tokens``, as transformers' ``generate`` reads it;
    a model that lists its EOS there writes every response to its full length)."""

    def __init__(self, model: torch.nn.Module, eos_ids: Iterable[int], pad_id: int,
                 suppress_ids: Iterable[int] = ()) -> None:
        self.model = model.eval()
        self.eos_ids = frozenset(int(i) for i in eos_ids)
        self.pad_id = int(pad_id)
        self.suppress_ids = sorted(int(i) for i in suppress_ids)
        self.lock = threading.Lock()

    @classmethod
    def from_pretrained(cls, path: str, trust_remote_code: bool = False) -> "HFGenerator":
        """Load a checkpoint in fp32 with SDPA attention; EOS ids come from its generation config."""
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.float32, attn_implementation="sdpa", trust_remote_code=trust_remote_code
        )
        gen_cfg = model.generation_config
        eos = gen_cfg.eos_token_id if gen_cfg.eos_token_id is not None else model.config.eos_token_id
        eos_ids = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
        pad = gen_cfg.pad_token_id if gen_cfg.pad_token_id is not None else model.config.pad_token_id
        pad = pad if pad is not None else (eos_ids[0] if eos_ids else 0)
        return cls(model, eos_ids, pad, gen_cfg.suppress_tokens or ())

    @property
    def max_model_len(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 1 << 30))

    def generate_batch(self, requests: list[GenRequest]) -> list[GenResult]:
        """One left-padded ``generate`` for requests sharing a :class:`SamplingSpec`.

        Sampling draws every request's tokens with its own ``torch.Generator`` seeded by ``request.seed``
        (:class:`SeededSampler`); a request without a seed gets one from torch's global RNG.
        """
        from transformers import GenerationConfig
        from transformers.generation.logits_process import LogitsProcessorList

        spec = requests[0].spec
        if any(r.spec != spec for r in requests):
            raise ValueError("hf rollout: a batch must share one sampling spec")
        want_logprobs = any(r.want_logprobs for r in requests)
        input_ids, attention_mask = left_pad([r.prompt_ids for r in requests], self.pad_id)
        sampler = None
        if spec.do_sample:
            seeds = [r.seed if r.seed is not None else int(torch.randint(0, 2**62, ())) for r in requests]
            sampler = SeededSampler([torch.Generator().manual_seed(seed) for seed in seeds])
        # Sampling runs generate in greedy mode on the sampler's one-hot scores (repetition penalty is still
        # applied by generate itself, before the warpers).
        gen_config = GenerationConfig(
            do_sample=False,
            repetition_penalty=spec.repetition_penalty,
            max_new_tokens=max(r.max_tokens for r in requests),
            eos_token_id=sorted(self.eos_ids) or None,
            pad_token_id=self.pad_id,
            suppress_tokens=self.suppress_ids or None,
            return_dict_in_generate=True,
            output_scores=want_logprobs and sampler is None,
        )
        processors = LogitsProcessorList([*sampling_processors(spec), sampler] if sampler is not None else [])
        with self.lock, torch.no_grad():
            out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=gen_config,
                                      logits_processor=processors)
        new_tokens = out.sequences[:, input_ids.shape[1] :]
        # Log-probs of the processed distribution (after temperature/top-k/top-p) the token was drawn from,
        # like vLLM's default logprobs_mode="processed_logprobs"; greedy: of the (penalised) model scores.
        if not want_logprobs:
            step_logprobs = None
        elif sampler is not None:
            step_logprobs = torch.stack(sampler.step_logprobs, dim=1)
        else:
            step_logprobs = torch.stack([torch.log_softmax(s.float(), dim=-1) for s in out.scores], dim=1)
        results = []
        for row, req in enumerate(requests):
            ids, reason = cut_at_eos(new_tokens[row].tolist(), self.eos_ids, req.max_tokens)
            log_probs = None
            if req.want_logprobs:
                if sampler is not None:
                    log_probs = step_logprobs[row, : len(ids)].tolist()
                else:
                    picked = step_logprobs[row, torch.arange(len(ids)), torch.tensor(ids, dtype=torch.long)]
                    log_probs = picked.tolist()
            results.append(GenResult(token_ids=ids, log_probs=log_probs, finish_reason=reason))
        return results

    def load_weights(self, state: dict[str, torch.Tensor]) -> float:
        """Copy trainer weights in; return the norm of this model's tensors under the sent names.

        Every sent name must be a parameter/buffer of this model, and names the trainer does not
        send are allowed only when they alias a sent tensor (tied embeddings), so a partial or
        misnamed sync fails loudly instead of leaving stale weights. The returned norm equals the
        norm of what was sent (up to dtype rounding) exactly when the load took effect.
        """
        own = self.model.state_dict()
        unexpected = sorted(set(state) - set(own))
        if unexpected:
            raise ValueError(f"hf rollout: weight sync sent names the rollout model lacks: {unexpected[:5]}")
        sent_ptrs = {own[name].data_ptr() for name in state}
        missing = sorted(n for n in set(own) - set(state) if own[n].data_ptr() not in sent_ptrs)
        if missing:
            raise ValueError(f"hf rollout: weight sync did not send: {missing[:5]}")
        for name, tensor in state.items():
            if tuple(tensor.shape) != tuple(own[name].shape):
                raise ValueError(
                    f"hf rollout: weight {name} has shape {tuple(tensor.shape)}, rollout model expects "
                    f"{tuple(own[name].shape)}"
                )
        with self.lock, torch.no_grad():
            for name, tensor in state.items():
                own[name].copy_(tensor.to(dtype=own[name].dtype))
            return state_norm(own[name] for name in state)

    def param_norm(self) -> float:
        """L2 norm over the model's state dict (tied weights count once per name, as the trainer sends them)."""
        return state_norm(self.model.state_dict().values())


# ---------------------------------------------------------------------------------------------
# Micro-batching of concurrent requests
# ---------------------------------------------------------------------------------------------


class MicroBatcher:
    """Groups requests that arrive within ``window_s`` (and while a batch runs) into one call.

    ``run_batch`` runs in a worker thread. Requests are batched only with requests of the same
    :class:`SamplingSpec`, in arrival order, at most ``max_batch_size`` at a time. An exception in a
    batch is delivered to every request of that batch.
    """

    def __init__(
        self, run_batch: Callable[[list[GenRequest]], list[GenResult]], max_batch_size: int, window_s: float
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size={max_batch_size} must be >= 1")
        self._run_batch = run_batch
        self._max_batch_size = max_batch_size
        self._window_s = window_s
        self._pending: list[tuple[GenRequest, asyncio.Future]] = []
        self._drainer: Optional[asyncio.Task] = None
        self.batch_sizes: list[int] = []  # for tests and debug logs

    async def submit(self, request: GenRequest) -> GenResult:
        future = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.ensure_future(self._drain())
        return await future

    def _take_batch(self) -> list[tuple[GenRequest, asyncio.Future]]:
        spec = self._pending[0][0].spec
        batch, rest = [], []
        for item in self._pending:
            if item[0].spec == spec and len(batch) < self._max_batch_size:
                batch.append(item)
            else:
                rest.append(item)
        self._pending = rest
        return batch

    async def _drain(self) -> None:
        while self._pending:
            await asyncio.sleep(self._window_s)
            batch = self._take_batch()
            self.batch_sizes.append(len(batch))
            try:
                results = await asyncio.to_thread(self._run_batch, [req for req, _ in batch])
            except Exception as exc:  # delivered to the callers; the drainer keeps serving others
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)


# ---------------------------------------------------------------------------------------------
# Ray actor: the server
# ---------------------------------------------------------------------------------------------


class HFServer:
    """Token-in/token-out generation server for one replica (a Ray actor, see :class:`HFReplica`)."""

    def __init__(self, config: Any, model_config: Any, replica_rank: int, name: str) -> None:
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.config import HFModelConfig, RolloutConfig

        self.replica_rank = replica_rank
        self.name = name
        if not isinstance(model_config, HFModelConfig):
            # As vLLMHttpServer does: resolves local_path (copy_to_local) and loads external libs.
            model_config = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        model_path = model_config.local_path or model_config.path
        self.generator = HFGenerator.from_pretrained(str(model_path), trust_remote_code=model_config.trust_remote_code)
        if not isinstance(config, RolloutConfig):
            config = omega_conf_to_dataclass(config, dataclass_type=RolloutConfig)
        self.prompt_length = int(config.prompt_length)
        self.response_length = int(config.response_length)
        self.max_model_len = int(config.max_model_len or self.generator.max_model_len)
        self.batcher = MicroBatcher(self.generator.generate_batch, max_batch_size=config.max_num_seqs, window_s=0.005)
        self.seed = int(config.seed)  # rollout.seed: with the request identity and step, seeds each request
        self._prompt_occurrences: dict[tuple[Optional[int], str], int] = {}
        self.global_steps: Optional[int] = None
        self.num_weight_updates = 0
        self._batches_reported = 0
        if debug_enabled():
            print(f"{DEBUG_PREFIX} {self.name} loaded {model_path}: param_norm={self.generator.param_norm():.6f}")

    # -- generation ------------------------------------------------------------------------------
    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Optional[list[Any]] = None,
        video_data: Optional[list[Any]] = None,
        audio_data: Optional[list[Any]] = None,
        mm_processor_kwargs: Optional[dict[str, Any]] = None,
        **kwargs: Any,
    ):
        """Generate a response for ``prompt_ids``; returns verl's ``TokenOutput``."""
        from verl.workers.rollout.replica import TokenOutput

        if image_data is not None or video_data is not None or audio_data is not None:
            raise ValueError(f"hf rollout: request {request_id} carries multimodal data; the hf backend is text only")
        params = dict(sampling_params)
        want_logprobs = bool(params.pop("logprobs", False))
        prompt_ids = [int(t) for t in prompt_ids]
        step = self.global_steps
        request = GenRequest(
            prompt_ids=prompt_ids,
            spec=parse_sampling_spec(params),
            max_tokens=resolve_max_tokens(
                params, len(prompt_ids), self.prompt_length, self.response_length, self.max_model_len
            ),
            want_logprobs=want_logprobs,
            seed=request_seed(self.seed, self.request_identity(request_id, prompt_ids, step), step),
        )
        result = await self.batcher.submit(request)
        return TokenOutput(
            token_ids=result.token_ids,
            log_probs=result.log_probs,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )

    def request_identity(self, request_id: str, prompt_ids: list[int], step: Optional[int]) -> str:
        """What identifies a request across identical runs.

        Under ``rollout.full_determinism=True`` verl's agent loop sends ``request_id="det-<sample index>"``:
        that is the identity. Otherwise request ids are fresh uuids, and the identity is the prompt's digest
        with the number of earlier requests for the same prompt at this step (the k-th of the n samples of a
        prompt): identical runs then draw the same set of responses per prompt, though which of the n
        identical rows gets which response follows arrival order.
        """
        if request_id.startswith("det-"):
            return request_id
        digest = prompt_digest(prompt_ids)
        if self._prompt_occurrences and next(iter(self._prompt_occurrences))[0] != step:
            self._prompt_occurrences.clear()  # a new step: counts start again
        k = self._prompt_occurrences.get((step, digest), 0)
        self._prompt_occurrences[(step, digest)] = k + 1
        return f"{digest}#{k}"

    # -- weight sync -----------------------------------------------------------------------------
    async def update_weights(self, state: dict[str, torch.Tensor], global_steps: Optional[int] = None) -> float:
        """Load the trainer's weights; returns the norm of the loaded tensors as the server now holds them."""
        norm = await asyncio.to_thread(self.generator.load_weights, state)
        self.num_weight_updates += 1
        if global_steps is not None:
            self.global_steps = global_steps
        if debug_enabled():
            batch_sizes = self.batcher.batch_sizes[self._batches_reported :]
            self._batches_reported = len(self.batcher.batch_sizes)
            print(
                f"{DEBUG_PREFIX} {self.name} weights updated: sync={self.num_weight_updates} "
                f"global_steps={global_steps} server_param_norm={norm:.6f} "
                f"generate_batch_sizes_since_last_sync={batch_sizes}"
            )
        return norm

    def weight_stats(self) -> dict[str, Any]:
        """Parameter norm, number of syncs received, and the batch sizes the micro-batcher formed."""
        return {
            "param_norm": self.generator.param_norm(),
            "num_weight_updates": self.num_weight_updates,
            "global_steps": self.global_steps,
            "batch_sizes": list(self.batcher.batch_sizes),
        }

    def get_server_address(self) -> tuple[str, str]:
        """No HTTP server: the 'address' is the Ray actor name (used only as a routing key)."""
        return "ray", self.name

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    # -- lifecycle: weights and cache live in host memory, so there is nothing to free or restore.
    async def wake_up(self, tags: Optional[list[str]] = None) -> None:
        """No-op (host memory is not released on sleep)."""

    async def sleep(self) -> None:
        """No-op (host memory is not released on sleep)."""

    async def clear_kv_cache(self) -> None:
        """No-op (transformers keeps no cache between calls)."""

    async def release_kv_cache(self) -> None:
        """No-op (transformers keeps no cache between calls)."""

    async def resume_kv_cache(self) -> None:
        """No-op (transformers keeps no cache between calls)."""

    async def wait_for_requests_to_drain(self) -> None:
        while self.batcher._pending:
            await asyncio.sleep(0.01)

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict:
        """Nothing to abort mid-flight: a ``generate`` call runs to completion (partial rollout unsupported)."""
        return {"aborted_count": 0, "request_ids": []}

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True) -> dict:
        return {"aborted": False, "request_id": request_id, "error": "hf rollout cannot abort a running request"}

    async def resume_generation(self) -> None:
        """No-op (requests are never paused)."""

    async def start_profile(self, **kwargs: Any) -> None:
        """No-op (no rollout profiler)."""

    async def stop_profile(self) -> None:
        """No-op (no rollout profiler)."""


# ---------------------------------------------------------------------------------------------
# Replica (driver/TaskRunner side) and adapter (actor-worker side)
# ---------------------------------------------------------------------------------------------


def _replica_base():
    from verl.workers.rollout.replica import RolloutReplica

    return RolloutReplica


class HFReplica(_replica_base()):
    """``RolloutReplica`` launching one :class:`HFServer` per replica (single node, TP=1)."""

    async def launch_servers(self) -> None:
        import ray

        if self.world_size != 1:
            raise ValueError(
                "hf rollout: one server per replica; set actor_rollout_ref.rollout.tensor_model_parallel_size=1 "
                f"(and data/pipeline parallel size 1); got replica world size {self.world_size}"
            )
        role = "reward" if self.is_reward_model else ("teacher" if self.is_teacher_model else "")
        name = server_actor_name(self.replica_rank, role, self.name_suffix)
        server = (
            ray.remote(HFServer)
            .options(name=name, num_cpus=0, max_concurrency=self.max_concurrency)
            .remote(config=self.config, model_config=self.model_config, replica_rank=self.replica_rank, name=name)
        )
        host, port = await server.get_server_address.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"{host}:{port}"


def _base_rollout():
    from verl.workers.rollout.base import BaseRollout

    return BaseRollout


class HFServerAdapter(_base_rollout()):
    """Rollout handle inside each actor worker: sends the trainer's weights to this rank's server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1) -> None:
        super().__init__(config, model_config, device_mesh)
        if device_mesh is not None:
            if device_mesh["infer_tp"].size() != 1 or device_mesh["infer_pp"].size() != 1:
                raise ValueError(
                    "hf rollout: tensor/pipeline parallel rollout is not supported; set "
                    "actor_rollout_ref.rollout.tensor_model_parallel_size=1"
                )
            self.replica_rank = device_mesh["dp"].get_local_rank()
        else:
            self.replica_rank = replica_rank
        if self.replica_rank < 0:
            raise ValueError("hf rollout: replica_rank is not set")
        self.is_leader_rank = True  # TP=PP=1: every rank is its replica's only rank
        self._server = None

    def _server_handle(self):
        import ray

        if self._server is None:
            self._server = ray.get_actor(server_actor_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        """No-op: the server never releases its weights or cache."""

    async def release(self) -> None:
        """No-op: the server never releases its weights or cache."""

    async def update_weights(
        self,
        weights: Iterable[tuple[str, torch.Tensor]] | AsyncIterable[tuple[str, torch.Tensor]],
        wire_format: str = "named_tensors",
        global_steps: Optional[int] = None,
        peft_config: Any = None,
        **kwargs: Any,
    ) -> None:
        """Materialise the trainer's full tensors on CPU and load them into this replica's server."""
        from verl.workers.rollout.utils import ensure_async_iterator

        if wire_format != "named_tensors":
            raise ValueError(f"hf rollout: only wire_format='named_tensors' is supported, got {wire_format!r}")
        if peft_config is not None:
            raise NotImplementedError("hf rollout: LoRA adapter sync is not supported; set model.lora.merge=True")
        start = time.perf_counter()
        state: dict[str, torch.Tensor] = {}
        # Every rank must walk the whole generator: DTensor.full_tensor() is a collective.
        async for name, tensor in ensure_async_iterator(weights):
            state[name] = tensor.detach().to("cpu", copy=True)
        sent_norm = state_norm(state.values())
        server_norm = await self._server_handle().update_weights.remote(state, global_steps)
        if debug_enabled():
            print(
                f"{DEBUG_PREFIX} adapter replica={self.replica_rank} sent {len(state)} tensors "
                f"global_steps={global_steps} actor_param_norm={sent_norm:.6f} server_param_norm={server_norm:.6f} "
                f"in {time.perf_counter() - start:.3f}s"
            )
