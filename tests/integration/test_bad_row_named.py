"""A bad row is named -- file, row, field and what is allowed -- by every entry point that reads a data file:
``python -m recipe.main`` with the IBPO config and with the counterfactual's, ``evaluation/evaluate.py`` and ``data_prep``.
The rows are checked before anything else that could fail for another reason (an earlier bug turned an empty
``override_config`` into omegaconf's "Input cfg is not an OmegaConf config object (dict)", which named nothing)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[2]
BAD_ROW = 3
UNKNOWN = "no_such_source"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from toy_task.synthetic_task import write_task_parquets
    from verl_cpu.tiny_assets import build_tiny_assets

    root = tmp_path_factory.mktemp("badrow")
    model = build_tiny_assets(root / "tiny")["model"]
    data = write_task_parquets(root / "data", n_train=8, n_val=4)
    table = pq.read_table(data["train"])
    rows = table.to_pylist()
    rows[BAD_ROW]["data_source"] = UNKNOWN
    bad = root / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), bad)
    return {"model": str(model), "bad": str(bad), "val": data["val"]}


def assert_names_the_row(message: str, path: str) -> None:
    from reward_fns import KNOWN_DATA_SOURCES

    assert f"{path}, row {BAD_ROW}, field data_source: {UNKNOWN!r} is not a data source" in message, message
    assert str(sorted(KNOWN_DATA_SOURCES)) in message, message  # what is allowed


@pytest.mark.parametrize("config_name", ["ibpo_trainer", "counterfactual_trainer"])
def test_the_launcher_names_the_bad_row_with_the_shipped_defaults(files, config_name, capsys):
    """The shipped config with only the files and the model set (what a new user runs first): the one error
    line is the row's, whatever other option is still unset (verl's own validation runs after the rows)."""
    from hydra import compose, initialize_config_module

    from recipe.common.main import register_config_resolvers, run_preflight

    register_config_resolvers()
    module = {"ibpo_trainer": "recipe.ibpo.config", "counterfactual_trainer": "recipe.counterfactual.config"}
    with initialize_config_module(config_module=module[config_name], version_base=None):
        cfg = compose(config_name=config_name, overrides=[
            f"data.train_files={files['bad']}", f"data.val_files={files['val']}",
            f"actor_rollout_ref.model.path={files['model']}"])
    with pytest.raises(SystemExit) as info:
        run_preflight(cfg)
    assert info.value.code == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[recipe] configuration error")]
    assert len(lines) == 1, lines
    assert_names_the_row(lines[0], files["bad"])


def test_an_empty_override_config_reads_as_no_override(files):
    from omegaconf import OmegaConf

    from recipe.common.preflight.model import configured_context_length

    with_empty = OmegaConf.create({"path": files["model"], "override_config": {}})
    without = OmegaConf.create({"path": files["model"]})
    assert configured_context_length(with_empty) == configured_context_length(without) is not None


def test_evaluate_names_the_bad_row_as_the_preflight_does(files, tmp_path, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("ibpo_evaluate_script", REPO / "evaluation" / "evaluate.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "make_generator", lambda *a, **k: pytest.fail("generation started before the checks"))
    assert mod.main(["run", "--model", files["model"], "--data", files["bad"], "--out", str(tmp_path / "o"),
                     "--backend", "hf"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {files['bad']}, row {BAD_ROW}"), lines
    assert_names_the_row(lines[0], files["bad"])


def test_data_prep_names_the_bad_row_of_its_input(tmp_path, capsys):
    """data_prep reads downloaded files, whose rows it numbers from 1 (as the hub viewer and JSONL lines do)."""
    from data_prep import gsm8k
    from data_prep.common import run_cli

    rows = [{"question": f"What is {i} + {i}?", "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"} for i in range(6)]
    rows[BAD_ROW - 1]["question"] = None
    path = tmp_path / "train-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema([("question", pa.string()), ("answer", pa.string())])),
                   path)
    assert run_cli(gsm8k.main, ["--input", str(path), "--output", str(tmp_path / "out.parquet")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {path}, row {BAD_ROW}, field 'question': "), err
    assert not (tmp_path / "out.parquet").exists()
