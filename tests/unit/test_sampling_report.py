"""The start check of sampling settings against the model's own generation_config.json (source named)."""

from __future__ import annotations

import json

from recipe.common.preflight.model import model_sampling_defaults, sampling_report


def test_matching_and_differing_settings_name_the_source(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "do_sample": True, "eos_token_id": [1, 2]}))
    source, values = model_sampling_defaults(str(tmp_path))
    assert source == str(tmp_path / "generation_config.json") and values == {"temperature": 0.6, "top_p": 0.95,
                                                                             "top_k": 20}
    same = sampling_report({"temperature": 0.6, "top_p": 0.95, "top_k": 20, "n": 64}, str(tmp_path), "val")
    assert same == f"val: temperature 0.6, top_p 0.95, top_k 20; matches the model's own {source}"
    differ = sampling_report({"temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.0}, str(tmp_path), "val")
    assert differ == (f"val: temperature 0.7 != 0.6, top_p 0.8 != 0.95, top_k 20, min_p 0.0 (not in the generation "
                      f"config); DIFFERS in ['temperature', 'top_p'] the model's own {source}")


def test_a_model_without_generation_config_is_said_so(tmp_path):
    assert model_sampling_defaults(str(tmp_path)) is None
    assert "has no generation_config.json" in sampling_report({"temperature": 0.6}, str(tmp_path), "val")
