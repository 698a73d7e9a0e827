#!/usr/bin/env python
"""Evaluate an HF checkpoint on prepared verl parquet files (paper §5, Table 1), and compare two runs.

    # k samples per problem with the paper's sampling settings, several seeds, both baselines
    python -m evaluation.evaluate run --model ckpt/hf --data data/aime25.parquet data/hmmt_feb_2025.parquet data/lcb_v6.parquet \
        --preset qwen3-32b --k 64 --seeds 0 1 2 3 4 --best-of-n 8 --compare-and-correct --out eval/ibpo
    # paired bootstrap test between two runs (e.g. IBPO vs GSPO), or two methods of one run
    python -m evaluation.evaluate compare eval/ibpo/results.json eval/gspo/results.json --out eval/ibpo_vs_gspo.md

Generation uses vLLM when it is importable (``--backend auto``) and transformers ``generate`` otherwise
(batched, left-padded; runs on CPU). Every response is scored by ``reward_fns.compute_score`` with the row's
``data_source``, ``reward_model.ground_truth`` and ``extra_info``; a sample is right when the returned
``acc`` is 1.

Methods reported per data source (each with a 95% bootstrap CI over problems, and over seeds when several
``--seeds`` are given; see :mod:`evaluation.stats` for the bootstrap):
- ``sample``: avg@k (mean accuracy over the k samples) and unbiased pass@k'.
- ``best_of_N`` (``--best-of-n N``, paper: N = 8): the k samples of a problem are cut into k/N blocks of N
  and one sample per block is kept **without the verifier**: ``majority`` = the most frequent extracted
  final answer (``pred`` of compute_score, which is extracted from the response alone), ties and the
  choice among equal answers by the model's own mean token log-prob; ``logprob`` = the highest mean token
  log-prob. ``--bon-select auto`` uses majority for math rows and logprob for code (code has no short
  answer to vote on).
- ``compare_and_correct`` (``--compare-and-correct``; the paper's "GSPO + test-time prompt"): every sample
  is rewritten once by the model under the IBPO compare-and-correct prompt
  (``ibpo.pipeline.plan_corrections`` / ``ibpo.prompts.build_correction_messages``) with a reference drawn
  uniformly from the *other* samples of the same problem (no verifier at test time: all samples are
  treated as unverified), and the corrected response is scored.

Outputs in ``--out``: ``results.json`` (settings, per-problem per-seed scores of every method, summaries),
``results.md`` (the table, also printed) and ``samples.jsonl`` (every response with its verdict).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from ibpo.options import IBPOConfig
from evaluation.stats import (
    avg_at_k_per_problem,
    best_of_n_per_problem,
    bootstrap_ci,
    paired_bootstrap_test,
    pass_at_k_per_problem,
)
from ibpo.pipeline import plan_corrections

from evaluation.stats import interval_text, no_interval_reason, p_value_text  # noqa: E402
from option_types.cli import refuse_unused  # noqa: E402

# ----------------------------------------------------------------------------------------------------------
# Sampling settings


@dataclass(frozen=True)
class Sampling:
    """Sampling settings of one evaluation (vLLM conventions: top_k = 0 / -1 and top_p = 1 disable)."""

    temperature: float
    top_p: float
    top_k: int
    min_p: float
    max_new_tokens: int

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):  # NaN passes a plain < 0 test
            raise ValueError(f"--temperature={self.temperature} must be a finite number >= 0")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"--top-p={self.top_p} must lie in (0, 1]")
        if self.top_k < -1:  # vLLM takes -1 (off) or a k >= 1; -5 was silently "off"
            raise ValueError(f"--top-k={self.top_k} must be 0 or -1 (off) or a k >= 1")
        if not 0.0 <= self.min_p < 1.0:
            raise ValueError(f"--min-p={self.min_p} must lie in [0, 1)")
        if self.max_new_tokens < 1:
            raise ValueError(f"--max-new-tokens={self.max_new_tokens} must be >= 1")


# Sampling: each model's own generation config (checked at run time against MODEL/generation_config.json, the
# source printed). max_new_tokens: the response length the launchers train and validate with
# (MAX_RESPONSE of recipe/ibpo/run_ibpo_qwen3_32b.sh, run_ibpo_qwen3_next_80b.sh), so offline and in-training
# evaluation allow the same length.
PRESETS: dict[str, Sampling] = {
    # Qwen3-32B's generation_config.json and model card (thinking mode); the paper's §5 gives the same
    "qwen3-32b": Sampling(temperature=0.6, top_p=0.95, top_k=20, min_p=0.0, max_new_tokens=30720),
    # Qwen3-Next-80B-A3B-Thinking's model card / generation config (the model Table 1 names)
    "qwen3-next-thinking": Sampling(temperature=0.6, top_p=0.95, top_k=20, min_p=0.0, max_new_tokens=253952),
    # the paper's §5 text, which names "Qwen3-Next-80B-A3B-Instruct" (that model's card gives the same values)
    "qwen3-next": Sampling(temperature=0.7, top_p=0.8, top_k=20, min_p=0.0, max_new_tokens=253952),
    "none": Sampling(temperature=1.0, top_p=1.0, top_k=0, min_p=0.0, max_new_tokens=4096),
}


def resolve_sampling(preset: str, overrides: dict[str, Any]) -> Sampling:
    """The preset with every non-None override applied."""
    if preset not in PRESETS:
        raise ValueError(f"--preset {preset!r} is unknown; choose one of {sorted(PRESETS)}")
    return replace(PRESETS[preset], **{k: v for k, v in overrides.items() if v is not None})


# ----------------------------------------------------------------------------------------------------------
# Data


@dataclass(frozen=True)
class Problem:
    """One row of a prepared parquet file."""

    problem_id: str
    data_source: str
    ability: str
    messages: list[dict[str, str]]
    ground_truth: str
    extra_info: dict
    where: str  # "file, row n" for error messages


def load_problems(path: str | Path) -> list[Problem]:
    """Rows of a verl parquet file (``data_prep`` format); a missing or malformed field is a ``ValueError``
    naming the file, the row (0-based, as the training pre-flight's ``data_prep.row_checks`` names it) and the
    field."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such parquet file")
    rows = pq.read_table(path).to_pylist()
    if not rows:
        raise ValueError(f"{path}: the file has no rows")
    problems = []
    for i, row in enumerate(rows):
        where = f"{path}, row {i}"

        def bad(field: str, message: str) -> ValueError:
            return ValueError(f"{where}, field '{field}': {message}")

        source = row.get("data_source")
        if not isinstance(source, str) or not source:
            raise bad("data_source", f"expected a non-empty string, got {source!r:.60}")
        messages = row.get("prompt")
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages):
            raise bad("prompt", "expected a non-empty list of {role, content} chat messages")
        reward_model = row.get("reward_model")
        if not isinstance(reward_model, dict) or not isinstance(reward_model.get("ground_truth"), str):
            raise bad("reward_model.ground_truth", "missing or not a string")
        extra = row.get("extra_info") or {}
        if not isinstance(extra, dict):
            raise bad("extra_info", f"expected a struct, got {type(extra).__name__}")
        problem_id = str(extra.get("problem_id") or f"{path.name}:{i}")
        problems.append(Problem(problem_id, source, str(row.get("ability") or ""),
                                [{"role": m["role"], "content": m["content"]} for m in messages],
                                reward_model["ground_truth"], extra, where))
    ids = [p.problem_id for p in problems]
    if len(set(ids)) != len(ids):
        dup = sorted({x for x in ids if ids.count(x) > 1})[:5]
        raise ValueError(f"{path}: duplicate extra_info.problem_id values {dup}")
    return problems


