"""A model, tokenizer and data for running a launch script on CPU at its own sequence lengths (docs/gpu.md, "Real
lengths on CPU"): a tiny random Qwen3 whose vocabulary is its tokenizer's, an exact decode/encode round trip,
responses that always run to their full length, and prompts as long as the script's ``MAX_PROMPT``.

- The tokenizer is one token per character (printable ASCII and newline) plus, as single tokens, the fixed
  phrases of the prompts (the DAPO template, the correction template's lines), about as few tokens as a real BPE
  gives them; so ``encode(decode(ids)) == ids`` for any sampled ids (a phrase token spells a whole line, which random
  characters do not), and a correction prompt x~ holds each candidate with exactly its own token count.
- The model's ``generation_config.suppress_tokens`` lists every special token, EOS included: the ``hf`` rollout
  (``verl_cpu.hf_rollout``) never samples one, so every response, correction and validation answer is
  ``max_tokens`` long and the longest correction prompts and joint-training rows of the script's configuration occur.
- ``data/``: ``dapo_math_17k.parquet`` (train), ``aime25.parquet``, ``hmmt_feb_2025.parquet`` (validation) and
  ``gsm8k_train.parquet`` / ``gsm8k_test.parquet``, whose prompts are exactly ``--max-prompt`` tokens.

    python -m verl_cpu.real_length_assets --out /tmp/real --max-prompt 1024 --context 40960
"""

from __future__ import annotations

import argparse
import string
from pathlib import Path

from verl_cpu.tiny_assets import CHAT_TEMPLATE, SPECIAL_TOKENS

ALPHABET = [c for c in string.printable if c not in "\t\r\x0b\x0c"]  # 95 printable ASCII + newline


def prompt_phrases() -> list[str]:
    """The fixed lines of the prompts a run writes: the DAPO and boxed templates' and the correction template's."""
    from data_prep.templates import BOXED_INSTRUCTION, DAPO_PREFIX, DAPO_SUFFIX
    from ibpo.options import IBPOConfig
    from ibpo.prompts import build_correction_messages

    ibpo = IBPOConfig()
    scaffold = build_correction_messages([{"role": "user", "content": ""}], "", [""] * ibpo.num_references, ibpo)
    lines = {line for text in (DAPO_PREFIX, DAPO_SUFFIX, BOXED_INSTRUCTION, scaffold[-1]["content"]) for line in text.split("\n")}
    return sorted(line for line in lines if len(line) > 1)


def build_round_trip_tokenizer(out_dir: str | Path):
    """Save and return the character-plus-phrase tokenizer (a ChatML chat template, EOS ``<|im_end|>``)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + ALPHABET)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>", pad_token="<|pad|>",
                                   unk_token="<|endoftext|>", additional_special_tokens=["<|im_start|>"])
    fast.add_tokens(prompt_phrases())  # non-special: decoded as their text, matched whole on encoding
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)
    return fast


def filled_problem(tokenizer, max_prompt: int, template: str) -> str:
    """A problem whose templated chat prompt is exactly ``max_prompt`` tokens (verl drops longer ones)."""
    from data_prep.templates import render_math_prompt

    def length(problem: str) -> int:
        messages = [{"role": "user", "content": render_math_prompt(problem, template)}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return len(tokenizer.encode(text, add_special_tokens=False))

    stem = "What is 12 + 30? "
    room = max_prompt - length(stem)
    if room < 0:
        raise ValueError(f"--max-prompt {max_prompt} is shorter than the template's own {length(stem)} tokens")
    problem = stem + ("Let x be the sum. " * (room // 18 + 1))[:room]
    assert length(problem) == max_prompt, (length(problem), max_prompt)
    return problem


def write_data(out_dir: str | Path, tokenizer, max_prompt: int, rows: int = 4) -> dict[str, str]:
    """The parquet files the launch scripts read by default from ``DATA_DIR``."""
    from data_prep.common import MATH_EXTRA_INFO, make_math_row, write_verl_parquet

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {"dapo_math_17k": ("train", rows), "aime25": ("test", 1), "hmmt_feb_2025": ("test", 1),
             "gsm8k_train": ("train", rows), "gsm8k_test": ("test", 1)}
    written = {}
    for name, (split, n) in files.items():
        template = "dapo" if name == "dapo_math_17k" else "boxed"
        problem = filled_problem(tokenizer, max_prompt, template)
        data_source = "openai/gsm8k" if name.startswith("gsm8k") else "math_dapo"
        table = [make_math_row(data_source=data_source, problem=problem, answer="42", template=template, split=split,
                               index=i, problem_id=f"{name}-{i}", source="real_length_assets") for i in range(n)]
        written[name] = str(write_verl_parquet(table, out / f"{name}.parquet", MATH_EXTRA_INFO))
    return written


def build_real_length_assets(out_dir: str | Path, max_prompt: int, context: int, hidden_size: int = 16,
                             seed: int = 0, heads: int = 2) -> dict[str, str]:
    """``out_dir/model`` (tokenizer beside it) and ``out_dir/data``; returns their paths. ``heads``: attention
    heads (one key-value head); ulysses sequence parallelism of size sp needs a multiple of sp."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    out = Path(out_dir)
    tokenizer = build_round_trip_tokenizer(out / "model")
    torch.manual_seed(seed)
    # Qwen3, as the scripts' models (transformers maps a qwen2 checkpoint to its own tokenizer class, not this one)
    model = Qwen3ForCausalLM(Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size, num_hidden_layers=1,
        num_attention_heads=heads, num_key_value_heads=1, head_dim=hidden_size // heads, max_position_embeddings=context,
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id))
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.suppress_tokens = sorted(tokenizer.all_special_ids)  # EOS never sampled
    model.save_pretrained(out / "model")
    write_data(out / "data", tokenizer, max_prompt)
    return {"model": str(out / "model"), "data": str(out / "data")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="output folder (model/ and data/)")
    parser.add_argument("--max-prompt", type=int, required=True, help="the script's MAX_PROMPT: each prompt's tokens")
    parser.add_argument("--context", type=int, required=True,
                        help="the model's max_position_embeddings (the real model's: 40960 for Qwen3-1.7B)")
    parser.add_argument("--hidden-size", type=int, default=16)
    parser.add_argument("--heads", type=int, default=2, help="attention heads: a multiple of the script's SP_SIZE")
    args = parser.parse_args()
    print(build_real_length_assets(args.out, args.max_prompt, args.context, args.hidden_size, heads=args.heads))


if __name__ == "__main__":
    main()
