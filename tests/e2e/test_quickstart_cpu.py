"""The README's main job as a user runs it: ``python -m recipe.ibpo.quickstart`` with a logger setting of the
user's (tensorboard, no file logger), through to the Hugging Face checkpoint and the printed next commands."""

from __future__ import annotations

import json

import pytest

from ibpo.options import IBPOConfig
from recipe.ibpo.quickstart import latest_hf_checkpoint, main

pytestmark = pytest.mark.e2e


def test_quickstart_with_tensorboard_logger_trains_saves_and_prints_the_loop(cpu_demo_assets, tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    (tmp_path / "assets.json").write_text(json.dumps(cpu_demo_assets))  # the quickstart's own asset cache
    rc = main(["--out", str(tmp_path), "--steps", "2", "--", "trainer.logger=[console,tensorboard]"])
    out = capsys.readouterr().out
    assert rc == 0, out[-4000:]
    assert "trainer.logger=[console,tensorboard] + file" in out
    assert "[quickstart] step 1/2" in out and "[quickstart] step 2/2" in out
    assert "peak RSS summed over the run's processes" in out
    assert list((tmp_path / "tensorboard_log").rglob("events.out.tfevents.*")), "tensorboard wrote nothing"
    checkpoint = latest_hf_checkpoint(tmp_path / "checkpoints" / f"ibpo_{IBPOConfig().variant}")
    assert checkpoint is not None and checkpoint.parent.parent.name == "global_step_2"
    AutoModelForCausalLM.from_pretrained(checkpoint)
    assert f"-m evaluation.evaluate run --model {checkpoint}" in out or "-m evaluation.evaluate run --model" in out