# ----------------------------------------------------------------------------------------------------------
# Generation backends


@dataclass
class Completion:
    token_ids: list[int]
    text: str
    mean_logprob: float  # mean over generated tokens of the model's own log-prob (unwarped)


class Generator(Protocol):
    name: str
    tokenizer: Any

    def generate(self, prompts: Sequence[list[int]], n: int, sampling: Sampling, seed: int) -> list[list[Completion]]:
        """``n`` completions for every prompt (token ids)."""


class HFGenerate:
    """transformers ``generate``, batched and left-padded (CPU or GPU)."""

    name = "hf"

    def __init__(self, model_path: str, batch_size: int, dtype: str = "auto") -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        torch_dtype = {"auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch_dtype, attn_implementation="sdpa")
        self.model.eval()
        if torch.cuda.is_available():
            self.model.to("cuda")
        self.batch_size = batch_size
        gen = self.model.generation_config
        eos = gen.eos_token_id if gen.eos_token_id is not None else self.tokenizer.eos_token_id
        self.eos_ids = frozenset([eos] if isinstance(eos, int) else list(eos or []))
        pad = gen.pad_token_id if gen.pad_token_id is not None else self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else next(iter(self.eos_ids), 0))

    def generate(self, prompts: Sequence[list[int]], n: int, sampling: Sampling, seed: int) -> list[list[Completion]]:
        from transformers import GenerationConfig

        from verl_cpu.hf_rollout import cut_at_eos, left_pad

        torch = self.torch
        flat = [(i, list(p)) for i, p in enumerate(prompts) for _ in range(n)]
        out: list[list[Completion]] = [[] for _ in prompts]
        greedy = sampling.temperature == 0
        config = GenerationConfig(
            do_sample=not greedy,
            temperature=None if greedy else sampling.temperature,
            top_p=None if greedy else sampling.top_p,
            top_k=None if greedy or sampling.top_k <= 0 else sampling.top_k,
            min_p=None if greedy or sampling.min_p <= 0 else sampling.min_p,
            max_new_tokens=sampling.max_new_tokens,
            eos_token_id=sorted(self.eos_ids) or None,
            pad_token_id=self.pad_id,
            return_dict_in_generate=True,
            output_logits=True,
        )
        from tqdm import tqdm

        device = next(self.model.parameters()).device
        chunks = tqdm(list(enumerate(range(0, len(flat), self.batch_size))), desc=f"generating ({len(flat)} samples)",
                      unit="batch", file=sys.stderr, mininterval=2.0)
        for chunk_no, lo in chunks:
            chunk = flat[lo:lo + self.batch_size]
            input_ids, attention_mask = left_pad([p for _, p in chunk], self.pad_id)
            torch.manual_seed(seed * 1_000_003 + chunk_no)
            with torch.no_grad():
                res = self.model.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                                          generation_config=config)
            new = res.sequences[:, input_ids.shape[1]:].cpu()
            # raw (unwarped) logits: the model's own confidence, independent of the sampling settings
            logp = torch.stack([torch.log_softmax(x.float(), dim=-1) for x in res.logits], dim=1).cpu()
            for row, (prompt_idx, _) in enumerate(chunk):
                ids, _reason = cut_at_eos(new[row].tolist(), self.eos_ids, sampling.max_new_tokens)
                picked = logp[row, torch.arange(len(ids)), torch.tensor(ids, dtype=torch.long)] if ids else None
                mean_lp = float(picked.mean()) if picked is not None else float("-inf")
                text = self.tokenizer.decode(ids, skip_special_tokens=True)
                out[prompt_idx].append(Completion(ids, text, mean_lp))
        return out


class VLLMGenerate:
    """vLLM offline engine (``LLM.generate`` on token ids, ``n`` samples per prompt)."""

    name = "vllm"

    def __init__(self, model_path: str, max_model_len: int | None, tensor_parallel_size: int) -> None:
        import importlib.util

        if importlib.util.find_spec("flashinfer") is None:
            # vLLM 0.24's sampler otherwise imports flashinfer and the engine dies at start-up where it is not
            # installed (verl's vllm extra does not install it); docs/gpu.md.
            os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
        from vllm import LLM

        kwargs: dict[str, Any] = {"model": model_path, "tensor_parallel_size": tensor_parallel_size}
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        self.llm = LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()

    def generate(self, prompts: Sequence[list[int]], n: int, sampling: Sampling, seed: int) -> list[list[Completion]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(n=n, temperature=sampling.temperature, top_p=sampling.top_p,
                                top_k=sampling.top_k if sampling.top_k > 0 else -1, min_p=sampling.min_p,
                                max_tokens=sampling.max_new_tokens, seed=seed, logprobs=0)
        results = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params)
        out = []
        for res in results:
            comps = []
            for o in res.outputs:
                ids = list(o.token_ids)
                mean_lp = o.cumulative_logprob / len(ids) if ids and o.cumulative_logprob is not None else float("-inf")
                comps.append(Completion(ids, o.text, float(mean_lp)))
            out.append(comps)
        return out


