"""The data files: each one exists, and every row of every file is one the run can train on (its data
source known to the reward function, a chat prompt, a gold answer the project's verifiers accept), with one
row of each data source scored by the configured function."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from recipe.common.preflight.errors import SetupError
from recipe.common.preflight.reward_function import project_reward_kwargs, score_row, uses_project_reward


def data_files(config: DictConfig, key: str) -> list[str]:
    """``data.train_files`` / ``data.val_files`` (``key`` = ``train_files`` / ``val_files``) as a list of paths,
    each checked to exist."""
    value = config.data.get(key)
    files = [value] if isinstance(value, str) else list(value or [])
    if not files:
        raise SetupError(f"data.{key} is empty")
    for path in files:
        where = Path(path).expanduser()
        if where.is_dir():  # verl reads files, not folders: name the parquet files it could be given instead
            found = sorted(str(f) for f in where.glob("*.parquet"))[:3]
            raise SetupError(f"data.{key}: {path} is a folder; give the parquet file(s) in it"
                             + (f" (e.g. {', '.join(found)})" if found else " (it holds no .parquet file)"))
        if not where.is_file():
            raise SetupError(f"data.{key}: {path} does not exist (build it with data_prep, see data_prep/README.md)")
    return [str(Path(p).expanduser()) for p in files]



def read_rows(path: str, rows: list[int]) -> list[dict]:
    """The given (0-based) rows of a parquet file as dicts."""
    import pyarrow.parquet as pq

    return pq.read_table(path).take(rows).to_pylist()


def check_data_rows(config: DictConfig, reward_fn, paths: list[str]) -> list[str]:
    """Every row of every data file (``data_prep.row_checks.check_rows``): a data source the reward function
    knows, a chat-list prompt and, for the project's verifiers, a gold answer they score as right when stated
    plainly. Then the configured function scores one row of each data source (the first), as verl calls it.
    Returns the data sources in order of appearance."""
    from data_prep.row_checks import RowCheckError, check_rows

    project = uses_project_reward(config)
    known = None
    if project:
        from reward_fns import KNOWN_DATA_SOURCES

        known = KNOWN_DATA_SOURCES
    prompt_key = str(config.data.get("prompt_key") or "prompt")
    sources: dict[str, None] = {}
    for path in paths:
        try:
            report = check_rows(path, known_sources=known, prompt_key=prompt_key, check_gold_answers=project,
                                reward_kwargs=project_reward_kwargs(config) if project else None)
        except RowCheckError as exc:
            raise SetupError(str(exc)) from exc
        firsts = sorted(report.first_row_of_source.values())
        for index, row in zip(firsts, read_rows(path, firsts)):
            score_row(config, reward_fn, path, index, row)
        sources.update(dict.fromkeys(report.data_sources))
    return list(sources)

