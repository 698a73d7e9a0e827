"""verl parquet rows for the toy task, written with pyarrow (no ``data_prep`` import).

The schema is verl's RL dataset schema as the project's math rows use it: ``prompt`` (chat messages),
``data_source``, ``ability``, ``reward_model {style, ground_truth}``, ``extra_info``. The data source
``ibpo/toy_addition`` is scored by ``reward_fns`` as math (a ``\\boxed{}`` answer is required).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from toy_task.addition import DATA_SOURCE, NUM_DIGITS, AdditionProblem, sample_problems

EXTRA_INFO = pa.struct([("split", pa.string()), ("index", pa.int64()), ("problem_id", pa.string()),
                        ("question", pa.string()), ("answer", pa.string())])
SCHEMA = pa.schema([
    ("data_source", pa.string()),
    ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
    ("ability", pa.string()),
    ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
    ("extra_info", EXTRA_INFO),
])


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


def write_rows(rows: list[dict], path: str | Path) -> Path:
    """Write ``rows`` with :data:`SCHEMA` (atomically: a ``.partial`` file renamed at the end)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".partial")
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), tmp)
    tmp.replace(out)
    return out


def read_rows(path: str | Path) -> list[dict]:
    """Rows of a parquet file as dicts."""
    return pq.read_table(path).to_pylist()


def write_task_parquets(out_dir: str | Path, n_train: int = 1024, n_val: int = 64, seed: int = 0,
                        num_digits: int = NUM_DIGITS) -> dict[str, str]:
    """``train.parquet`` and ``val.parquet`` from disjoint seeds (``seed``, ``seed + 1``); returns their paths."""
    out = Path(out_dir)
    paths = {}
    for split, n, split_seed in (("train", n_train, seed), ("val", n_val, seed + 1)):
        rows = [problem_row(p, split, i) for i, p in enumerate(sample_problems(n, split_seed, num_digits))]
        paths[split] = str(write_rows(rows, out / f"{split}.parquet"))
    return paths