def make_generator(backend: str, model: str, batch_size: int, dtype: str, max_model_len: int | None,
                   tensor_parallel_size: int) -> Generator:
    """vLLM when asked for or (``auto``) importable, else transformers."""
    if backend not in ("auto", "vllm", "hf"):
        raise ValueError(f"--backend {backend!r} must be auto, vllm or hf")
    if backend in ("auto", "vllm"):
        try:
            import vllm  # noqa: F401
        except ImportError:
            if backend == "vllm":
                raise
        else:
            return VLLMGenerate(model, max_model_len, tensor_parallel_size)
    return HFGenerate(model, batch_size, dtype)


def encode_messages(tokenizer: Any, messages: Sequence[dict], template_kwargs: dict) -> list[int]:
    """Chat template with the generation prompt, as token ids (rendered to text first, so the result does not
    depend on what ``apply_chat_template(tokenize=True)`` returns in this transformers version)."""
    text = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False, **template_kwargs)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


# ----------------------------------------------------------------------------------------------------------
# Scoring


@dataclass
class Scored:
    acc: float
    pred: str
    verdict: str


def score_all(problems: Sequence[Problem], texts: Sequence[Sequence[str]], workers: int,
              compute_score: Callable[..., dict]) -> list[list[Scored]]:
    """``compute_score`` on every (problem, response), in a thread pool (the verifier isolates its own work
    in processes and is thread-safe)."""
    jobs = [(p, j, t) for p, row in enumerate(texts) for j, t in enumerate(row)]

    def one(job):
        p, _j, text = job
        prob = problems[p]
        result = compute_score(prob.data_source, text, prob.ground_truth, prob.extra_info)
        if not isinstance(result, dict) or "acc" not in result:
            raise ValueError(f"{prob.where}: compute_score returned {result!r:.120} without an 'acc' key")
        return Scored(float(result["acc"]), str(result.get("pred", "")), str(result.get("verdict", "")))

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        flat = list(pool.map(one, jobs))
    out: list[list[Scored]] = [[] for _ in problems]
    for (p, _j, _t), s in zip(jobs, flat):
        out[p].append(s)
    return out


# ----------------------------------------------------------------------------------------------------------
# One data source, one seed


def bon_method(select: str, ability: str) -> str:
    if select != "auto":
        return select
    return "logprob" if ability.lower().startswith("code") else "majority"


def evaluate_seed(problems: list[Problem], generator: Generator, sampling: Sampling, k: int, seed: int,
                  args: argparse.Namespace, compute_score: Callable[..., dict], log: Callable[[dict], None]
                  ) -> dict[str, np.ndarray]:
    """Per-problem values of every method for one seed: ``{"sample": (P, k) acc, ...}`` plus pass@ and BoN."""
    tok = generator.tokenizer
    template_kwargs = parse_template_kwargs(args.chat_template_kwargs)
    prompts = [encode_messages(tok, p.messages, template_kwargs) for p in problems]
    completions = generator.generate(prompts, k, sampling, seed)
    scored = score_all(problems, [[c.text for c in row] for row in completions], args.score_workers, compute_score)
    acc = np.array([[s.acc for s in row] for row in scored], dtype=np.float64)
    for p, (prob, comps, scs) in enumerate(zip(problems, completions, scored)):
        for j, (c, s) in enumerate(zip(comps, scs)):
            log({"method": "sample", "seed": seed, "data_source": prob.data_source, "problem_id": prob.problem_id,
                 "sample": j, "acc": s.acc, "pred": s.pred, "verdict": s.verdict, "mean_logprob": c.mean_logprob,
                 "num_tokens": len(c.token_ids), "text": c.text})
    values: dict[str, np.ndarray] = {"sample": acc}
    if args.best_of_n:
        logp = np.array([[c.mean_logprob for c in row] for row in completions], dtype=np.float64)
        logp = np.where(np.isfinite(logp), logp, -1e9)
        answers = [[s.pred for s in row] for row in scored]
        method = bon_method(args.bon_select, problems[0].ability)
        values[f"best_of_{args.best_of_n}"] = best_of_n_per_problem(acc, answers, logp, args.best_of_n, method)[:, None]
    if args.compare_and_correct:
        values["compare_and_correct"] = compare_and_correct(problems, prompts, completions, generator, sampling, seed,
                                                            args, compute_score, log, template_kwargs)
    return values


def compare_and_correct(problems: list[Problem], prompts: list[list[int]], completions: list[list[Completion]],
                        generator: Generator, sampling: Sampling, seed: int, args: argparse.Namespace,
                        compute_score: Callable[..., dict], log: Callable[[dict], None], template_kwargs: dict
                        ) -> np.ndarray:
    """Test-time compare-and-correct: one correction per sample with a reference drawn from the other samples
    of the problem (the verifier is not consulted: every sample counts as unverified). Returns (P, k) acc."""
    k = len(completions[0])
    config = IBPOConfig(num_references=1 if k > 1 else 0, seed=seed, candidate_view=args.candidate_view,
                        max_candidate_tokens=args.max_candidate_tokens, correct_groups="all")  # every sample
    group_ids = [p for p in range(len(problems)) for _ in range(k)]
    response_ids = [c.token_ids for row in completions for c in row]
    messages = [problems[p].messages for p in group_ids]
    decode = lambda ids: generator.tokenizer.decode(list(ids), skip_special_tokens=True)  # noqa: E731
    encode = lambda text: generator.tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    requests = plan_corrections(group_ids, [False] * len(group_ids), messages, response_ids, decode, config, step=0,
                                encode=encode)
    if len(requests) != len(group_ids):
        raise RuntimeError(f"expected one correction request per sample, got {len(requests)} for {len(group_ids)}")
    correction_prompts = [encode_messages(generator.tokenizer, r.messages, template_kwargs) for r in requests]
    corrected = generator.generate(correction_prompts, 1, sampling, seed + 7_919)
    by_problem = [[c[0] for c, r in zip(corrected, requests) if r.group_id == p] for p in range(len(problems))]
    scored = score_all(problems, [[c.text for c in row] for row in by_problem], args.score_workers, compute_score)
    for p, (prob, comps, scs) in enumerate(zip(problems, by_problem, scored)):
        for j, (c, s) in enumerate(zip(comps, scs)):
            ref = requests[p * k + j].reference_rows
            log({"method": "compare_and_correct", "seed": seed, "data_source": prob.data_source,
                 "problem_id": prob.problem_id, "sample": j, "reference_sample": [r - p * k for r in ref],
                 "acc": s.acc, "pred": s.pred, "verdict": s.verdict, "mean_logprob": c.mean_logprob,
                 "num_tokens": len(c.token_ids), "text": c.text})
    return np.array([[s.acc for s in row] for row in scored], dtype=np.float64)


