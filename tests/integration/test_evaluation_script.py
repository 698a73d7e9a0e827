"""evaluation/evaluate.py: the whole CLI on the tiny local model (transformers backend, CPU), the per-seed
orchestration with scripted responses of known correctness (scored by the real reward_fns), the paired
comparison, and row-level errors for bad parquet input."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_prep.common import MATH_EXTRA_INFO, make_math_row, write_verl_parquet

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "evaluation" / "evaluate.py"


def load_script():
    """scripts/ is not a package (verl ships a top-level `scripts`), so load the file by path."""
    spec = importlib.util.spec_from_file_location("ibpo_evaluate_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def write_math_parquet(path: Path, pairs: list[tuple[int, int]]) -> Path:
    rows = [make_math_row(data_source="aime25", problem=f"What is {a} + {b}?", answer=str(a + b), template="boxed",
                          split="test", index=i, problem_id=f"SUM-{i}", source="test") for i, (a, b) in enumerate(pairs)]
    return write_verl_parquet(rows, path, MATH_EXTRA_INFO)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from verl_cpu.tiny_assets import build_tiny_assets

    root = tmp_path_factory.mktemp("eval")
    paths = build_tiny_assets(root / "assets")
    data = write_math_parquet(root / "sums.parquet", [(1, 2), (3, 4)])
    return {"root": root, "model": paths["model"], "tokenizer": paths["tokenizer"], "data": data}


@pytest.mark.slow
def test_cli_run_and_compare_on_tiny_model(tiny):
    from reward_fns import compute_score

    out = tiny["root"] / "run"
    cmd = [sys.executable, str(SCRIPT), "run", "--model", tiny["model"], "--data", str(tiny["data"]), "--out", str(out),
           "--k", "4", "--seeds", "0", "1", "--best-of-n", "2", "--compare-and-correct", "--max-new-tokens", "8",
           "--num-boot", "300", "--backend", "hf", "--preset", "qwen3-32b"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tiny["root"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["backend"] == "hf" and results["sampling"]["temperature"] == 0.6 and results["sampling"]["top_k"] == 20
    ds = results["datasets"]["aime25"]
    assert ds["problem_ids"] == ["SUM-0", "SUM-1"]
    assert np.shape(ds["scores"]["sample"]) == (2, 2, 4)
    assert np.shape(ds["scores"]["best_of_2"]) == (2, 2, 1)
    assert np.shape(ds["scores"]["compare_and_correct"]) == (2, 2, 4)
    assert ds["summary"]["sample"]["mean"]["mean"] == pytest.approx(np.mean(ds["scores"]["sample"]))
    # every logged response was scored by reward_fns exactly as recorded
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 2 * 2 * 4 * 2  # seeds x problems x k x (sample, compare_and_correct)
    truth = {"SUM-0": "3", "SUM-1": "7"}
    for rec in records:
        assert rec["num_tokens"] <= 8 and np.isfinite(rec["mean_logprob"])
        again = compute_score("aime25", rec["text"], truth[rec["problem_id"]], {})
        assert again["acc"] == rec["acc"]
    by_seed = {}
    for rec in records:
        if rec["method"] == "sample":
            by_seed.setdefault(rec["seed"], []).append(rec["text"])
    assert by_seed[0] != by_seed[1]  # seeds give different samples
    table = (out / "results.md").read_text()
    assert "| aime25 | sample |" in table and "| aime25 | compare_and_correct |" in table and "best_of_2" in table
    assert table.splitlines()[0] in proc.stdout
    assert "Verdicts of the scored responses" in proc.stdout and "- aime25 / sample: " in proc.stdout

    # paired comparison: a run against itself under one method is refused; two methods of one run work
    cmp_out = tiny["root"] / "cmp.md"
    same = subprocess.run([sys.executable, str(SCRIPT), "compare", str(out / "results.json"), str(out),
                           "--num-boot", "200", "--out", str(cmp_out)], capture_output=True, text=True, timeout=120)
    assert same.returncode == 2 and "a run compared with itself" in same.stderr, same.stderr
    methods = subprocess.run([sys.executable, str(SCRIPT), "compare", str(out / "results.json"), str(out / "results.json"),
                              "--method-b", "compare_and_correct", "--num-boot", "200", "--out", str(cmp_out)],
                             capture_output=True, text=True, timeout=120)
    assert methods.returncode == 0 and "run:compare_and_correct" in methods.stdout
    rows = json.loads(cmp_out.with_suffix(".json").read_text())
    assert rows[0]["b"] == "run:compare_and_correct" and rows[0]["num_problems"] == 2


class ScriptedGenerator:
    """Returns fixed responses (real text, real tokenizer) so correctness is known in advance; records the
    prompts it was given."""

    name = "scripted"

    def __init__(self, tokenizer, answers: dict[str, list[tuple[str, float]]], correction_text: str):
        self.tokenizer = tokenizer
        self.answers = answers
        self.correction_text = correction_text
        self.prompts: list[str] = []

    def generate(self, prompts, n, sampling, seed):
        mod = sys.modules["ibpo_evaluate_script"]
        out = []
        for ids in prompts:
            text = self.tokenizer.decode(ids)
            self.prompts.append(text)
            if "candidate solutions" in text:
                out.append([mod.Completion(self.tokenizer.encode(self.correction_text), self.correction_text, -1.0)])
                continue
            key = next(k for k in self.answers if k in text)
            out.append([mod.Completion(self.tokenizer.encode(t), t, lp) for t, lp in self.answers[key][:n]])
        return out


def test_orchestration_with_known_answers(tiny):
    from transformers import AutoTokenizer

    from reward_fns import compute_score

    mod = load_script()
    problems = mod.load_problems(tiny["data"])
    tokenizer = AutoTokenizer.from_pretrained(tiny["tokenizer"])
    answers = {
        "1 + 2": [("so \\boxed{3}", -2.0), ("\\boxed{4}", -0.5), ("\\boxed{4}", -0.1), ("\\boxed{3}", -1.0)],
        "3 + 4": [("\\boxed{7}", -3.0), ("\\boxed{7}", -2.0), ("\\boxed{1}", -0.1), ("nothing", -0.2)],
    }
    gen = ScriptedGenerator(tokenizer, answers, "after comparing, \\boxed{7}")
    args = argparse.Namespace(chat_template_kwargs=None, score_workers=2, best_of_n=4, bon_select="majority",
                              compare_and_correct=True, candidate_view="full", max_candidate_tokens=0)
    logged = []
    values = mod.evaluate_seed(problems, gen, mod.PRESETS["qwen3-32b"], 4, 0, args, compute_score, logged.append)
    np.testing.assert_array_equal(values["sample"], [[1, 0, 0, 1], [1, 1, 0, 0]])
    # majority: problem 0 ties 3 vs 4 (2 votes each) -> the answer held by the most confident sample ("4", -0.1)
    #           problem 1: "7" has 2 votes -> right
    np.testing.assert_array_equal(values["best_of_4"][:, 0], [0.0, 1.0])
    # the correction always answers 7: right for problem 1 only
    np.testing.assert_array_equal(values["compare_and_correct"], [[0, 0, 0, 0], [1, 1, 1, 1]])
    corrections = [p for p in gen.prompts if "candidate solutions" in p]
    assert len(corrections) == 8
    for prompt in corrections:
        assert ("What is 1 + 2?" in prompt) != ("What is 3 + 4?" in prompt)
        assert "Solution 1" in prompt and "Solution 2" in prompt
    refs = [r["reference_sample"] for r in logged if r["method"] == "compare_and_correct"]
    assert all(len(r) == 1 for r in refs)
    assert all(r[0] != rec["sample"] for r, rec in zip(refs, [x for x in logged if x["method"] == "compare_and_correct"]))


def test_bad_rows_are_named(tmp_path):
    mod = load_script()
    good = write_math_parquet(tmp_path / "ok.parquet", [(1, 1)])
    table = pq.read_table(good).to_pylist()
    table[0]["reward_model"] = {"style": "rule", "ground_truth": None}
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(table), bad)
    with pytest.raises(ValueError, match=r"bad\.parquet, row 0, field 'reward_model.ground_truth'"):
        mod.load_problems(bad)
    with pytest.raises(FileNotFoundError):
        mod.load_problems(tmp_path / "missing.parquet")
    assert mod.resolve_sampling("qwen3-next", {"top_p": None}).top_p == 0.8
    assert mod.resolve_sampling("qwen3-32b", {"temperature": 1.0}).temperature == 1.0
    with pytest.raises(ValueError, match="top-p"):
        mod.resolve_sampling("qwen3-32b", {"top_p": 0.0})


# ---------------------------------------------------------------------------------------------------------
# Nothing is generated before model, rows and flags are checked; every flag shows its help and default


def refused_before_generating(mod, monkeypatch, capsys, *argv: str) -> str:
    """The one stderr line of a refused ``run`` (exit status 2); the generator is never built."""
    monkeypatch.setattr(mod, "make_generator", lambda *a, **k: pytest.fail("generation started before the checks"))
    assert mod.main(["run", *argv]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_bad_model_rows_and_flags_stop_before_generation(tiny, tmp_path, monkeypatch, capsys):
    mod = load_script()
    base = ["--data", str(tiny["data"]), "--out", str(tmp_path / "o"), "--backend", "hf"]
    model = ["--model", tiny["model"]]
    assert refused_before_generating(mod, monkeypatch, capsys, "--model", str(tmp_path / "nope"), *base) == (
        f"error: --model {tmp_path / 'nope'}: no such directory (an HF checkpoint directory, e.g. the verl model "
        "merger's output)")
    assert refused_before_generating(mod, monkeypatch, capsys, "--model", str(tmp_path), *base) == (
        f"error: --model {tmp_path}: no config.json in it; not an HF checkpoint directory")
    assert refused_before_generating(mod, monkeypatch, capsys, *model, *base, "--chat-template-kwargs",
                                     "{enable_thinking: true}").startswith(
        "error: --chat-template-kwargs '{enable_thinking: true}': not JSON")
    assert refused_before_generating(mod, monkeypatch, capsys, *model, *base, "--chat-template-kwargs", "[1]") == (
        "error: --chat-template-kwargs '[1]': must be a JSON object, got list")
    for flag, value, message in [("--k", "0", "--k=0 must be >= 1"), ("--score-workers", "0", "--score-workers=0"),
                                 ("--best-of-n", "100", "--best-of-n=100 needs 1 <= N <= k=64"),
                                 ("--seeds", "1", "--seeds [1, 1]: a seed is repeated")]:
        extra = [flag, value] + (["1"] if flag == "--seeds" else [])
        assert message in refused_before_generating(mod, monkeypatch, capsys, *model, *base, *extra)


@pytest.mark.parametrize("field, value, message", [
    ("temperature", float("nan"), "--temperature=nan must be a finite number >= 0"),
    ("temperature", float("inf"), "--temperature=inf must be a finite number >= 0"),
    ("top_p", float("nan"), "--top-p=nan must lie in (0, 1]"), ("min_p", float("nan"), "--min-p=nan must lie"),
])
def test_a_nan_or_infinite_sampling_setting_is_refused(field, value, message):
    # before: --temperature nan / inf passed the `< 0` check and reached the sampler after the model was loaded
    settings = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "max_new_tokens": 16, field: value}
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("]", r"\]")):
        load_script().Sampling(**settings)


@pytest.mark.parametrize("edit, expected", [
    (lambda r: r.__setitem__("data_source", "aime2025"), "row 1, field data_source: 'aime2025' is not a data source"),
    (lambda r: r["reward_model"].__setitem__("ground_truth", "\\frac{1}{"),
     "row 1, field reward_model.ground_truth: gold answer"),
    (lambda r: r["prompt"].__setitem__(0, {"role": "bot", "content": "hi"}), "row 1, field prompt"),
])
def test_a_bad_later_row_stops_before_generation(tiny, tmp_path, monkeypatch, capsys, edit, expected):
    mod = load_script()
    rows = pq.read_table(tiny["data"]).to_pylist()
    edit(rows[1])
    bad = tmp_path / "bad_rows.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(tiny["data"])), bad)
    message = refused_before_generating(mod, monkeypatch, capsys, "--model", tiny["model"], "--data", str(bad),
                                        "--out", str(tmp_path / "o"), "--backend", "hf")
    assert message.startswith(f"error: {bad}, {expected}"), message


def test_a_problem_given_twice_stops_before_generation(tiny, tmp_path, monkeypatch, capsys):
    # before: `--data f f` evaluated every problem twice as two problems (intervals too narrow, exit 0)
    mod = load_script()
    copy = write_math_parquet(tmp_path / "copy.parquet", [(1, 2)])  # SUM-0 again, in another file
    for data in ([str(tiny["data"]), str(tiny["data"])], [str(tiny["data"]), str(copy)]):
        message = refused_before_generating(mod, monkeypatch, capsys, "--model", tiny["model"], "--data", *data,
                                            "--out", str(tmp_path / "o"), "--backend", "hf")
        assert message == (f"error: --data: problem 'SUM-0' of aime25 is in {tiny['data']}, row 0 and again in "
                           f"{data[1]}, row 0; each problem must be evaluated once"), message


def test_every_flag_has_help_with_its_default():
    mod = load_script()
    parser = mod.build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in subparsers.choices.items():
        assert sub.formatter_class is mod.HelpFormatter
        for action in sub._actions:
            if not isinstance(action, argparse._HelpAction):
                assert action.help, f"{name} {action.option_strings or action.dest} has no help"
        text = " ".join(sub.format_help().split())
        assert "(default: 10000)" in text
    run = subparsers.choices["run"]
    assert "(default: 64)" in " ".join(run.format_help().split()) and "(default: qwen3-32b)" in run.format_help()


def fake_results(verdicts: dict | None = None) -> dict:
    ci = {"mean": 0.5, "low": 0.4, "high": 0.6, "num_problems": 2, "num_seeds": 1}
    ds = {"problem_ids": ["A", "B"], "scores": {"sample": [[[1.0, 0.0], [0.0, 1.0]]]},
          "summary": {"sample": {"mean": ci}}}
    if verdicts:
        ds["verdicts"] = verdicts
    return {"label": "r", "model": "m", "backend": "hf", "k": 2, "pass_k": [1], "seeds": [0], "num_boot": 10,
            "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "max_new_tokens": 8},
            "datasets": {"aime25": ds}}


def test_verdict_counts_are_printed_under_the_table():
    mod = load_script()
    counts = mod.verdict_counts([{"data_source": "aime25", "method": "sample", "verdict": v}
                                 for v in ["correct", "no_answer", "wrong_answer", "no_answer"]])
    assert counts == {"aime25": {"sample": {"correct": 1, "no_answer": 2, "wrong_answer": 1}}}
    table = mod.results_table(fake_results(counts["aime25"]))
    assert table.splitlines()[-1] == "- aime25 / sample: no_answer 2, correct 1, wrong_answer 1"


def test_compare_given_its_own_output_or_a_table_is_a_clear_error(tmp_path, capsys):
    mod = load_script()
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text(json.dumps(fake_results()))
    other_run = tmp_path / "other_run"
    other_run.mkdir()
    (other_run / "results.json").write_text(json.dumps(fake_results()))
    cmp_md = tmp_path / "cmp.md"
    assert mod.main(["compare", str(run), str(other_run), "--num-boot", "200", "--out", str(cmp_md)]) == 0
    capsys.readouterr()
    own = cmp_md.with_suffix(".json")
    assert mod.main(["compare", str(own), str(run / "results.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: {own}: this is the output of `evaluate.py compare` (paired differences), not a "
                   "results.json of `evaluate.py run`; compare takes two results.json")
    assert mod.main(["compare", str(cmp_md), str(run)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {cmp_md}: not a readable results.json of `evaluate.py run`")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"datasets": {"aime25": [1, 2]}}))
    assert mod.main(["compare", str(run), str(other)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {other}: not a results.json of `evaluate.py run`")
