"""GSPO vs IBPO on the toy task at equal compute, in a plain PyTorch loop over the project's own ``ibpo/``
functions: cheap enough for the 25-35 seeds a 5-point difference needs (the verl path costs ~1 min of start-up
and 3-40 s per step per run on 2 CPU cores; this loop ~1-2 s per step).

What is the same as the verl path (``lab/scripts/compare_methods.py``): the warm start, the project's generator
(``verl_cpu.hf_rollout.HFGenerator``, every request sampled from its own seeded stream, ``request_seed``),
the scorer (``reward_fns.compute_score``), IBPO's steps B-C and joint rows (the trainer's own functions,
``ibpo.pipeline.correction_step``, ``joint_rewards``, ``joint_row_uids``: references, correction prompts,
alignment, rewrite filter, Δ, masks),
r' = r + λΔ and the group normalisation (``ibpo.advantages``), the GSPO loss at its on-policy point (one
update per step, so the sequence ratio is 1 and the clip inactive; ``seq-mean-token-mean``), AdamW with
verl's defaults (weight decay 0.01, gradient clip 1.0) and a linear warmup, the FLOP counter
(``compute_accounting.flops.step_flops``). What differs: no Ray, FSDP or separate old-log-prob forward (the ratio is
1 by construction, so that forward is neither run nor counted), fp32 on one thread.

Design (fixed before the runs, ``docs/evidence.md``): arms share seed s (warm start, data order, sampling
streams: the first n samples of a prompt at a step are the same requests in every arm); every arm runs to the
same FLOP budget and is evaluated greedily on a held-out test set of ``--test-size`` problems (disjoint seed)
when its cumulative FLOPs first reach each milestone (¼, ½, ¾, 1 of the budget). The primary metric is test
accuracy at the full budget, compared to GSPO G=n by the paired t over seeds. Nothing is selected on the test
set. ``--jobs N`` runs N (arm, seed) runs side by side in spawned one-thread workers (a run's result does not
depend on N); ``--max-steps K`` matches runs in steps instead. Run
``python -m lab.analysis.toy_loop --help``.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from lab.analysis.credit_localisation import line_index, localise, wrong_mask
from lab.analysis.equal_compute_report import read_json_object
from lab.analysis.run_protocol import (  # re-exported: the protocol's names live in one place
    DEFAULT_COST_MODEL,
    RUN_DEFINING_OPTIONS,
    budget_arm as recorded_budget_arm,
    option_flag,
    recorded_model,
    same_value,
    sha256_of_dir,
)
from ibpo.first_divergence import MASK_RULES
from ibpo.lookup_decoding import NgramParams, simulate_lookup
from ibpo.advantages import get_mask_sign, group_normalized_advantages, ibpo_sequence_advantages, signed_token_mask
from compute_accounting.flops import ModelShape, StepWork, step_flops
from compute_accounting.gpu_time import (
    GenerationWork,
    GpuTimeCoefficients,
    resolve_coefficients,
    roofline_coefficients,
    step_seconds,
)
from ibpo.mechanism import RewardDropAlarm, advantage_mechanism, group_kinds, localised_coverage, sibling_overlap
from ibpo.options import IBPOConfig
from ibpo.pipeline import (CorrectionRequest, CorrectionStep, Generated, correction_step, joint_rewards,
                           joint_row_uids, plan_corrections)
from ibpo.variants import get_variant
from lab.toy_tasks.tasks import ToyTask, get_task

TEST_SEED = 5000  # test problems: disjoint from SFT (1000+), RL train (0) and val (1) seeds
VAL_SEED = 1  # validation problems (hyperparameters are chosen on these, never on the test set)
EVAL_SPLITS = ("test", "val")
MAX_RESPONSE_TOKENS = 96  # the addition task's generation budget (lab.toy_tasks.tasks gives each task's)
MILESTONES = (0.5, 1.0)
BUDGET_UNITS = ("flops", "modelled_gpu_seconds")
WARMUP_UNITS = ("budget", "updates")
# What prices the toy's modelled GPU seconds: its realised work (token counts, decode passes, lookup drafts) as
# Qwen3-1.7B would run it on one H100 (roofline: compute_accounting.gpu_time), and vLLM's ngram defaults as
# the verl scripts set them for the correction pass.
TOY_COST_MODEL = ("H100-SXM", "Qwen3-1.7B")
TOY_MODEL_SHAPE = TOY_COST_MODEL[1]  # the shape the toy's work is priced at, whatever --cost-model names
assert DEFAULT_COST_MODEL == f"roofline:{TOY_COST_MODEL[0]}"  # every modelled-GPU-second result before 2f used it
TOY_NGRAM = NgramParams(prompt_lookup_min=2, prompt_lookup_max=5, num_speculative_tokens=8)


@dataclass(frozen=True)
class Arm:
    """One arm: GSPO (``ibpo`` None) or IBPO with ``ibpo``, G = ``group_multiplier`` · n."""

    name: str
    group_multiplier: int
    ibpo: IBPOConfig | None = None
    oracle_mask: bool = False  # GSPO advantages, each wrong response trained only on its truly wrong tokens
    localise: IBPOConfig | None = None  # GSPO advantages, wrong responses masked where the policy diverges
    localise_rule: str = "from_first"  # ibpo.first_divergence.MASK_RULES

    @property
    def is_baseline(self) -> bool:
        """A plain GSPO arm (any G): no correction pass, no localiser, no oracle mask; its step is a baseline step,
        the unit a budget in steps is meant in. Every other arm's step costs more (a correction pass, a localising
        prefill) or is a method under test (the oracle mask)."""
        return self.ibpo is None and self.localise is None and not self.oracle_mask

    @property
    def slug(self) -> str:
        return "".join(c if c.isalnum() else "_" for c in self.name.lower()).strip("_")


def default_arms() -> dict[str, Arm]:
    """Every arm the loop can run (``docs/evidence.md`` says which ran where). The first four are the first
    comparison's: GSPO G=n (the baseline), IBPO G=n (the paper's configuration: binary, β 0.5, λ 0.6, α 0.6,
    one reference, shaping through the reward, every wrong response corrected), IBPO G=n with the rewrite
    filter's second condition alone (a right correction closer to its reference than to y gets no Δ), GSPO G=4n.
    The rest are the ablation's (one option changed from IBPO G=n unless the name says more): the variants and
    λ, the mask signs, joint training, corrections only in mixed groups, shaping at the advantage level or
    capped at 0, two of them with a random half or quarter of the eligible wrong responses corrected
    (``ibpo.correction_fraction``, designed after the ablation's first results), and the oracle mask (no
    correction, zero correction cost: each wrong response trained only on the tokens a minimal edit into the
    task's right solution changes, ``negative_only``), and the first-divergence localiser (beyond the paper,
    designed for coverage: ``ibpo.first_divergence``; every wrong response's correction prompt, built by the
    paper's rule, is prefilled with the response and its tokens from the policy's first greedy disagreement on
    get the negative advantage; no correction is decoded)."""
    paper = IBPOConfig(variant="binary", lam=0.6, beta=0.5, alpha=0.6, num_references=1, shaping="reward",
                       correct_groups="all")  # every option that differs from the package default is pinned
    arms = [Arm("GSPO G=n", 1), Arm("IBPO G=n", 1, paper),
            Arm("IBPO G=n copy filter", 1, paper.replace(rewrite_condition="closer_to_reference")),
            Arm("GSPO G=4n", 4),
            Arm("binary lam 0.2", 1, paper.replace(lam=0.2)),
            Arm("binary lam 1.0", 1, paper.replace(lam=1.0)),
            Arm("ratio lam 0.3", 1, paper.replace(variant="ratio", lam=0.3)),
            Arm("ratio lam 0.6", 1, paper.replace(variant="ratio", lam=0.6))]
    for sign in ("negative_only", "complement_when_positive", "literal"):
        arms.append(Arm(f"mask {sign}", 1, paper.replace(variant="mask", mask_sign=sign)))
    arms += [Arm("joint training", 1, paper.replace(joint_training=True)),
             Arm("mixed groups only", 1, paper.replace(correct_groups="mixed")),
             Arm("advantage shaping", 1, paper.replace(shaping="advantage")),
             Arm("capped shaping", 1, paper.replace(shaping="reward_capped")),
             Arm("advantage shaping mixed", 1, paper.replace(shaping="advantage", correct_groups="mixed")),
             Arm("mask lam 0 mixed", 1, paper.replace(variant="mask", lam=0.0, correct_groups="mixed")),
             Arm("mask lam 0 mixed f=0.5", 1, paper.replace(variant="mask", lam=0.0, correct_groups="mixed",
                                                              correction_fraction=0.5)),
             Arm("mask lam 0 mixed f=0.25", 1, paper.replace(variant="mask", lam=0.0, correct_groups="mixed",
                                                               correction_fraction=0.25)),
             Arm("advantage shaping mixed f=0.5", 1, paper.replace(shaping="advantage", correct_groups="mixed",
                                                                     correction_fraction=0.5)),
             Arm("oracle mask", 1, oracle_mask=True),
             Arm("first divergence", 1, localise=paper),
             Arm("greedy disagreements", 1, localise=paper, localise_rule="disagreements")]
    return {a.name: a for a in arms}


def model_shape(model: torch.nn.Module) -> ModelShape:
    """``compute_accounting.flops.ModelShape`` of a loaded HF model (same rule as ``recipe.common.preflight.model.model_flop_shape``)."""
    embedding = model.get_input_embeddings().weight
    output = model.get_output_embeddings()
    tied = output is not None and output.weight is embedding
    matrices = int(sum(p.numel() for p in model.parameters() if p.dim() >= 2))
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return ModelShape(matmul_params=matrices if tied else matrices - int(embedding.numel()),
                      num_layers=int(cfg.num_hidden_layers), attention_dim=int(cfg.num_attention_heads * head_dim))


class Toy:
    """Tokenizer, scorer and problem sets shared by every run."""

    def __init__(self, model_dir: str | Path, train_size: int, test_size: int, train_seed: int = 0,
                 task: str = "addition", eval_split: str = "test"):
        from transformers import AutoTokenizer

        from reward_fns import compute_score

        if eval_split not in EVAL_SPLITS:
            raise ValueError(f"eval_split must be one of {EVAL_SPLITS}, got {eval_split!r}")
        self.model_dir = str(model_dir)
        self.task: ToyTask = get_task(task)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.train = self.task.sample_problems(train_size, train_seed)
        self.test = self.task.sample_problems(test_size, TEST_SEED)
        # what every evaluation of a run scores: the test set, or (to choose a hyperparameter) as many
        # validation problems, none of which is a train or test problem
        self.eval_problems = self.test if eval_split == "test" else validation_problems(
            self.task, test_size, exclude=set(self.train) | set(self.test))
        self._score = compute_score
        self.prompt_cache: dict = {}

    @property
    def max_tokens(self) -> int:
        """The task's response budget (the addition task's is the module's ``MAX_RESPONSE_TOKENS``)."""
        return MAX_RESPONSE_TOKENS if self.task.name == "addition" else self.task.max_response_tokens

    def truth(self, problem, response: list[int]) -> list[int]:
        """The right worked solution nearest to ``response`` (token edit distance; the task's only one for the
        addition task), with the EOS the policy ends a response with: what the oracle mask and the
        localisation compare a wrong response to."""
        from ibpo.alignment import normalized_edit_distance

        eos = [self.tokenizer.eos_token_id]
        candidates = [self.encode(text) + eos for text in self.task.right_solutions(problem)]
        return min(candidates, key=lambda ids: normalized_edit_distance(response, ids))

    def messages(self, problem) -> list[dict]:
        return [{"role": "user", "content": problem.prompt_text}]

    def encode_chat(self, messages: list[dict]) -> list[int]:
        return list(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"])

    def prompt_ids(self, problem) -> list[int]:
        if problem not in self.prompt_cache:
            self.prompt_cache[problem] = self.encode_chat(self.messages(problem))
        return self.prompt_cache[problem]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def score(self, ids: list[int], problem) -> float:
        return float(self._score(self.task.data_source, self.decode(ids), str(problem.answer))["score"])


def validation_problems(task: ToyTask, size: int, exclude: set, seed: int = VAL_SEED) -> list:
    """``size`` distinct problems of ``task`` drawn with ``seed``, none of them in ``exclude`` (the train and
    test sets), in the order drawn."""
    for draw in (2 * size, 8 * size, 32 * size):
        chosen: list = []
        seen: set = set()
        for problem in task.sample_problems(draw, seed):
            if problem not in exclude and problem not in seen:
                seen.add(problem)
                chosen.append(problem)
                if len(chosen) == size:
                    return chosen
    raise ValueError(f"task {task.name!r}: fewer than {size} validation problems outside the train and test sets")


def generate(generator, prompts: list[list[int]], seeds: list[int] | None, chunk: int = 128,
             max_tokens: int | None = None) -> list[list[int]]:
    """Sampled (temperature 1, per-request seeds) or greedy (``seeds`` None) responses, in chunks, of at most
    ``max_tokens`` tokens (default ``MAX_RESPONSE_TOKENS``)."""
    from verl_cpu.hf_rollout import GenRequest, parse_sampling_spec

    spec = parse_sampling_spec({"temperature": 1.0 if seeds is not None else 0.0, "top_p": 1.0, "top_k": -1})
    out: list[list[int]] = []
    for lo in range(0, len(prompts), chunk):
        reqs = [GenRequest(prompt_ids=p, spec=spec, max_tokens=max_tokens or MAX_RESPONSE_TOKENS, want_logprobs=False,
                           seed=None if seeds is None else seeds[lo + i]) for i, p in enumerate(prompts[lo:lo + chunk])]
        out += [r.token_ids for r in generator.generate_batch(reqs)]
    return out


def evaluate(toy: Toy, generator) -> np.ndarray:
    """Greedy correctness (0/1) on every evaluation problem (the test set unless the run chose ``--eval-split val``)."""
    problems = toy.eval_problems
    responses = generate(generator, [toy.prompt_ids(p) for p in problems], None, chunk=512, max_tokens=toy.max_tokens)
    return np.array([toy.score(r, p) for r, p in zip(responses, problems)], dtype=np.float64)


def gspo_loss(model: torch.nn.Module, prompts: list[list[int]], responses: list[list[int]],
              token_advantages: list[np.ndarray], pad_id: int) -> torch.Tensor:
    """GSPO's loss at the on-policy point, ``seq-mean-token-mean``: per row the mean over response tokens of
    −Â_t·s_t with s_t = sg(s_i)·π_t/sg(π_t) and s_i = 1 (one update per step on fresh samples), averaged over
    rows. Its gradient is −mean_i mean_t Â_t ∇log π_t, GSPO's (Eq. 22-24) with the ratio at 1."""
    rows = [p + r for p, r in zip(prompts, responses)]
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    adv = torch.zeros((len(rows), width), dtype=torch.float32)
    resp = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, (p, r, a) in enumerate(zip(prompts, responses, token_advantages)):
        ids[i, :len(p) + len(r)] = torch.tensor(p + r)
        attn[i, :len(p) + len(r)] = 1
        resp[i, len(p):len(p) + len(r)] = 1.0
        adv[i, len(p):len(p) + len(r)] = torch.as_tensor(a, dtype=torch.float32)
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
    logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return gspo_loss_from_log_probs(logp, adv[:, 1:], resp[:, 1:])


def gspo_loss_from_log_probs(log_probs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """GSPO's ``seq-mean-token-mean`` loss at the on-policy point from (rows, T) token log-probs, advantages and
    loss mask: mean over rows (with any valid token) of the mean over their tokens of −Â_t·π_t/sg(π_t). Equal to
    verl's ``compute_policy_loss_gspo`` with ``old_log_prob = log_prob`` and the update's rows as the global batch
    (no padding rows; tests/integration/test_recipe_correction.py checks value and gradient)."""
    ratio = torch.exp(log_probs - log_probs.detach())
    per_row = (-advantages * ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return per_row.mean()


@dataclass
class StepSamples:
    """One step's main generation: rows in group order (``group`` consecutive rows per problem)."""

    problems: list  # per row, its problem
    prompts: list[list[int]]
    responses: list[list[int]]
    rewards: np.ndarray
    group_ids: list[int]
    seconds: dict[str, float] = field(default_factory=dict)  # main_gen, score

    @property
    def is_correct(self) -> list[bool]:
        return [bool(r >= 0.5) for r in self.rewards]


@dataclass
class CorrectionResult:
    """What the correction pass gives the update: Δ, token masks, joint-training rows, lengths, metrics."""

    delta: np.ndarray
    masks: list[np.ndarray] | None = None
    lengths: list[int] = field(default_factory=list)  # x~ + ŷ tokens per correction (generation FLOPs)
    generation: GenerationWork | None = None  # the correction requests as the GPU-time model prices them
    joint_prompts: list[list[int]] = field(default_factory=list)
    joint_responses: list[list[int]] = field(default_factory=list)
    joint_rewards: list[float] = field(default_factory=list)
    joint_group_ids: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    localisations: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    localised: np.ndarray | None = None  # rows whose first-divergence mask localises (divergence_pass only)


def sample_step(toy: Toy, generator, order: np.ndarray, step: int, seed: int, batch_size: int,
                group: int) -> StepSamples:
    """The step's prompts (``batch_size`` problems in the seed's order), ``group`` samples each, scored."""
    from verl_cpu.hf_rollout import request_seed

    idx = [int(order[((step - 1) * batch_size + k) % len(order)]) for k in range(batch_size)]
    problems = [toy.train[i] for i in idx for _ in range(group)]
    prompts = [toy.prompt_ids(p) for p in problems]
    seeds = [request_seed(seed, f"main|{i}|{j}", step) for i in idx for j in range(group)]
    t0 = time.perf_counter()
    responses = generate(generator, prompts, seeds, max_tokens=toy.max_tokens)
    t_gen = time.perf_counter()
    rewards = np.array([toy.score(r, p) for r, p in zip(responses, problems)])
    return StepSamples(problems, prompts, responses, rewards, [k for k in range(batch_size) for _ in range(group)],
                       {"main_gen": t_gen - t0, "score": time.perf_counter() - t_gen})


def correction_pass(toy: Toy, generator, cfg: IBPOConfig, samples: StepSamples, seed: int, step: int,
                    newline_tokens: dict[int, str]) -> CorrectionResult:
    """IBPO steps B-C on the step's samples through the trainer's own function (``ibpo.pipeline.correction_step``)
    with the loop's generation, the joint-training rows (App. E.2 (C): ``ibpo.pipeline.joint_rewards`` and
    ``joint_row_uids``, as the trainer's ``build_joint_rows``) and the credit-localisation record of every right
    correction."""
    from verl_cpu.hf_rollout import request_seed

    def generate_corrections(requests: list[CorrectionRequest]) -> Generated[tuple[list[list[int]], float]]:
        c0 = time.perf_counter()
        prompts = [toy.encode_chat(r.messages) for r in requests]
        seeds = [request_seed(seed, f"corr|{r.target_row}|{k}", step) for k, r in enumerate(requests)]
        corrections = generate(generator, prompts, seeds, chunk=64, max_tokens=toy.max_tokens)
        seconds = time.perf_counter() - c0
        scores = [toy.score(c, samples.problems[r.target_row]) for c, r in zip(corrections, requests)]
        return Generated(np.asarray(scores), corrections, (prompts, seconds))

    messages = [toy.messages(p) for p in samples.problems]
    done = correction_step(samples.group_ids, messages, samples.responses, samples.rewards, cfg, step,
                           generate_corrections, toy.decode, toy.encode)
    if not done.requests:
        return CorrectionResult(np.zeros(len(samples.responses)))
    requests, outcome, (corr_prompts, seconds) = done.requests, done.outcome, done.generated.output
    corrections = done.generated.ids
    lookup = [simulate_lookup(p, c, TOY_NGRAM) for p, c in zip(corr_prompts, corrections)]
    generation = GenerationWork([len(p) for p in corr_prompts], [len(c) for c in corrections],
                                [st.decode_steps for st in lookup], [st.drafted_tokens for st in lookup])
    result = CorrectionResult(outcome.delta, outcome.token_masks, [len(p) + len(c) for p, c in zip(corr_prompts, corrections)],
                              generation=generation, metrics={k: float(v) for k, v in outcome.metrics.items()},
                              seconds=seconds)
    if cfg.joint_training:
        result.joint_prompts, result.joint_responses = corr_prompts, [list(c) for c in corrections]
        result.joint_rewards = joint_rewards(done.generated.scores, outcome.correction_rewrite, cfg).tolist()
        result.joint_group_ids = joint_row_uids(requests, cfg.joint_grouping).tolist()
    result.localisations = correction_localisations(toy, generator, samples, done, step, newline_tokens)
    return result


def correction_localisations(toy: Toy, generator, samples: StepSamples, done: CorrectionStep, step: int,
                             newline_tokens: dict[int, str]) -> list[dict]:
    """The credit-localisation record (``analysis.credit_localisation.localise``) of every right correction."""
    out = []
    is_correct, outcome = done.is_correct, done.outcome
    for req, corr, ok, rewrite in zip(done.requests, done.generated.ids, done.correction_right,
                                      outcome.correction_rewrite):
        if not ok:
            continue
        row = req.target_row
        reference = samples.responses[req.reference_rows[0]] if req.reference_rows else []
        lines = line_index([newline_tokens.get(t, "") for t in samples.responses[row]])
        loc = localise(samples.responses[row], corr, toy.truth(samples.problems[row], samples.responses[row]), reference,
                       lines, reference_right=bool(req.reference_rows and is_correct[req.reference_rows[0]]),
                       eos_ids=generator.eos_ids)
        out.append({"step": step, "shaped": bool(outcome.delta[row] > 0), "rewrite": bool(rewrite), **loc.as_dict()})
    return out


def divergence_pass(toy: Toy, model: torch.nn.Module, cfg: IBPOConfig, samples: StepSamples, step: int,
                    pad_id: int, rule: str = "from_first") -> CorrectionResult:
    """The first-divergence localiser (``ibpo.first_divergence``): every wrong response's correction prompt
    (``ibpo.pipeline.plan_corrections`` under ``cfg``) is prefilled with the response, one teacher-forced
    forward; its mask covers the tokens from the first greedy disagreement on. Δ stays 0; ``masks`` holds a
    mask for every row (ones where nothing diverged or the row is right); the rows' x~ + y lengths are charged
    as one prefill each (FLOPs: a forward over them; modelled GPU time: prefill, no decode pass)."""
    is_correct = [bool(r >= cfg.correct_threshold) for r in samples.rewards]
    requests = plan_corrections(samples.group_ids, is_correct, [toy.messages(p) for p in samples.problems],
                                samples.responses, toy.decode, cfg, step, toy.encode)
    masks = [np.ones(len(r), dtype=np.float32) for r in samples.responses]
    result = CorrectionResult(np.zeros(len(samples.responses)), masks)
    if not requests:
        return result
    c0 = time.perf_counter()
    prompts = [toy.encode_chat(r.messages) for r in requests]
    targets = [list(samples.responses[r.target_row]) for r in requests]
    rows = [p + y for p, y in zip(prompts, targets)]
    ids = torch.full((len(rows), max(len(r) for r in rows)), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, :len(row)], attn[i, :len(row)] = torch.tensor(row), 1
    with torch.no_grad():
        greedy = model(input_ids=ids, attention_mask=attn).logits.argmax(-1)
    for req, prompt, target, pred in zip(requests, prompts, targets, greedy):
        masks[req.target_row] = MASK_RULES[rule](target, pred[len(prompt) - 1:len(prompt) - 1 + len(target)].tolist())
    result.lengths = [len(r) for r in rows]
    result.generation = GenerationWork(result.lengths, [0] * len(rows))
    result.localised = np.array([m.size > 0 and m.min() == 0.0 for m in masks])
    result.metrics = {"divergence_found_share": float(np.mean([result.localised[r.target_row] for r in requests]))}
    result.seconds = time.perf_counter() - c0
    return result


def oracle_masks(toy: Toy, samples: StepSamples) -> list[np.ndarray]:
    """The oracle arm's token masks: on every wrong response, the tokens a minimal edit into the nearest right
    worked solution changes (``Toy.truth``, ``lab.analysis.credit_localisation.wrong_mask``); ones on right ones."""
    return [np.ones(len(r), dtype=np.float32) if ok else wrong_mask(r, toy.truth(p, r)).astype(np.float32)
            for r, p, ok in zip(samples.responses, samples.problems, samples.is_correct)]


def token_advantages(arm: Arm, samples: StepSamples, corr: CorrectionResult, oracle: list[np.ndarray] | None
                     ) -> tuple[torch.Tensor, list[np.ndarray], tuple[list[np.ndarray] | None, np.ndarray]]:
    """Sequence advantages (``ibpo.advantages.ibpo_sequence_advantages``: Eq. 15/23 and ``ibpo.shaping``),
    per-token advantages (broadcast, times the signed token mask, Eq. 7/17, ``ibpo.mask_sign``, on the rows a mask
    applies to: shaped rows of a masking variant; every wrong row of the oracle arm, ``negative_only``), and
    (the masks, None when none applies; which rows were masked), what :func:`localisation_metrics` reads."""
    cfg = arm.ibpo
    is_correct = torch.tensor(samples.is_correct)
    rewards = torch.as_tensor(samples.rewards, dtype=torch.float64)
    delta = torch.as_tensor(corr.delta, dtype=torch.float64)
    if cfg is None:
        adv = group_normalized_advantages(rewards, samples.group_ids)
    else:
        adv = ibpo_sequence_advantages(rewards, delta, is_correct, samples.group_ids, cfg.lam, cfg.shaping)
    masks, masked, policy = None, np.zeros(len(samples.responses), dtype=bool), None
    if oracle is not None:
        masks, masked, policy = oracle, ~np.asarray(samples.is_correct), get_mask_sign("negative_only")
    elif corr.localised is not None:
        masks, masked, policy = corr.masks, corr.localised & ~np.asarray(samples.is_correct), get_mask_sign("negative_only")
    elif cfg is not None and corr.masks is not None and get_variant(cfg.variant).masks_tokens:
        masks, masked, policy = corr.masks, corr.delta > 0, get_mask_sign(cfg.mask_sign)
    out = []
    for i, r in enumerate(samples.responses):
        a = np.full(len(r), float(adv[i]), dtype=np.float32)
        if masked[i]:
            a = a * signed_token_mask(adv[i:i + 1], torch.as_tensor(masks[i])[None], torch.tensor([True]), policy)[0].numpy()
        out.append(a)
    return adv, out, (masks, masked)


def localisation_metrics(toy: Toy, samples: StepSamples, masks: list[np.ndarray] | None,
                         masked: np.ndarray, oracle: list[np.ndarray] | None = None) -> dict[str, float]:
    """Coverage and quality of the step's localised credit against the oracle (``wrong_mask`` of each wrong
    response into its nearest right solution): ``coverage`` = wrong responses trained with a token mask / wrong
    responses; over the masked wrong responses, mean ``precision`` and ``recall`` of the mask's tokens against
    the oracle's wrong tokens, and mean |first masked − first oracle-wrong position| (``first_position_error``,
    tokens). NaN where undefined (no wrong response; no masked one). ``oracle``: the step's oracle masks when the
    arm already computed them (:func:`oracle_masks`), else computed here for the masked rows."""
    wrong = [i for i, ok in enumerate(samples.is_correct) if not ok]
    rows = [i for i in wrong if masked[i]] if masks is not None else []
    localised = np.asarray(masked, dtype=bool) if masks is not None else np.zeros(len(samples.is_correct), dtype=bool)
    out = {f"localised/{k}": v for k, v in localised_coverage(samples.is_correct, localised).items()}
    precision, recall, first_err = [], [], []
    for i in rows:
        m = np.asarray(masks[i]) > 0
        o = (oracle[i] > 0 if oracle is not None
             else wrong_mask(samples.responses[i], toy.truth(samples.problems[i], samples.responses[i])))
        if m.any():
            precision.append(float((m & o).sum() / m.sum()))
        if o.any():
            recall.append(float((m & o).sum() / o.sum()))
        if m.any() and o.any():
            first_err.append(abs(int(np.argmax(m)) - int(np.argmax(o))))
    for key, values in (("precision", precision), ("recall", recall), ("first_position_error", first_err)):
        out[f"localised/{key}"] = float(np.mean(values)) if values else float("nan")
    return out


def joint_token_advantages(corr: CorrectionResult) -> list[np.ndarray]:
    """Joint-training rows' advantages: their rewards normalised within their groups (Eq. 23), broadcast."""
    if not corr.joint_rewards:
        return []
    adv = group_normalized_advantages(torch.as_tensor(corr.joint_rewards, dtype=torch.float64), corr.joint_group_ids)
    return [np.full(len(r), float(a), dtype=np.float32) for r, a in zip(corr.joint_responses, adv)]


def mechanism_metrics(samples: StepSamples, corr: CorrectionResult, adv: torch.Tensor) -> dict[str, float]:
    """``ibpo.mechanism`` on the step's main rows: where the trained advantages put their weight, and how much
    of a wrong response its right siblings share."""
    out = advantage_mechanism(adv.numpy(), samples.is_correct, corr.delta, samples.group_ids)
    out.update(sibling_overlap(samples.responses, samples.is_correct, samples.group_ids))
    return {f"mechanism/{k}": v for k, v in out.items()}


@dataclass(frozen=True)
class Schedule:
    """What a run's budget counts and how its learning rate warms up. ``unit``: ``flops`` (the FLOP counter) or
    ``modelled_gpu_seconds`` (``compute_accounting.gpu_time`` priced by ``coefficients``: the toy's realised
    work as Qwen3-1.7B, on one H100's roofline by default, ``TOY_COST_MODEL``, or by ``--cost-model``);
    ``correction_share`` scales what the correction phase is charged in either unit (1: its full cost; the
    break-even sweep lowers it);
    ``warmup_unit``: ``budget`` (lr · min(1, spent after the step / ``warmup``), ``warmup`` in the unit) or
    ``updates`` (lr · min(1, step / ``warmup``), ``warmup`` in updates, every arm the same ramp per update)."""

    unit: str = "flops"
    correction_share: float = 1.0
    warmup_unit: str = "budget"
    coefficients: GpuTimeCoefficients | None = None

    def __post_init__(self) -> None:
        if self.unit not in BUDGET_UNITS or self.warmup_unit not in WARMUP_UNITS:
            raise ValueError(f"unit must be one of {BUDGET_UNITS} and warmup_unit one of {WARMUP_UNITS}")
        if not 0.0 <= self.correction_share <= 1.0:
            raise ValueError(f"correction_share must be in [0, 1], got {self.correction_share}")
        if self.coefficients is None:
            object.__setattr__(self, "coefficients", roofline_coefficients(*TOY_COST_MODEL))

    def lr_factor(self, spent_after: float, step: int, warmup: float) -> float:
        if warmup <= 0:
            return 1.0
        return min(1.0, (spent_after if self.warmup_unit == "budget" else step) / warmup)


def step_cost(work: StepWork, samples: "StepSamples", corr: "CorrectionResult", shape: ModelShape,
              schedule: Schedule) -> dict:
    """The step's FLOPs and modelled GPU seconds per phase, the correction phase scaled by the schedule's
    ``correction_share``, and its cost in the budget's unit (``charged``)."""
    step_f = step_flops(work, shape)
    main = GenerationWork([len(p) for p in samples.prompts], [len(r) for r in samples.responses])
    seconds = dict(step_seconds(work, main, corr.generation, schedule.coefficients).phases)
    share = schedule.correction_share
    flops = step_f.total - (1.0 - share) * step_f.correction_gen
    for phase in ("correction_gen_prefill", "correction_gen_decode"):
        seconds[phase] *= share
    modelled = float(sum(seconds.values()))
    return {"flops": flops, "modelled_gpu_seconds": modelled, "modelled_by_phase": seconds, "step_flops": step_f,
            "charged": flops if schedule.unit == "flops" else modelled}


def run(toy: Toy, arm: Arm, seed: int, budget: float, n: int, batch_size: int, lr: float, warmup: float,
        max_steps: int = 10_000, log=None, milestones: tuple[float, ...] = MILESTONES, step_hook=None,
        schedule: Schedule = Schedule()) -> dict:
    """One arm, one seed, to ``budget`` (in ``schedule.unit``); returns per-step records, milestone evaluations
    and localisation.

    The learning rate warms up linearly over the first ``warmup`` of the budget's unit (not steps: at equal
    compute an arm with 4x costlier steps would otherwise spend its few updates at a fraction of the rate), or
    over that many updates (``schedule.warmup_unit``). With no ``milestones`` the run is matched in steps
    instead: it makes ``max_steps`` steps and is evaluated once after the last (``"milestone": None``).
    ``step_hook``, if given, is called before each update with the step's samples and advantages
    (``lab.analysis.grad_probe_loop``); what it returns is stored in the step's record under ``"hook"``."""
    from verl_cpu.hf_rollout import HFGenerator

    torch.manual_seed(seed)
    generator = HFGenerator.from_pretrained(toy.model_dir)
    model = generator.model
    shape = model_shape(model)
    optim = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    order = np.random.default_rng(seed).permutation(len(toy.train))
    newline_tokens = {i: toy.tokenizer.decode([i]) for i in range(len(toy.tokenizer))}
    spent, flops, modelled, steps, evals, localisations = 0.0, 0.0, 0.0, [], [], []
    fractions = list(milestones)
    pending = [m * budget for m in fractions]
    equal_steps = not fractions  # no compute milestones: run max_steps steps, evaluate after the last one
    step = 0
    alarm = RewardDropAlarm()
    while (pending or equal_steps) and step < max_steps:
        step += 1
        model.eval()
        t0 = time.perf_counter()
        samples = sample_step(toy, generator, order, step, seed, batch_size, arm.group_multiplier * n)
        corr = step_corrections(toy, generator, arm, samples, seed, step, newline_tokens)
        localisations += corr.localisations
        oracle = oracle_masks(toy, samples) if arm.oracle_mask else None
        adv, token_adv, (masks, masked) = token_advantages(arm, samples, corr, oracle)
        t_host = time.perf_counter()
        main_lengths = [len(p) + len(r) for p, r in zip(samples.prompts, samples.responses)]
        work = StepWork(main_gen=main_lengths, correction_gen=corr.lengths, train_main=main_lengths,
                        train_joint=[len(p) + len(r) for p, r in zip(corr.joint_prompts, corr.joint_responses)],
                        old_log_prob_forward=False)
        cost = step_cost(work, samples, corr, shape, schedule)
        for g in optim.param_groups:
            g["lr"] = lr * schedule.lr_factor(spent + cost["charged"], step, warmup)
        hooked = None
        model.train()
        if step_hook is not None:
            hooked = step_hook(step=step, model=model, prompts=samples.prompts, responses=samples.responses,
                               rewards=samples.rewards, group_ids=samples.group_ids, token_advantages=token_adv,
                               delta=corr.delta, pad_id=generator.pad_id)
        grad_norm = update(model, optim, samples.prompts + corr.joint_prompts, samples.responses + corr.joint_responses,
                           token_adv + joint_token_advantages(corr), generator.pad_id)
        spent, flops, modelled = spent + cost["charged"], flops + cost["flops"], modelled + cost["modelled_gpu_seconds"]
        rec = step_record(step, samples, corr, adv, cost, alarm, grad_norm, hooked,
                          {**samples.seconds, "correction_gen": corr.seconds,
                           "ibpo_host": t_host - t0 - sum(samples.seconds.values()) - corr.seconds,
                           "update": time.perf_counter() - t_host})
        rec.update({"flops": flops, "modelled_gpu_seconds": modelled, "spent": spent,
                    **localisation_metrics(toy, samples, masks, masked, oracle)})
        while pending and spent >= pending[0]:
            evals.append(evaluate_at(toy, generator, fractions[len(fractions) - len(pending)], step, flops, rec))
            pending.pop(0)
        steps.append(rec)
        if log:
            log(f"{arm.name} s{seed} step {step}: reward {rec['reward']:.3f} spent {spent:.3g} {schedule.unit}")
    if equal_steps and steps:
        evals.append(evaluate_at(toy, generator, None, step, flops, steps[-1]))
    return {"arm": arm.name, "seed": seed, "steps": steps, "evals": evals, "localisation": localisations,
            "budget": budget, "budget_unit": schedule.unit}


def step_corrections(toy: Toy, generator, arm: Arm, samples: StepSamples, seed: int, step: int,
                     newline_tokens: dict[int, str]) -> CorrectionResult:
    """The step's correction pass (IBPO arms), first-divergence pass (the localiser arm) or nothing."""
    if arm.ibpo is not None:
        return correction_pass(toy, generator, arm.ibpo.replace(seed=seed), samples, seed, step, newline_tokens)
    if arm.localise is not None:
        return divergence_pass(toy, generator.model, arm.localise.replace(seed=seed), samples, step, generator.pad_id,
                               arm.localise_rule)
    return CorrectionResult(np.zeros(len(samples.responses)))


def step_record(step: int, samples: StepSamples, corr: CorrectionResult, adv: torch.Tensor, cost: dict,
                alarm: RewardDropAlarm, grad_norm: float, hooked, seconds: dict) -> dict:
    """One step's record: reward, gradient norm, group mix, wall seconds, FLOPs and modelled GPU seconds per
    phase, the correction metrics and the mechanism metrics."""
    step_f = cost["step_flops"]
    return {"step": step, "reward": float(samples.rewards.mean()), "grad_norm": grad_norm,
            "mixed_groups": float(np.mean([k == "mixed" for k in group_kinds(samples.is_correct, samples.group_ids)])),
            "time": seconds,
            "flops_by_phase": {"main_gen": step_f.main_gen, "correction_gen": step_f.correction_gen,
                               "actor_update": step_f.actor_update},
            "modelled_gpu_seconds_by_phase": cost["modelled_by_phase"],
            "collapse_alarm": float(alarm.update(float(samples.rewards.mean()))), "updates": 1,
            "joint_rows": len(corr.joint_prompts), **{f"ibpo/{k}": v for k, v in corr.metrics.items()},
            **mechanism_metrics(samples, corr, adv), **({"hook": hooked} if hooked is not None else {})}


def update(model: torch.nn.Module, optim: torch.optim.Optimizer, prompts: list[list[int]],
           responses: list[list[int]], token_advantages: list[np.ndarray], pad_id: int) -> float:
    """One AdamW step on the GSPO loss of every row (main and joint rows in one update, as
    ``ibpo.joint_minibatch=grow``), gradient clipped at 1.0; returns the pre-clip gradient norm."""
    model.train()
    loss = gspo_loss(model, prompts, responses, token_advantages, pad_id)
    optim.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
    optim.step()
    return grad_norm


def evaluate_at(toy: Toy, generator, milestone: float | None, step: int, flops: float, rec: dict) -> dict:
    """Greedy test evaluation after ``step``; its seconds are added to the step record's ``eval`` time."""
    e0 = time.perf_counter()
    generator.model.eval()
    correct = evaluate(toy, generator)
    rec["time"]["eval"] = rec["time"].get("eval", 0.0) + time.perf_counter() - e0
    return {"milestone": milestone, "step": step, "flops": flops, "spent": rec.get("spent", flops),
            "modelled_gpu_seconds": rec.get("modelled_gpu_seconds"), "accuracy": float(correct.mean()),
            "correct": correct.astype(int).tolist()}


_WORKER_TOY: Toy | None = None


def _init_worker(model_dir: str, train_size: int, test_size: int, task: str = "addition",
                 eval_split: str = "test") -> None:
    """A worker process of ``--jobs``: one torch thread, its own tokenizer and problem sets."""
    global _WORKER_TOY
    torch.set_num_threads(1)
    _WORKER_TOY = Toy(model_dir, train_size, test_size, task=task, eval_split=eval_split)


def run_and_save(toy: Toy | None, arm: Arm, seed: int, path: str, budget: float, n: int, batch_size: int,
                 lr: float, warmup: float, milestones: tuple[float, ...], max_steps: int,
                 schedule: Schedule = Schedule()) -> str:
    """One (arm, seed) run written to ``path`` (in a worker when ``toy`` is None); returns its summary line.
    A run depends only on its arguments (fresh model, ``torch.manual_seed(seed)``, seeded request streams),
    so which process runs it, and in which order, does not change its result."""
    toy = toy if toy is not None else _WORKER_TOY
    start = time.perf_counter()
    result = run(toy, arm, seed, budget, n, batch_size, lr, warmup, max_steps=max_steps, milestones=milestones,
                 schedule=schedule)
    result["wall_s"] = time.perf_counter() - start
    tmp = Path(path).with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(path)  # a killed run leaves no half-written JSON that a rerun would skip
    final = f"final eval {result['evals'][-1]['accuracy']:.3f}" if result["evals"] else "no eval"
    return f"[toy_loop] {arm.name} s{seed}: {len(result['steps'])} steps, {final}, {result['wall_s']:.0f} s"


def check_same_protocol(meta: dict, args: argparse.Namespace, path: Path, budget_arm: str | None = None,
                        warm_start_sha256: str | None = None) -> None:
    """Refuse to add runs to a folder whose ``meta.json`` records other run-defining options
    (``lab.analysis.run_protocol.RUN_DEFINING_OPTIONS``: a key it lacks holds the option's value before it existed,
    e.g. ``--milestones`` 0.25 0.5 0.75 1), another budget arm (``budget_arm``: the arm whose step sets the budget
    now, compared with the one that set it there) or another warm start (``warm_start_sha256``: the sha256 of the
    model given now, compared with meta.json's): its runs and the new ones would be reported as one arm's seeds."""
    recorded = meta.get("args") if isinstance(meta.get("args"), dict) else {}
    changed = []
    for key, default in RUN_DEFINING_OPTIONS.items():
        there, now = recorded.get(key, default), getattr(args, key)
        if key == "budget_arm" and budget_arm is not None and recorded_budget_arm(meta) is not None:
            there, now = recorded_budget_arm(meta), budget_arm  # the arms whose step set the budget
        if not same_value(there, now):
            changed.append(f"{option_flag(key)} {there!r} there, {now!r} now")
    there_sha = meta.get("warm_start_sha256")
    if warm_start_sha256 is not None and there_sha is not None and there_sha != warm_start_sha256:
        model = getattr(args, "model", None) or getattr(args, "assets", None)
        changed.append(f"warm start {recorded_model(meta)} (sha256 {there_sha[:12]}) there, {model} "
                       f"(sha256 {warm_start_sha256[:12]}) now")
    if changed:
        raise SystemExit(f"[toy_loop] {path}: this folder's runs used other options ({'; '.join(changed)}); "
                         "use another --out for another protocol")


def load_or_measure_meta(path: Path, toy: Toy, baseline: Arm, args: argparse.Namespace, argv: list[str] | None) -> dict:
    """``meta.json`` of an output folder: read when it exists (a resumed comparison keeps its budget), else
    measured now: the warm start's greedy test accuracy and sha256, and the FLOP budget (``--budget-steps`` ×
    the baseline's FLOPs per step on the warm start: a no-update run of 3 steps). A folder's runs are one
    protocol: resuming it with an option that changes what a run does (``RUN_DEFINING_OPTIONS``), another budget
    arm or another warm start (its sha256) is refused."""
    if path.exists():
        try:
            meta = read_json_object(path)
        except ValueError as exc:
            raise SystemExit(f"[toy_loop] {exc}") from None
        check_same_protocol(meta, args, path, baseline.name, sha256_of_dir(toy.model_dir))
        return meta
    from verl_cpu.hf_rollout import HFGenerator

    warm = evaluate(toy, HFGenerator.from_pretrained(toy.model_dir))
    budget = args.budget_flops if args.budget_unit == "flops" else None
    if budget is None:
        probe = run(toy, baseline, 10_000, budget=float("inf"), n=args.n, batch_size=args.batch_size, lr=0.0,
                    warmup=0.0, max_steps=3, schedule=schedule_from(args))
        budget = args.budget_steps * probe["steps"][-1]["spent"] / len(probe["steps"])
    meta = {"baseline_step_flops": budget / args.budget_steps, "budget_arm": baseline.name,
            "warm_start_sha256": sha256_of_dir(toy.model_dir),
            "budget_flops": budget, "budget_unit": args.budget_unit,
            f"warm_start_{args.eval_split}_accuracy": float(warm.mean()),
            f"warm_start_{args.eval_split}_correct": warm.astype(int).tolist(), "task": args.task,
            "command": "python -m lab.analysis.toy_loop " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])),
            "args": vars(args)}
    path.write_text(json.dumps(meta))
    return meta