# ----------------------------------------------------------------------------------------------------------
# Summaries and tables


def pass_ks(k: int, requested: Sequence[int] | None) -> list[int]:
    ks = sorted({1, k, *(x for x in (8,) if x < k)} if not requested else set(requested))
    bad = [x for x in ks if not 1 <= x <= k]
    if bad:
        raise ValueError(f"--pass-k values {bad} must lie in [1, k={k}]")
    return ks


def summarize(per_seed: dict[str, list[np.ndarray]], k: int, ks: list[int], num_boot: int) -> dict:
    """CIs of every method over problems and seeds. ``per_seed[method]`` is a list over seeds of (P, n)."""
    summary: dict[str, dict] = {}
    for method, mats in per_seed.items():
        per_problem = np.stack([avg_at_k_per_problem(m) for m in mats])  # (S, P)
        entry = {"mean": bootstrap_ci(per_problem, num_boot=num_boot).as_dict()}
        if method in ("sample", "compare_and_correct"):
            n = mats[0].shape[1]
            for kk in (x for x in ks if x <= n):
                entry[f"pass@{kk}"] = bootstrap_ci(np.stack([pass_at_k_per_problem(m, kk) for m in mats]),
                                                   num_boot=num_boot).as_dict()
        summary[method] = entry
    return summary


def ci_text(ci: dict) -> str:
    """``mean [low, high]`` in %, or the mean and why there is no interval (one problem of one seed: nothing to
    resample; no spread: every replicate the same)."""
    units = max(int(ci.get("num_problems", 2)), int(ci.get("num_seeds", 1)))
    return interval_text(100 * ci["mean"], 100 * ci["low"], 100 * ci["high"], units, "{:.1f}",
                         "problems" if units == ci.get("num_problems") else "seeds")


def results_table(results: dict) -> str:
    """Markdown: one row per (data source, method), accuracy in % with the 95% CI."""
    ks = results["pass_k"]
    k = results["k"]
    header = ["data source", "method", f"avg@{k} % [95% CI]"] + [f"pass@{x} %" for x in ks if x != 1] + [
        "problems", "seeds"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * 2 + ["---:"] * (len(header) - 2)) + "|"]
    for source, ds in results["datasets"].items():
        for method, entry in ds["summary"].items():
            row = [source, method, ci_text(entry["mean"])]
            row += [ci_text(entry[f"pass@{x}"]) if f"pass@{x}" in entry else "-" for x in ks if x != 1]
            row += [str(entry["mean"]["num_problems"]), str(entry["mean"]["num_seeds"])]
            lines.append("| " + " | ".join(row) + " |")
    s = results["sampling"]
    lines.append("")
    lines.append(f"model `{results['model']}`, backend {results['backend']}, k = {k}, temperature {s['temperature']}, "
                 f"top-p {s['top_p']}, top-k {s['top_k']}, min-p {s['min_p']}, max new tokens {s['max_new_tokens']}; "
                 f"CI: percentile bootstrap over problems"
                 + (" and seeds" if len(results["seeds"]) > 1 else "") + f", {results['num_boot']} replicates.")
    if results.get("best_of_n"):
        lines.append(f"best_of_{results['best_of_n']}: selection without the verifier ({results['bon_select']}; "
                     "auto = majority vote over extracted answers for math, mean log-prob for code).")
    verdict_lines = [f"- {source} / {method}: " + ", ".join(f"{v} {n}" for v, n in sorted(counts.items(),
                                                                                        key=lambda kv: (-kv[1], kv[0])))
                     for source, ds in results["datasets"].items()
                     for method, counts in (ds.get("verdicts") or {}).items()]
    if verdict_lines:
        lines.append("")
        lines.append("Verdicts of the scored responses (all seeds; reward_fns verdicts: a wrong answer, no answer, "
                     "a timeout and a crash all score 0):")
        lines += verdict_lines
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------
# Commands


