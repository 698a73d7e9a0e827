#!/usr/bin/env python
"""The one-GPU launch script at its real model shape: does it fit, how long is each phase, what share is the
correction pass. One command, a table at the end:

    python lab/scripts/bench_one_gpu_shape.py --out outputs/shape_1p7b                      # 3 steps, L = 8192
    python lab/scripts/bench_one_gpu_shape.py --out outputs/shape_1p7b --speculation ngram --bound-factor 1.5

It writes a Qwen3-1.7B-shaped model with *random* weights (``transformers`` ``from_config``, bf16, saved
locally with a tokenizer of its whole vocabulary and an exact round trip: no hub access), the synthetic task's
parquet files, and runs ``recipe/ibpo/run_ibpo_qwen3_1p7b_1gpu.sh`` (its sizes: G = 8, 32 prompts, 8k responses in
a 32k context with whole correction candidates; ``rollout.prompt_length`` raised for that tokenizer's longer
correction template, :func:`correction_prompt_length`) for ``--steps`` steps with responses forced to the full
length (``rollout.ignore_eos=True``). Random weights never answer right, so every response is wrong and every group is
all-wrong: the package default ``ibpo.correct_groups=mixed`` would skip them all, so the bench passes the paper's
rule, ``ibpo.correct_groups=all`` (Alg. 1: every wrong response gets a correction; a heavier correction pass than
the 6 of 8 wrong the other tables use), and prints per step how many corrections ran (``ibpo/num_corrections`` of
``ibpo/num_wrong``). A thread polls ``nvidia-smi`` for the peak GPU memory. The table: per step, seconds per phase
(``ibpo/time/*``, verl's ``timing_s``), the correction pass's share of the step and of generation, and the peak
memory. Without CUDA it prints why and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from option_types.cli import nonnegative_float, positive_float, positive_int  # noqa: E402

# Qwen3-1.7B's config.json shape (the published model card's architecture), random weights.
QWEN3_1P7B_SHAPE = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 2048, "intermediate_size": 6144,
    "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
    "vocab_size": 151936, "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "max_position_embeddings": 40960, "tie_word_embeddings": True, "attention_bias": False,
    "attention_dropout": 0.0, "initializer_range": 0.02, "torch_dtype": "bfloat16", "use_sliding_window": False,
    "bos_token_id": 0, "eos_token_id": 2,
}
# the same model at a CPU test's width (the vocabulary, context and layout kept)
TINY_WIDTH = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16}
PHASES = [("main_gen", "main gen"), ("correction_gen", "correction gen"), ("reward", "reward"), ("host", "IBPO host"),
          ("old_log_prob", "old log-prob"), ("update_actor", "actor update"), ("update_weights", "weight sync")]


def skip_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device (this runs the one-GPU launch script)"
    if importlib.util.find_spec("vllm") is None:  # not imported here: the parent of a verl run needs none of it
        return "vLLM is not installed"
    return None


def qwen3_1p7b_config(tiny: bool = False):
    """``transformers``' config of :data:`QWEN3_1P7B_SHAPE` (``tiny``: at :data:`TINY_WIDTH`)."""
    from transformers import AutoConfig

    shape = {**QWEN3_1P7B_SHAPE, **(TINY_WIDTH if tiny else {})}
    config = AutoConfig.for_model(**{k: v for k, v in shape.items() if k != "architectures"})
    config.architectures = QWEN3_1P7B_SHAPE["architectures"]
    return config


def write_model_config(out: Path, tiny: bool = False) -> Path:
    """The shape's config.json and a tokenizer of its whole vocabulary with an exact round trip
    (``verl_cpu.tiny_assets.build_full_vocab_tokenizer``: a random model's response decodes to as many tokens as
    it generated, so correction prompts and joint rows reach the lengths the method gives them), no weights
    (vLLM's ``load_format=dummy``)."""
    from verl_cpu.tiny_assets import build_full_vocab_tokenizer

    out.mkdir(parents=True, exist_ok=True)
    if not (out / "tokenizer.json").exists():
        build_full_vocab_tokenizer(out, QWEN3_1P7B_SHAPE["vocab_size"])
    qwen3_1p7b_config(tiny).save_pretrained(out)
    return out


