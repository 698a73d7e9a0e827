"""verl parquet rows for the toy task, written by the project's one row writer
(``data_prep.common.write_verl_parquet``: the lower layer, which imports no ``toy_task``).

The schema is verl's RL dataset schema as the project's math rows use it (``data_prep.common.verl_schema``):
``prompt`` (chat messages), ``data_source``, ``ability``, ``reward_model {style, ground_truth}``,
``extra_info`` (the toy's own, :data:`EXTRA_INFO`). The data source ``ibpo/toy_addition`` is scored by
``reward_fns`` as math (a ``\\boxed{}`` answer is required).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from data_prep.common import verl_schema, write_verl_parquet
from lab.toy_tasks.addition import DATA_SOURCE, NUM_DIGITS, AdditionProblem, sample_problems

EXTRA_INFO = pa.struct([("split", pa.string()), ("index", pa.int64()), ("problem_id", pa.string()),
                        ("question", pa.string()), ("answer", pa.string())])
SCHEMA = verl_schema(EXTRA_INFO)


def problem_row(problem: AdditionProblem, split: str, index: int) -> dict:
    """One verl row for ``problem``."""
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": problem.prompt_text}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(problem.answer)},
        "extra_info": {"split": split, "index": index, "problem_id": f"toy_addition-{split}-{index}",
                       "question": problem.question, "answer": str(problem.answer)},
    }


def write_task_parquets(out_dir: str | Path, n_train: int = 1024, n_val: int = 64, seed: int = 0,
                        num_digits: int = NUM_DIGITS) -> dict[str, str]:
    """``train.parquet`` and ``val.parquet`` from disjoint seeds (``seed``, ``seed + 1``); returns their paths."""
    out = Path(out_dir)
    paths = {}
    for split, n, split_seed in (("train", n_train, seed), ("val", n_val, seed + 1)):
        rows = [problem_row(p, split, i) for i, p in enumerate(sample_problems(n, split_seed, num_digits))]
        paths[split] = str(write_verl_parquet(rows, out / f"{split}.parquet", EXTRA_INFO))
    return paths