def parse_template_kwargs(text: str | None) -> dict:
    """``--chat-template-kwargs``: a JSON object, or a ``ValueError`` naming the flag."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--chat-template-kwargs {text!r}: not JSON ({exc}); e.g. '{{\"enable_thinking\": true}}'") \
            from exc
    if not isinstance(value, dict):
        raise ValueError(f"--chat-template-kwargs {text!r}: must be a JSON object, got {type(value).__name__}")
    return value


def check_model_dir(model: str) -> Path:
    """``--model`` must be a local HF checkpoint directory (``config.json`` and a tokenizer)."""
    path = Path(model).expanduser()
    if not path.is_dir():
        raise ValueError(f"--model {model}: no such directory (an HF checkpoint directory, e.g. the verl model "
                         "merger's output)")
    if not (path / "config.json").is_file():
        raise ValueError(f"--model {model}: no config.json in it; not an HF checkpoint directory")
    return path


def check_run_flags(args: argparse.Namespace) -> None:
    """Every numeric flag in range (one ``ValueError`` naming the flag), before anything is loaded."""
    at_least = {"k": 1, "batch_size": 1, "score_workers": 1, "num_boot": 100, "tensor_parallel_size": 1,
                "best_of_n": 0, "max_problems": 0, "max_candidate_tokens": 0, "max_model_len": 1}
    for name, low in at_least.items():
        value = getattr(args, name)
        if value is not None and value < low:
            raise ValueError(f"--{name.replace('_', '-')}={value} must be >= {low}")
    if args.best_of_n and not 1 <= args.best_of_n <= args.k:
        raise ValueError(f"--best-of-n={args.best_of_n} needs 1 <= N <= k={args.k}")
    if args.best_of_n and args.k % args.best_of_n:
        raise ValueError(f"--best-of-n={args.best_of_n} must divide --k={args.k}: the last {args.k % args.best_of_n} "
                         "samples of every problem would be in no Best-of-N block")
    if len(set(args.seeds)) != len(args.seeds):
        raise ValueError(f"--seeds {args.seeds}: a seed is repeated (its samples would count twice)")
    if args.backend == "vllm":
        try:
            import vllm  # noqa: F401
        except ImportError as exc:
            raise ValueError("--backend vllm: vllm is not importable here (use --backend hf or auto)") from exc
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {args.out}: exists and is not a directory")
    IBPOConfig(candidate_view=args.candidate_view, max_candidate_tokens=args.max_candidate_tokens)


def check_data_rows(paths: Sequence[str]) -> None:
    """Every row of every ``--data`` file: a data source ``reward_fns`` knows, a chat-list prompt and a gold
    answer the verifier scores as right when stated plainly (``data_prep.row_checks``, the training
    pre-flight's check): a bad row stops the run before any generation, naming file, row and field."""
    from data_prep.row_checks import check_rows
    from reward_fns import KNOWN_DATA_SOURCES

    for path in paths:
        check_rows(str(path), known_sources=KNOWN_DATA_SOURCES)


def render_prompts(model: Path, problems: Sequence[Problem], template_kwargs: dict) -> None:
    """Apply the model's chat template with ``template_kwargs`` to every prompt once, before generating: a
    template that rejects them, or a model without a tokenizer, fails here."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(model))
    except (OSError, ValueError) as exc:
        raise ValueError(f"--model {model}: cannot load its tokenizer ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:300]})") from exc
    for prob in problems:
        try:
            encode_messages(tokenizer, prob.messages, template_kwargs)
        except Exception as exc:  # noqa: BLE001 - jinja/transformers errors of the template
            raise ValueError(f"{prob.where}: the chat template of {model} fails on this prompt with "
                             f"--chat-template-kwargs {json.dumps(template_kwargs)} ({type(exc).__name__}: {exc})") \
                from exc


def verdict_counts(records: Sequence[dict]) -> dict[str, dict[str, dict[str, int]]]:
    """data source -> method -> verdict -> count, over the logged samples of every seed."""
    counts: dict[str, dict[str, dict[str, int]]] = {}
    for rec in records:
        by_method = counts.setdefault(rec["data_source"], {}).setdefault(rec["method"], {})
        by_method[rec["verdict"]] = by_method.get(rec["verdict"], 0) + 1
    return counts


def problems_by_data_source(paths: Sequence[str], max_problems: int = 0) -> dict[str, list[Problem]]:
    """The problems of every ``--data`` file (the first ``max_problems`` of each; 0 = all), by data source. A
    problem id met twice in one data source (the same file given twice, two files sharing problems) is a
    ``ValueError`` naming both rows: its samples would count twice and narrow every interval."""
    by_source: dict[str, list[Problem]] = {}
    seen: dict[tuple[str, str], str] = {}
    for path in paths:
        for prob in load_problems(path)[: max_problems or None]:
            first = seen.get((prob.data_source, prob.problem_id))
            if first is not None:
                raise ValueError(f"--data: problem {prob.problem_id!r} of {prob.data_source} is in {first} and "
                                 f"again in {prob.where}; each problem must be evaluated once")
            seen[(prob.data_source, prob.problem_id)] = prob.where
            by_source.setdefault(prob.data_source, []).append(prob)
    return by_source


def cmd_run(args: argparse.Namespace) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # everything that can be wrong is checked before the (slow) model load and generation
    sampling = resolve_sampling(args.preset, {"temperature": args.temperature, "top_p": args.top_p,
                                              "top_k": args.top_k, "min_p": args.min_p,
                                              "max_new_tokens": args.max_new_tokens})
    check_run_flags(args)
    from recipe.common.preflight.model import sampling_report

    sampling_check = sampling_report(asdict(sampling), args.model, f"sampling (--preset {args.preset})")
    print(sampling_check, flush=True)
    ks = pass_ks(args.k, args.pass_k)
    template_kwargs = parse_template_kwargs(args.chat_template_kwargs)
    model_dir = check_model_dir(args.model)
    from reward_fns import compute_score

    for path in args.data:
        if not Path(path).is_file():
            raise FileNotFoundError(f"{path}: no such parquet file")
    check_data_rows(args.data)  # first: a bad row is named as the training pre-flight names it
    problems_by_source = problems_by_data_source(args.data, args.max_problems)
    render_prompts(model_dir, [p for probs in problems_by_source.values() for p in probs], template_kwargs)
    generator = make_generator(args.backend, args.model, args.batch_size, args.dtype, args.max_model_len,
                               args.tensor_parallel_size)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    datasets: dict[str, dict] = {}
    logged: list[dict] = []
    with open(out_dir / "samples.jsonl", "w", encoding="utf-8") as sample_log:
        def log(rec: dict) -> None:
            logged.append({k: rec[k] for k in ("data_source", "method", "verdict")})
            sample_log.write(json.dumps(rec, ensure_ascii=False) + "\n")

        for source, problems in problems_by_source.items():
            per_seed: dict[str, list[np.ndarray]] = {}
            for seed in args.seeds:
                print(f"[evaluate] {source}: {len(problems)} problems x k={args.k}, seed {seed}, backend "
                      f"{generator.name} ({time.perf_counter() - t0:.0f} s so far)", file=sys.stderr, flush=True)
                for method, values in evaluate_seed(problems, generator, sampling, args.k, seed, args, compute_score,
                                                    log).items():
                    per_seed.setdefault(method, []).append(values)
            datasets[source] = {
                "problem_ids": [p.problem_id for p in problems],
                # scores[method][seed][problem] = list of 0/1 (k samples; one value for best_of_N)
                "scores": {m: [v.tolist() for v in mats] for m, mats in per_seed.items()},
                "summary": summarize(per_seed, args.k, ks, args.num_boot),
            }
    for source, by_method in verdict_counts(logged).items():
        datasets[source]["verdicts"] = by_method
    results = {
        "label": args.label or out_dir.name, "model": args.model, "backend": generator.name,
        "sampling": asdict(sampling), "sampling_check": sampling_check, "preset": args.preset, "k": args.k,
        "seeds": list(args.seeds),
        "pass_k": ks, "best_of_n": args.best_of_n, "bon_select": args.bon_select,
        "compare_and_correct": bool(args.compare_and_correct), "num_boot": args.num_boot,
        "data": [str(p) for p in args.data], "seconds": time.perf_counter() - t0, "datasets": datasets,
    }
    (out_dir / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    table = results_table(results)
    (out_dir / "results.md").write_text(table + "\n", encoding="utf-8")
    print(table)
    return 0


def checked_scores(ds: dict, source: str, method: str, where: str) -> list[np.ndarray]:
    """``datasets[source].scores[method]`` as one ``(problems, k)`` array per seed, every value checked: a list
    per seed, one non-empty list per problem (in ``problem_ids`` order), of finite numbers in [0, 1], the same k
    for every problem of a seed. Anything else is a ``ValueError`` naming the file, the field, the seed and the
    problem, not a numpy message naming neither."""
    field = f"datasets[{source!r}].scores[{method!r}]"
    ids = ds["problem_ids"]
    if not ids:
        raise ValueError(f"{where}, datasets[{source!r}].problem_ids: no problem")
    if len(set(map(str, ids))) != len(ids):
        dup = sorted({str(x) for x in ids if list(map(str, ids)).count(str(x)) > 1})[:5]
        raise ValueError(f"{where}, datasets[{source!r}].problem_ids: duplicate problem ids {dup}")
    seeds = ds["scores"][method]
    if not isinstance(seeds, list) or not seeds:
        raise ValueError(f"{where}, {field}: expected a non-empty list over seeds, got {seeds!r:.60}")
    mats = []
    for s, per_problem in enumerate(seeds):
        if not isinstance(per_problem, list) or len(per_problem) != len(ids):
            got = f"{len(per_problem)} entries" if isinstance(per_problem, list) else f"{per_problem!r:.60}"
            raise ValueError(f"{where}, {field}[{s}] (seed {s}): expected a list of {len(ids)} problems "
                             f"(problem_ids), got {got}")
        width = None
        for p, values in enumerate(per_problem):
            at = f"{where}, {field}[{s}][{p}] (seed {s}, problem {ids[p]!r})"
            if not isinstance(values, list) or not values:
                raise ValueError(f"{at}: expected a non-empty list of sample scores, got {values!r:.60}")
            bad = next((v for v in values if isinstance(v, bool) or not isinstance(v, (int, float))
                        or not math.isfinite(v) or not 0.0 <= v <= 1.0), None)
            if bad is not None:
                raise ValueError(f"{at}: score {bad!r:.60} is not a number in [0, 1]")
            if width is not None and len(values) != width:
                raise ValueError(f"{at}: {len(values)} sample scores, but the seed's first problem has {width}")
            width = len(values)
        mats.append(np.asarray(per_problem, dtype=np.float64))
    return mats


def per_problem_matrix(results: dict, source: str, method: str, where: str) -> tuple[list[str], np.ndarray]:
    """(problem ids, (seeds, problems) per-problem mean accuracy) of one method of one run."""
    ds = results["datasets"].get(source)
    if ds is None:
        raise ValueError(f"{where}: no data source {source!r} (has {sorted(results['datasets'])})")
    if method not in ds["scores"]:
        raise ValueError(f"{where}: data source {source!r} has no method {method!r} (has {sorted(ds['scores'])})")
    mats = checked_scores(ds, source, method, where)
    return [str(x) for x in ds["problem_ids"]], np.stack([avg_at_k_per_problem(m) for m in mats])


def compare_runs(a: dict, b: dict, method_a: str, method_b: str, num_boot: int, where_a: str, where_b: str
                 ) -> list[dict]:
    """Paired bootstrap (A − B) for every data source present in both runs, problems matched by id."""
    out = []
    sources = [s for s in a["datasets"] if s in b["datasets"]]
    if not sources:
        raise ValueError(f"{where_a} and {where_b} share no data source")
    for source in sources:
        ids_a, va = per_problem_matrix(a, source, method_a, where_a)
        ids_b, vb = per_problem_matrix(b, source, method_b, where_b)
        if set(ids_a) != set(ids_b):
            only_a, only_b = sorted(set(ids_a) - set(ids_b))[:5], sorted(set(ids_b) - set(ids_a))[:5]
            raise ValueError(f"{source}: {where_a} and {where_b} evaluated different problems (only in A: {only_a}, "
                             f"only in B: {only_b}); pairing needs the same")
        order = [ids_b.index(pid) for pid in ids_a]
        vb = vb[:, order]
        if len(ids_a) < 2:
            # one problem: no problem to resample, so no interval and no p (a bootstrap over one problem gives a
            # zero-width "95% CI" and p = 1/(B+1) whatever the data)
            mean_a, mean_b = float(va.mean()), float(vb.mean())
            row = {"mean_a": mean_a, "mean_b": mean_b, "diff": mean_a - mean_b, "ci_low": None, "ci_high": None,
                   "p_value": None, "confidence": 0.95, "num_boot": 0, "num_problems": len(ids_a)}
        else:
            row = paired_bootstrap_test(va, vb, num_boot=num_boot).as_dict()
        out.append({"data_source": source, "a": f"{a['label']}:{method_a}", "b": f"{b['label']}:{method_b}", **row})
    return out


SETTING_FIELDS = ("k", "sampling", "preset", "best_of_n", "bon_select", "seeds")


def setting_differences(a: dict, b: dict) -> list[str]:
    """The recorded evaluation settings in which run A and run B differ (k, each sampling setting, preset,
    Best-of-N, seeds): a difference between the runs is then partly a difference of these settings."""
    diffs = []
    for field in SETTING_FIELDS:
        va, vb = a.get(field), b.get(field)
        if isinstance(va, dict) and isinstance(vb, dict):
            diffs += [f"{field}.{key} {va.get(key)!r} vs {vb.get(key)!r}" for key in sorted(set(va) | set(vb))
                      if va.get(key) != vb.get(key)]
        elif va != vb and (va is not None or vb is not None):
            diffs.append(f"{field} {va!r} vs {vb!r}")
    return diffs


def unpaired_sources(a: dict, b: dict) -> list[str]:
    """The data sources only one of the runs evaluated (left out of the comparison; the table says so)."""
    return ([f"{s} (only in A)" for s in a["datasets"] if s not in b["datasets"]]
            + [f"{s} (only in B)" for s in b["datasets"] if s not in a["datasets"]])


def comparison_table(rows: list[dict], differences: Sequence[str] = (), unpaired: Sequence[str] = ()) -> str:
    header = ["data source", "A", "B", "A %", "B %", "A − B (pp) [95% CI]", "p (two-sided)", "problems"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * 5) + "|"]
    for r in rows:
        lines.append("| " + " | ".join([
            r["data_source"], r["a"], r["b"], f"{100 * r['mean_a']:.1f}", f"{100 * r['mean_b']:.1f}",
            diff_text(r), p_text(r), str(r["num_problems"])]) + " |")
    lines.append("")
    if differences:
        lines.append("**Note: the runs were evaluated with different settings** (A vs B: " + "; ".join(differences)
                     + "): the difference is partly a difference of these settings, not only of the models.")
        lines.append("")
    if unpaired:
        lines.append("Not compared (one run only): " + ", ".join(unpaired) + ".")
        lines.append("")
    lines.append("Paired bootstrap: problems resampled jointly for A and B, seeds independently per run; p from the "
                 "centred bootstrap distribution of the difference (evaluation.stats).")
    return "\n".join(lines)


def diff_text(r: dict) -> str:
    """``A − B [low, high]`` in pp, or the difference and why there is no interval (``interval_text``)."""
    low, high = _row_bounds(r)
    return interval_text(100 * r["diff"], 100 * low, 100 * high, r["num_problems"], "{:+.1f}", "problems")


def p_text(r: dict) -> str:
    """The p-value, only where there is an interval (``no_interval_reason``): with one problem or no spread of the
    bootstrap the centred p is 1/(B+1) whatever the data."""
    low, high = _row_bounds(r)
    if no_interval_reason(100 * r["diff"], 100 * low, 100 * high, r["num_problems"], "problems") is not None:
        return "-"
    return p_value_text(r["p_value"], "{:.4f}")


def _row_bounds(r: dict) -> tuple[float, float]:
    """A comparison row's interval bounds, NaN where it has none (``None`` in the JSON: one problem)."""
    return tuple(float("nan") if r[key] is None else float(r[key]) for key in ("ci_low", "ci_high"))


def read_results(path: str) -> dict:
    """A ``results.json`` of ``evaluate.py run`` (or the run's output directory holding one); anything else,
    including ``compare``'s own output, is a ``ValueError`` saying what the file is."""
    file = Path(path)
    if file.is_dir():
        file = file / "results.json"
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable results.json of `evaluate.py run` ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:200]})") from exc
    if isinstance(data, list) and data and all(isinstance(r, dict) and "diff" in r and "data_source" in r
                                               for r in data):
        raise ValueError(f"{path}: this is the output of `evaluate.py compare` (paired differences), not a "
                         "results.json of `evaluate.py run`; compare takes two results.json")
    datasets = data.get("datasets") if isinstance(data, dict) else None
    if not isinstance(datasets, dict) or not all(isinstance(d, dict) and isinstance(d.get("scores"), dict)
                                                 and isinstance(d.get("problem_ids"), list)
                                                 for d in datasets.values()):
        raise ValueError(f"{path}: not a results.json of `evaluate.py run` (expected an object with 'datasets': "
                         "{source: {'problem_ids', 'scores', ...}})")
    data.setdefault("label", file.parent.name)
    return data