def write_random_model(out: Path, seed: int = 0, device: str = "cpu", tiny: bool = False) -> Path:
    """A Qwen3-1.7B-shaped checkpoint (``tiny``: at a CPU test's width) with random weights and its full-vocabulary
    tokenizer; ``device="cuda"`` draws the weights on the GPU (seconds instead of a minute of CPU)."""
    import torch
    from transformers import AutoModelForCausalLM

    if (out / "config.json").exists() and any(out.glob("*.safetensors")):
        return out
    write_model_config(out, tiny)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(qwen3_1p7b_config(tiny), torch_dtype=torch.bfloat16)
    model.save_pretrained(out)
    del model
    if device != "cpu":
        torch.cuda.empty_cache()  # the launch that follows needs the memory
    return out


def correction_prompt_length(max_prompt: int, candidate: int) -> int:
    """``rollout.prompt_length`` that holds IBPO's correction prompts with the full-vocabulary tokenizer
    (:func:`write_model_config`), which spends exactly one token per character: the correction template's text is
    then ~4x a BPE tokenizer's (371 tokens, where the launch scripts' arithmetic allows 256,
    ``CORRECTION_TEMPLATE_TOKENS``); the candidates, the part that grows with the response length, keep their
    exact lengths. The pre-flight measures the template with the run's tokenizer and refuses a shorter value."""
    from ibpo.correction_lengths import correction_prompt_tokens
    from ibpo.options import IBPOConfig
    from recipe.ibpo.start_checks import correction_template_tokens

    ibpo = IBPOConfig()
    one_per_character = SimpleNamespace(encode=lambda text, add_special_tokens=False: list(text))
    template = correction_template_tokens(ibpo, one_per_character)
    return correction_prompt_tokens(max_prompt, template, 1 + ibpo.num_references, candidate)


def launch_command(model: Path, data: dict, out: Path, steps: int, extra: list[str], max_prompt: int = 1024,
                   max_response: int = 8192) -> tuple[list[str], dict]:
    """The launch script's command and environment for a short shape run (its ``MAX_PROMPT`` and
    ``MAX_RESPONSE``; candidates whole, ``rollout.prompt_length`` by :func:`correction_prompt_length`)."""
    env = {"MODEL_PATH": str(model), "TRAIN_FILES": f"['{data['train']}']", "VAL_FILES": f"['{data['val']}']",
           "CKPTS_DIR": str(out / "ckpts"), "TOTAL_STEPS": str(steps), "LOGGER": "['console','file']",
           "VERL_FILE_LOGGER_PATH": str(out / "metrics.jsonl"), "MAX_PROMPT": str(max_prompt),
           "MAX_RESPONSE": str(max_response)}
    # random weights: every group is all-wrong; the paper's rule corrects them (mixed would correct none)
    overrides = ["trainer.val_before_train=False", "trainer.test_freq=-1", "trainer.save_freq=-1",
                 "actor_rollout_ref.rollout.ignore_eos=True", "ibpo.correct_groups=all",
                 f"actor_rollout_ref.rollout.prompt_length={correction_prompt_length(max_prompt, max_response)}",
                 *extra]
    return ["bash", str(ROOT / "recipe" / "ibpo" / "run_ibpo_qwen3_1p7b_1gpu.sh"), *overrides], env


class PeakMemory(threading.Thread):
    """Polls ``nvidia-smi`` for the largest memory.used seen (MiB)."""

    def __init__(self, every_s: float = 1.0):
        super().__init__(daemon=True)
        self.every_s, self.peak_mib, self._stop = every_s, 0, threading.Event()

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                used = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                      capture_output=True, text=True, timeout=10).stdout.split()
                self.peak_mib = max([self.peak_mib, *(int(x) for x in used if x.isdigit())])
            except (OSError, subprocess.SubprocessError):
                pass
            self._stop.wait(self.every_s)

    def stop(self) -> None:
        self._stop.set()


def step_rows(metrics: dict[int, dict[str, float]]) -> list[dict]:
    """Per step: seconds per phase, the correction pass's share of the step and of generation."""
    rows = []
    for step in sorted(metrics):
        m = metrics[step]
        total = m.get("timing_s/step", 0.0)
        row = {"step": step, "step_s": total, **{k: m.get(f"ibpo/time/{k}_s", 0.0) for k, _ in PHASES}}
        gen = row["main_gen"] + row["correction_gen"]
        row["correction_share_step"] = row["correction_gen"] / total if total else 0.0
        row["correction_vs_main"] = row["correction_gen"] / row["main_gen"] if row["main_gen"] else 0.0
        row["correction_share_gen"] = row["correction_gen"] / gen if gen else 0.0
        row["lookup_steps_saved"] = m.get("ibpo/correction/lookup_decode_step_reduction")
        row["corrections"], row["wrong"] = m.get("ibpo/num_corrections"), m.get("ibpo/num_wrong")
        # the rollout's own vLLM counters (recipe/ibpo/correction/rollout.py spec_counter_metrics): None without
        # speculation; drafted-step share 0 = speculation was off
        for key in ("spec_accepted_per_decode_step", "spec_drafted_step_share", "spec_stats_reported"):
            row[key] = m.get(f"rollout/{key}")
        rows.append(row)
    return rows