def schedule_from(args: argparse.Namespace) -> Schedule:
    return Schedule(unit=args.budget_unit, correction_share=args.correction_cost_share, warmup_unit=args.warmup_unit,
                    coefficients=resolve_coefficients(args.cost_model, TOY_MODEL_SHAPE))


def run_all(todo: list[tuple[int, Arm]], toy: Toy, out: Path, args: argparse.Namespace, common: dict) -> set[int]:
    """Every (seed, arm) of ``todo`` (in order; ``--jobs`` of them side by side in spawned one-thread workers),
    each written to ``out/<arm>_s<seed>.json``; returns the seeds started. ``--deadline`` stops new seeds only:
    a seed already started finishes all its arms."""
    started: set[int] = set()

    def may_start(seed: int) -> bool:
        if seed in started:
            return True
        if args.deadline and time.time() > args.deadline:
            print(f"[toy_loop] deadline reached before seed {seed}", flush=True)
            return False
        started.add(seed)
        return True

    if args.jobs == 1:
        for seed, arm in todo:
            if not may_start(seed):
                break
            print(run_and_save(toy, arm, seed, str(out / f"{arm.slug}_s{seed}.json"), **common), flush=True)
        return started
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    # spawn, not fork: a forked child of a process that has run torch ops can deadlock in OpenMP
    with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker,
                             initargs=(toy.model_dir, args.train_size, args.test_size, args.task,
                                       args.eval_split)) as pool:
        pending: set = set()
        queue = list(todo)
        while queue or pending:
            while queue and len(pending) < args.jobs:
                seed, arm = queue[0]
                if not may_start(seed):
                    queue.clear()
                    break
                queue.pop(0)
                pending.add(pool.submit(run_and_save, None, arm, seed, str(out / f"{arm.slug}_s{seed}.json"), **common))
            if not pending:
                break
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                print(future.result(), flush=True)  # a failed run raises here and stops the comparison
    return started