def results_file(path: str) -> Path:
    """The results.json a ``compare`` argument names (the file, or the one in the run's directory)."""
    file = Path(path)
    return (file / "results.json" if file.is_dir() else file).resolve()


def check_compare_paths(args: argparse.Namespace) -> None:
    """``--out`` and its ``.json`` are two new files, neither an input (``compare A B --out A/results.md`` wrote its
    rows over ``A/results.json``; ``--out cmp.json`` wrote the rows over the table); and a run is not compared with
    itself under the same method (a difference of exactly 0 that says nothing): a ``ValueError`` naming them."""
    inputs = {results_file(args.run_a): "run_a", results_file(args.run_b): "run_b"}
    if len(inputs) == 1 and args.method_a == args.method_b:
        raise ValueError(f"run_a {args.run_a} and run_b {args.run_b} are the same results.json and --method-a = "
                         f"--method-b = {args.method_a!r}: a run compared with itself; give two runs, or two methods")
    if args.out:
        table, rows = Path(args.out).resolve(), Path(args.out).with_suffix(".json").resolve()
        if table == rows:
            raise ValueError(f"--out {args.out}: the table and its rows (.json beside it) would be the same file; "
                             "give a .md path")
        for out in (table, rows):
            if out in inputs:
                raise ValueError(f"--out {args.out}: would write {out}, the {inputs[out]} results.json")