def format_table(rows: list[dict], peak_mib: int) -> str:
    head = "| step | step s | " + " | ".join(name for _, name in PHASES) + \
        " | correction / main gen | correction share of step | lookup proxy: decode steps saved |"
    lines = [head, "|" + "---:|" * (len(PHASES) + 5)]
    for r in rows:
        saved = "n/a" if r["lookup_steps_saved"] is None else f"{100 * r['lookup_steps_saved']:.1f}%"
        step = f"{r['step']} {r['method']}" if r.get("method") else r["step"]  # IBPO / GSPO where the run says
        lines.append(f"| {step} | {r['step_s']:.1f} | " + " | ".join(f"{r[k]:.1f}" for k, _ in PHASES) +
                     f" | {r['correction_vs_main']:.2f} | {100 * r['correction_share_step']:.0f}% | {saved} |")
    lines.append(f"\npeak GPU memory (nvidia-smi, all processes): {peak_mib / 1024:.1f} GiB")
    lines.extend(corrections_line(r) for r in rows)
    return "\n".join(lines)


def corrections_line(row: dict) -> str:
    """How many corrections ran in a step, for how many wrong responses (the trainer's own counts)."""
    ran, wrong = row.get("corrections"), row.get("wrong")
    if ran is None or wrong is None:
        return f"step {row['step']}: corrections not reported (no ibpo/num_corrections in the metrics)"
    return f"step {row['step']}: {ran:.0f} corrections ran for {wrong:.0f} wrong responses"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("outputs/shape_1p7b"))
    p.add_argument("--steps", type=positive_int, default=3)
    p.add_argument("--speculation", choices=["off", "ngram", "suffix"], default="off")
    p.add_argument("--ngram", default="2:5:8")
    p.add_argument("--bound-factor", type=nonnegative_float, default=0.0)
    p.add_argument("--timeout", type=positive_float, default=3000.0)
    p.add_argument("extra", nargs="*", help="more Hydra overrides for the launch script")
    args = p.parse_args(argv)
    reason = skip_reason()
    if reason is not None:
        print(f"bench_one_gpu_shape: skipped: {reason}")
        return 0
    from toy_task.synthetic_task import write_task_parquets
    from verl_cpu.launch import read_metrics_jsonl

    out = args.out.resolve()
    model = write_random_model(out / "model")
    data = write_task_parquets(out / "data", n_train=256, n_val=16)
    extra = list(args.extra)
    if args.speculation != "off":
        lo, hi, k = (int(x) for x in args.ngram.split(":"))
        spec = ("{method:ngram,prompt_lookup_min:%d,prompt_lookup_max:%d,num_speculative_tokens:%d}" % (lo, hi, k)
                if args.speculation == "ngram" else "{method:suffix}")
        extra.append(f"+actor_rollout_ref.rollout.engine_kwargs.vllm.speculative_config={spec}")
        extra.append("actor_rollout_ref.rollout.disable_log_stats=False")  # the per-step speculation counters
    if args.bound_factor > 0:
        extra.append(f"ibpo.correction_max_tokens_factor={args.bound_factor}")
    cmd, env = launch_command(model, data, out, args.steps, extra)
    (out / "metrics.jsonl").unlink(missing_ok=True)
    monitor = PeakMemory()
    monitor.start()
    start = time.monotonic()
    with open(out / "train.log", "w") as log:
        proc = subprocess.run(cmd, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                              timeout=args.timeout)
    monitor.stop()
    print(f"launch script exited {proc.returncode} after {time.monotonic() - start:.0f} s (log {out / 'train.log'})")
    metrics = read_metrics_jsonl(out / "metrics.jsonl") if (out / "metrics.jsonl").exists() else {}
    print(format_table(step_rows(metrics), monitor.peak_mib))
    (out / "summary.json").write_text(json.dumps({"rows": step_rows(metrics), "peak_mib": monitor.peak_mib,
                                                  "returncode": proc.returncode}, indent=1))
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
