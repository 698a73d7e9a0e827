"""Tiny, locally built model and tokenizer for CPU runs and tests (no hub access).

The tokenizer is a byte-level BPE trained in a second on synthetic arithmetic chat text, wrapped in
``PreTrainedTokenizerFast`` with a ChatML chat template (the format Qwen models use), so verl's agent
loop can apply ``apply_chat_template`` exactly as it does for a real model. The model is a randomly
initialised Qwen2 causal LM with ~0.1M parameters. :func:`build_full_vocab_tokenizer` is a tokenizer as wide as a
real model's vocabulary with an exact decode/encode round trip (the GPU bench's random Qwen3-1.7B-shaped models).

    python -m verl_cpu.tiny_assets --out /tmp/tiny   # writes /tmp/tiny/{tokenizer,model}
"""

from __future__ import annotations

import argparse
import os
import random
import unicodedata
from pathlib import Path
from typing import Sequence

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]

# ChatML, as Qwen2/Qwen3 use it; `add_generation_prompt` opens the assistant turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _training_corpus(num_lines: int, seed: int) -> list[str]:
    """Synthetic chat-formatted text covering digits, operators, LaTeX boxing and the IBPO prompt words."""
    rng = random.Random(seed)
    words = (
        "You are given two candidate solutions to the same problem . Compare them step by step , identify any "
        "inconsistencies or errors , and then produce a corrected solution and final answer . Solution Problem "
        "Let's think step by step and output the final answer after #### What is the answer within boxed "
        "Please reason put your final answer Answer : truncated tokens def solve input print return class"
    ).split()
    lines = []
    for _ in range(num_lines):
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        op = rng.choice(["+", "-", "*"])
        filler = " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
        lines.append(
            f"<|im_start|>user\nWhat is {a} {op} {b}? {filler}<|im_end|>\n"
            f"<|im_start|>assistant\n{a} {op} {b} = {eval(f'{a}{op}{b}')} \\boxed{{{eval(f'{a}{op}{b}')}}}"
            f" #### {eval(f'{a}{op}{b}')}<|im_end|>\n"
        )
    return lines


def build_tiny_tokenizer(out_dir: str | os.PathLike, vocab_size: int = 512, seed: int = 0,
                         corpus: Sequence[str] | None = None, individual_digits: bool = False):
    """Train and save a byte-level BPE chat tokenizer; returns the loaded ``PreTrainedTokenizerFast``.

    ``corpus`` replaces the default synthetic arithmetic chat text; ``individual_digits`` splits every digit
    into its own token (as Qwen's tokenizers do), so a model can address the digits of a number one by one.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token=None))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
                         if individual_digits else byte_level)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus) if corpus is not None else _training_corpus(800, seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        unk_token=None,
        additional_special_tokens=["<|endoftext|>", "<|im_start|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def build_full_vocab_tokenizer(out_dir: str | os.PathLike, vocab_size: int):
    """A chat tokenizer of exactly ``vocab_size`` ids (a real model's vocabulary: 151,936 for Qwen3-1.7B), saved
    and returned as ``PreTrainedTokenizerFast``: the four specials of :data:`SPECIAL_TOKENS` (ids 0-3, as
    :func:`build_tiny_tokenizer`'s), then one character per id (printable ASCII, newline and tab, then code points
    upward from U+00A1 that are neither whitespace, a control character nor a surrogate); no merges, no
    normaliser, no pre-tokeniser. Decoding ids gives their characters in order and encoding that text gives the
    same ids back, whatever the sequence (unless its characters happen to spell a special token), so a random
    model's response of n tokens is n tokens again inside a correction prompt. Text costs one token per
    character; a character outside the vocabulary encodes as ``<|endoftext|>``."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    chars = [chr(c) for c in range(0x20, 0x7F)] + ["\n", "\t"]
    if vocab_size < len(SPECIAL_TOKENS) + len(chars):
        raise ValueError(f"vocab_size={vocab_size}: needs at least {len(SPECIAL_TOKENS) + len(chars)} ids (the "
                         "specials, printable ASCII, newline and tab)")
    code = 0xA1
    while len(SPECIAL_TOKENS) + len(chars) < vocab_size:
        if not (chr(code).isspace() or 0xD800 <= code <= 0xDFFF or unicodedata.category(chr(code)) == "Cc"):
            chars.append(chr(code))
        code += 1
    tokens = SPECIAL_TOKENS + chars[:vocab_size - len(SPECIAL_TOKENS)]
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, [], unk_token=SPECIAL_TOKENS[0]))
    tok.decoder = decoders.Fuse()  # the characters joined as they are (no spaces between tokens)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
                                   pad_token="<|pad|>", unk_token=SPECIAL_TOKENS[0],
                                   additional_special_tokens=["<|endoftext|>", "<|im_start|>"],
                                   clean_up_tokenization_spaces=False)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(Path(out_dir))
    return fast


def build_tiny_model(out_dir: str | os.PathLike, tokenizer, hidden_size: int = 64, num_layers: int = 2,
                     seed: int = 0, max_position_embeddings: int = 4096):
    """Save a randomly initialised tiny Qwen2 causal LM (and the tokenizer beside it) to ``out_dir``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForCausalLM(config)
    out = Path(out_dir)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    # generation_config: let the rollout stop on <|im_end|>.
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.save_pretrained(out)
    return model


def build_tiny_assets(out_dir: str | os.PathLike, seed: int = 0) -> dict[str, str]:
    """Build ``out_dir/tokenizer`` and ``out_dir/model`` (model dir also holds the tokenizer)."""
    out = Path(out_dir)
    tokenizer = build_tiny_tokenizer(out / "tokenizer", seed=seed)
    build_tiny_model(out / "model", tokenizer, seed=seed)
    return {"tokenizer": str(out / "tokenizer"), "model": str(out / "model")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    paths = build_tiny_assets(args.out, seed=args.seed)
    print(paths)


if __name__ == "__main__":
    main()