def cmd_compare(args: argparse.Namespace) -> int:
    if args.num_boot < 100:
        raise ValueError(f"--num-boot={args.num_boot} must be >= 100 (a percentile interval needs replicates)")
    check_compare_paths(args)
    runs = [read_results(path) for path in (args.run_a, args.run_b)]
    rows = compare_runs(runs[0], runs[1], args.method_a, args.method_b, args.num_boot, args.run_a, args.run_b)
    table = comparison_table(rows, setting_differences(runs[0], runs[1]), unpaired_sources(runs[0], runs[1]))
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n", encoding="utf-8")
        Path(args.out).with_suffix(".json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The docstring as written, and every flag's default in its help."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="generate, score and summarise", formatter_class=HelpFormatter,
                         description="Generate k samples per problem, score them with reward_fns, summarise. "
                                     "Model, rows and flags are checked before any generation.")
    run.add_argument("--model", required=True, help="HF checkpoint directory (verl model merger output)")
    run.add_argument("--data", nargs="+", required=True, help="prepared parquet files (data_prep); every row is "
                                                                "checked before generating")
    run.add_argument("--out", required=True, help="output directory")
    run.add_argument("--label", help="name of this run in comparisons (None: the output directory's name)")
    run.add_argument("--preset", default="qwen3-32b", choices=sorted(PRESETS),
                     help="sampling settings of the paper's model family; the flags below override them")
    run.add_argument("--temperature", type=float, help="sampling temperature (None: the preset's)")
    run.add_argument("--top-p", type=float, help="nucleus sampling mass in (0, 1] (None: the preset's)")
    run.add_argument("--top-k", type=int, help="top-k sampling, 0 or -1 = off (None: the preset's)")
    run.add_argument("--min-p", type=float, help="min-p sampling in [0, 1) (None: the preset's)")
    run.add_argument("--max-new-tokens", type=int, help="response length limit in tokens (None: the preset's)")
    run.add_argument("--k", type=int, default=64, help="samples per problem (paper: 64)")
    run.add_argument("--seeds", type=int, nargs="+", default=[0], help="generation seeds; several give a CI over seeds")
    run.add_argument("--pass-k", type=int, nargs="+", help="pass@k values to report (None: 1, 8, k)")
    run.add_argument("--best-of-n", type=int, default=0, help="Best-of-N baseline with this N (paper: 8); 0 = off")
    run.add_argument("--bon-select", default="auto", choices=["auto", "majority", "logprob"],
                     help="Best-of-N selection without the verifier (auto: majority vote for math, log-prob for code)")
    run.add_argument("--compare-and-correct", action="store_true", help="test-time compare-and-correct baseline")
    run.add_argument("--candidate-view", default="full", choices=["full", "strip_thinking"],
                     help="compare-and-correct: candidates shown whole or without their <think> block")
    run.add_argument("--max-candidate-tokens", type=int, default=0,
                     help="compare-and-correct: middle-truncate each candidate to this many tokens (0 = no limit)")
    run.add_argument("--chat-template-kwargs",
                     help="""JSON object passed to the chat template, e.g. '{"enable_thinking": true}' """
                          "(checked on every prompt before generating)")
    run.add_argument("--backend", default="auto", choices=["auto", "vllm", "hf"],
                     help="generation backend (auto: vLLM when importable, else transformers)")
    run.add_argument("--batch-size", type=int, default=16, help="hf backend: sequences per generate call")
    run.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"], help="hf backend: weights dtype")
    run.add_argument("--max-model-len", type=int, help="vllm backend: context length (None: the model's)")
    run.add_argument("--tensor-parallel-size", type=int, default=1, help="vllm backend: GPUs per model")
    run.add_argument("--score-workers", type=int, default=4, help="threads calling the verifier")
    run.add_argument("--max-problems", type=int, default=0, help="first N problems of each file (0 = all)")
    run.add_argument("--num-boot", type=int, default=10_000, help="bootstrap replicates of the confidence intervals")
    run.set_defaults(func=cmd_run)
    cmp_ = sub.add_parser("compare", help="paired bootstrap test between two results.json",
                          formatter_class=HelpFormatter,
                          description="Paired bootstrap test (A - B) between two results.json of `evaluate.py run`, "
                                      "over the data sources both evaluated (the others are listed under the table); "
                                      "a run with itself under one method, or an --out over an input, is refused.")
    cmp_.add_argument("run_a", help="results.json of run A (or its output directory)")
    cmp_.add_argument("run_b", help="results.json of run B (or its output directory)")
    cmp_.add_argument("--method-a", default="sample", help="method of run A to compare (sample, best_of_N, "
                                                            "compare_and_correct)")
    cmp_.add_argument("--method-b", default="sample", help="method of run B to compare")
    cmp_.add_argument("--num-boot", type=int, default=10_000, help="bootstrap replicates")
    cmp_.add_argument("--out", help="write the Markdown table here (and the rows as .json beside it)")
    cmp_.set_defaults(func=cmd_compare)
    return parser