def check_numbers(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Stop before anything runs on a numeric option a run cannot use: a learning rate, budget or warm-up that is
    NaN, infinite or out of range (a NaN budget never reaches its milestones: every run would make max_steps
    steps), milestones outside (0, 1] or not increasing (evaluated in the wrong place), a group below 2 (every
    advantage 0), an empty batch or problem set, a seed below 0 or given twice."""
    finite = math.isfinite
    if not (finite(args.lr) and args.lr > 0):
        p.error(f"--lr must be a finite number > 0, got {args.lr}")
    if not 0.0 <= args.correction_cost_share <= 1.0:
        p.error(f"--correction-cost-share must be in [0, 1], got {args.correction_cost_share}")
    for option, value in (("--budget-steps", args.budget_steps), ("--budget-flops", args.budget_flops)):
        if value is not None and not (finite(value) and value > 0):
            p.error(f"{option} must be a finite number > 0, got {value}")
    if args.budget_flops is not None and args.budget_unit != "flops":  # it would be ignored: the budget is measured
        p.error(f"--budget-flops is a budget in FLOPs; with --budget-unit {args.budget_unit} give --budget-steps")
    if not (finite(args.warmup_steps) and args.warmup_steps >= 0):
        p.error(f"--warmup-steps must be a finite number >= 0, got {args.warmup_steps}")
    milestones = list(args.milestones)
    if any(not 0.0 < m <= 1.0 for m in milestones) or milestones != sorted(set(milestones)):
        p.error(f"--milestones must be increasing fractions of the budget in (0, 1], got {milestones}")
    for option, value, least in (("--n", args.n, 2), ("--batch-size", args.batch_size, 1),
                                 ("--train-size", args.train_size, 1), ("--test-size", args.test_size, 1)):
        if value < least:
            p.error(f"{option} must be >= {least}, got {value}")
    if any(seed < 0 for seed in args.seeds) or len(set(args.seeds)) != len(args.seeds):
        p.error(f"--seeds must be distinct integers >= 0, got {args.seeds}")


DEFAULT_BUDGET_ARM = "GSPO G=n"


def budget_arm_name(arms: list[str], budget_arm: str | None) -> str:
    """The arm whose step sets the budget: ``budget_arm`` (``--budget-arm``), else always
    :data:`DEFAULT_BUDGET_ARM` (GSPO G=n, the protocol's "baseline step", run or not), whatever ``arms`` lists.

    **Decision.** Before, the default was the first of ``arms``: an IBPO arm, a localiser or the oracle mask first
    silently set a budget in its own, dearer steps (refused since), and ``GSPO G=4n`` first still silently set one 4×
    the protocol's. A budget that depends on the order of ``--arms`` can be wrong without a word; a fixed unit
    cannot. To budget in another arm's steps, name it (``--budget-arm 'IBPO G=n'``); a folder keeps the budget arm
    it was started with (``check_same_protocol``)."""
    del arms  # the budget no longer depends on them: kept in the signature for the callers that pass them
    return DEFAULT_BUDGET_ARM if budget_arm is None else budget_arm


def warm_start_task(model_dir: str | Path) -> str | None:
    """The task a warm start was trained on, where something records it: the ``assets.json`` that
    ``python -m lab.toy_tasks.warm_start --out DIR`` writes beside its ``model_sft`` (``task``; absent for the addition
    task, which it writes without one), or for the committed ``lab/toy_tasks/warm_starts/`` folders (model and tokenizer
    only: a file added inside would change their sha256) the ``tasks.json`` beside them. ``None`` when nothing
    records it."""
    model = Path(model_dir).resolve()
    manifest = model.parent / "tasks.json"  # lab/toy_tasks/warm_starts/tasks.json: committed folder name -> task
    if manifest.is_file():
        try:
            recorded = json.loads(manifest.read_text(encoding="utf-8")).get(model.name)
        except (OSError, ValueError, AttributeError):
            recorded = None
        if isinstance(recorded, str):
            return recorded
    assets = model.parent / "assets.json"
    if not assets.is_file():
        return None
    try:
        record = json.loads(assets.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or Path(str(record.get("model", ""))).resolve() != model:
        return None
    return str(record.get("task", "addition"))


def checked_model(p: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The warm-start model directory (``--model``, or ``--assets``' ``assets.json``), stopping on one that is
    missing or, where its task is recorded (:func:`warm_start_task`), was trained on another task than ``--task``."""
    if args.assets is not None:
        path = Path(args.assets) / "assets.json"
        if not path.is_file():
            p.error(f"--assets {args.assets}: no assets.json (not a `python -m lab.toy_tasks.warm_start --out DIR` output)")
        model_dir = json.loads(path.read_text())["model"]
    else:
        model_dir = args.model
    if not (Path(model_dir) / "config.json").is_file():
        p.error(f"--model {model_dir}: no config.json there (not a model directory)")
    task = warm_start_task(model_dir)
    if task is not None and task != args.task:
        p.error(f"--task {args.task}: the warm start {model_dir} was trained on the task {task!r} (recorded in "
                f"{Path(model_dir).resolve().parent}: tasks.json or assets.json); pass --task {task} or a warm start "
                f"of {args.task}")
    return model_dir


def checked_arms(p: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[list[Arm], Arm]:
    """Stop on a bad option before anything runs; return the arms to run and the arm whose step sets the budget
    (``--budget-arm``, else GSPO G=n: :func:`budget_arm_name`)."""
    if args.jobs < 1:
        p.error(f"--jobs must be >= 1, got {args.jobs}")
    if args.max_steps is not None and args.max_steps < 1:
        p.error(f"--max-steps must be >= 1, got {args.max_steps}")
    check_numbers(p, args)
    try:
        resolve_coefficients(args.cost_model, TOY_MODEL_SHAPE)
    except ValueError as exc:
        p.error(f"--cost-model: {exc}")
    arms = default_arms()
    unknown = [a for a in (args.arms or []) if a not in arms]
    if unknown:
        p.error(f"--arms: unknown {unknown}; the arms are {list(arms)}")
    if args.budget_arm is not None and args.budget_arm not in arms:
        p.error(f"--budget-arm: unknown {args.budget_arm!r}; the arms are {list(arms)}")
    chosen = [arms[a] for a in (args.arms or list(arms))]
    try:
        return chosen, arms[budget_arm_name([a.name for a in chosen], args.budget_arm)]
    except ValueError as exc:
        p.error(str(exc))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--assets", help="`python -m lab.toy_tasks.warm_start --out DIR` output (its model_sft)")
    source.add_argument("--model", help="a warm-start model directory (e.g. lab/toy_tasks/warm_starts/addition_seed0)")
    p.add_argument("--out", required=True)
    p.add_argument("--task", default="addition",
                   help="a task of lab.toy_tasks.tasks (the warm start must be one of it: checked where its assets.json "
                        "records its task)")
    p.add_argument("--arms", nargs="+", default=None, help="subset of the arms (the first is the baseline)")
    p.add_argument("--budget-arm", default=None,
                   help="the arm whose cost per step (its 3-step probe on the warm start) sets the budget and the "
                        "warm-up, whether it runs or not (default: 'GSPO G=n' whatever --arms lists, so two IBPO arms "
                        "are compared at a budget of GSPO steps without running GSPO; name another arm to budget in "
                        "its steps)")
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(30)))
    p.add_argument("--budget-steps", type=float, default=20,
                   help="FLOP budget, in units of the baseline's mean FLOPs per step (estimated on the warm start)")
    p.add_argument("--budget-flops", type=float, default=None, help="the FLOP budget itself (overrides --budget-steps)")
    p.add_argument("--budget-unit", choices=BUDGET_UNITS, default="flops",
                   help="what the budget counts: the FLOP counter, or modelled GPU seconds (compute_accounting."
                        "gpu_time: the toy's work priced as Qwen3-1.7B by --cost-model, prompt-lookup "
                        "speculation on the corrections); meta.json's budget_flops / baseline_step_flops are then "
                        "in that unit")
    p.add_argument("--correction-cost-share", type=float, default=1.0,
                   help="charge this share of the correction phase's cost (1: its full cost; the break-even sweep)")
    p.add_argument("--cost-model", default=DEFAULT_COST_MODEL,
                   help="what prices modelled GPU seconds (compute_budget.cost_model's values, at Qwen3-1.7B's "
                        "shape): roofline:<GPU> (default roofline:H100-SXM, every result before docs/evidence.md 2f), "
                        "measured:H200 (lab/scripts/bench_gpu.py's coefficients on an H200) or a bench_gpu.py JSON")
    p.add_argument("--warmup-unit", choices=WARMUP_UNITS, default="budget",
                   help="budget: warm up over --warmup-steps baseline steps' worth of the budget's unit; updates: "
                        "over --warmup-steps optimizer updates")
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--warmup-steps", type=float, default=5,
                   help="linear lr warmup over this many baseline steps' worth of the budget (or updates: --warmup-unit)")
    p.add_argument("--milestones", type=float, nargs="+", default=list(MILESTONES),
                   help="fractions of the budget at which every arm is evaluated on the test set")
    p.add_argument("--max-steps", type=int, default=None,
                   help="equal STEPS instead of equal compute: every run makes exactly this many steps and is "
                        "evaluated after the last (no compute milestones; the equal-compute report does not read "
                        "such runs; analysis.ablation --max-steps does)")
    p.add_argument("--test-size", type=int, default=512)
    p.add_argument("--eval-split", choices=EVAL_SPLITS, default="test",
                   help="what every evaluation scores: the test set, or --test-size validation problems (disjoint "
                        "from train and test) to choose a hyperparameter without looking at the test set")
    p.add_argument("--train-size", type=int, default=1024)
    p.add_argument("--jobs", type=int, default=1,
                   help="(arm, seed) runs side by side in this many worker processes, one torch thread each; "
                        "results do not depend on it")
    p.add_argument("--deadline", type=float, default=None, help="unix time after which no new seed is started")
    args = p.parse_args(argv)
    chosen, budget_arm = checked_arms(p, args)
    model_dir = checked_model(p, args)
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        toy = Toy(model_dir, args.train_size, args.test_size, task=args.task, eval_split=args.eval_split)
    except ValueError as exc:
        p.error(f"--task: {exc}")
    meta = load_or_measure_meta(out / "meta.json", toy, budget_arm, args, argv)
    print(f"[toy_loop] budget {meta['budget_flops']:.3g} {args.budget_unit}, warm start {meta['warm_start_sha256'][:12]} "
          f"{args.eval_split} acc {meta[f'warm_start_{args.eval_split}_accuracy']:.3f}", flush=True)
    equal_steps = args.max_steps is not None
    warmup = args.warmup_steps * (meta["baseline_step_flops"] if args.warmup_unit == "budget" else 1.0)
    common = dict(budget=float("inf") if equal_steps else meta["budget_flops"], n=args.n, batch_size=args.batch_size,
                  lr=args.lr, warmup=warmup, schedule=schedule_from(args),
                  milestones=() if equal_steps else tuple(args.milestones),
                  max_steps=args.max_steps if equal_steps else 10_000)
    # seed-major order, so an interrupted comparison stays balanced across arms
    todo = [(seed, arm) for seed in args.seeds for arm in chosen if not (out / f"{arm.slug}_s{seed}.json").exists()]
    start = time.perf_counter()
    started = run_all(todo, toy, out, args, common)
    print(f"[toy_loop] {len(started)} seeds started, runs done in {time.perf_counter() - start:.0f} s wall "
          f"(--jobs {args.jobs})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
