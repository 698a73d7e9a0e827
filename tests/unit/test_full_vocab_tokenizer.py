"""``verl_cpu.tiny_assets.build_full_vocab_tokenizer``: a tokenizer as wide as a real model's vocabulary whose
decode/encode round trip is exact, so a random model's n-token response is n tokens again in a correction prompt
(the GPU bench's step part and its CPU test build their models with it)."""

from __future__ import annotations

import random

import pytest
from transformers import AutoTokenizer

from verl_cpu.tiny_assets import SPECIAL_TOKENS, build_full_vocab_tokenizer, build_tiny_tokenizer

QWEN3_VOCAB = 151_936


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("full_vocab")
    build_full_vocab_tokenizer(folder, QWEN3_VOCAB)
    return AutoTokenizer.from_pretrained(folder)  # as verl loads it: from the saved files


def test_every_id_of_the_vocabulary_round_trips_in_any_order(tokenizer):
    assert len(tokenizer) == QWEN3_VOCAB
    ids = list(range(len(SPECIAL_TOKENS), QWEN3_VOCAB))
    random.Random(0).shuffle(ids)
    text = tokenizer.decode(ids)
    assert len(text) == len(ids)  # one character per id: nothing dropped, nothing merged
    assert tokenizer.encode(text, add_special_tokens=False) == ids


def test_a_response_with_the_chat_tokens_round_trips_and_text_encodes(tokenizer):
    # the specials keep build_tiny_tokenizer's ids (the Qwen3 shape's eos_token_id = 2 is <|im_end|>)
    assert [tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3]
    assert (tokenizer.eos_token_id, tokenizer.pad_token_id) == (2, 3)
    rng = random.Random(1)
    response = [rng.randrange(4, QWEN3_VOCAB) for _ in range(2000)] + [tokenizer.eos_token_id]
    assert tokenizer.encode(tokenizer.decode(response), add_special_tokens=False) == response
    assert tokenizer.decode(response, skip_special_tokens=True) == tokenizer.decode(response[:-1])
    prompt = "Solve: 3 + 4 = ?\n\tPut the answer in \\boxed{} (λ ≥ 0)."
    assert tokenizer.decode(tokenizer.encode(prompt, add_special_tokens=False)) == prompt
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                         tokenize=False)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_the_project_tokenizer_does_not_round_trip_a_wide_vocabulary(tmp_path):
    """Why the bench needs the full one: the 512-id BPE tokenizer cannot decode ids beyond its vocabulary (a
    random 151,936-way model's tokens vanish, and its correction prompts come out far shorter than the rows)."""
    small = build_tiny_tokenizer(tmp_path / "small")
    ids = [random.Random(2).randrange(4, QWEN3_VOCAB) for _ in range(1000)]
    assert len(small.encode(small.decode(ids), add_special_tokens=False)) < 0.05 * len(ids)


def test_a_vocabulary_too_small_for_the_text_alphabet_is_refused(tmp_path):
    with pytest.raises(ValueError, match="vocab_size=50: needs at least 101 ids"):
        build_full_vocab_tokenizer(tmp_path, 50)
    assert len(build_full_vocab_tokenizer(tmp_path, 101)) == 101  # the specials and the text alphabet exactly


def test_the_shape_benches_size_the_correction_prompts_by_this_tokenizers_count(tokenizer):
    """``bench_one_gpu_shape.correction_prompt_length`` counts one token per character; the pre-flight counts with
    the tokenizer itself (``recipe.ibpo.start_checks``): the two agree, so the benches' prompt_length passes it."""
    import importlib.util
    import sys
    from pathlib import Path

    from ibpo.correction_lengths import correction_prompt_tokens
    from ibpo.options import IBPOConfig
    from recipe.ibpo.start_checks import correction_template_tokens

    path = Path(__file__).resolve().parents[2] / "lab" / "scripts" / "bench_one_gpu_shape.py"
    spec = importlib.util.spec_from_file_location("bench_one_gpu_shape", path)
    shape = importlib.util.module_from_spec(spec)
    sys.modules["bench_one_gpu_shape"] = shape
    spec.loader.exec_module(shape)
    template = correction_template_tokens(IBPOConfig(), tokenizer)
    assert template > 256  # more than the launch scripts' arithmetic allows: why the benches set prompt_length
    for max_prompt, candidate in ((1024, 512), (1024, 8192)):
        assert shape.correction_prompt_length(max_prompt, candidate) == correction_prompt_tokens(
            max_prompt, template, 2, candidate)