def refuse_unused_run_options(parser: argparse.ArgumentParser, argv: list[str] | None,
                              args: argparse.Namespace) -> None:
    """``run``'s options that the chosen settings do not use are refused by name (``parser.error``, exit 2), not
    accepted and ignored: the Best-of-N selection without ``--best-of-n``, the candidate options without
    ``--compare-and-correct``, one backend's options with the other backend named (``auto`` decides at run time)."""
    if not args.best_of_n:
        refuse_unused(parser, argv, {"bon_select": "--bon-select"}, "--best-of-n 0", "no Best-of-N baseline runs")
    if not args.compare_and_correct:
        refuse_unused(parser, argv, {"candidate_view": "--candidate-view",
                                     "max_candidate_tokens": "--max-candidate-tokens"},
                      "no --compare-and-correct", "they shape the compare-and-correct baseline's prompts")
    backend_only = {"hf": {"batch_size": "--batch-size", "dtype": "--dtype"},
                    "vllm": {"max_model_len": "--max-model-len", "tensor_parallel_size": "--tensor-parallel-size"}}
    for backend, other in (("hf", "vllm"), ("vllm", "hf")):
        if args.backend == backend:
            refuse_unused(parser, argv, backend_only[other], f"--backend {backend}", f"{other} backend options")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "run":
        refuse_unused_run_options(parser, argv, args)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
