"""Bad input to the command-line tools in scripts/ (the red-team findings, by class): numeric options checked at
parse time naming the option; no interval over fewer than two units, nor a zero-width one; duplicate inputs
refused naming the duplicate; malformed input files named by file, line/row and field; report folders of
another kind refused naming the folder."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


FOLDER = {"evaluate": "evaluation", "plot_curves": "evaluation"}  # the others are lab/scripts/


def load(name: str):
    folder = ROOT / FOLDER[name] if name in FOLDER else ROOT / "lab" / "scripts"
    spec = importlib.util.spec_from_file_location(f"scripts_bad_input_{name}", folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------------------------
# numeric options: a parse-time error naming the option (before: ZeroDivisionError after the work, a table of
# zeros, a NaN budget planning every part as "would run", an internal ValueError naming num_correct)


@pytest.mark.parametrize("script, entry, argv, message", [
    ("bench_alignment", "main", ["--pairs", "0"], "argument --pairs: must be an integer >= 1, got '0'"),
    ("bench_alignment", "main", ["--pairs", "-5"], "argument --pairs: must be an integer >= 1, got '-5'"),
    ("bench_alignment", "main", ["--lengths", "100", "--dp-max-len", "10"], "--dp-max-len 10 is below every --lengths"),
    ("bench_correction_prompts", "main", ["--prompts", "0"], "argument --prompts: must be an integer >= 1"),
    ("bench_correction_prompts", "main", ["--group-size", "1"], "argument --group-size: must be an integer >= 2"),
    ("bench_correction_prompts", "main", ["--correct", "8"], "--correct 8 must be below --group-size 8"),
    ("bench_correction_pass", "parse_args", ["--correct", "-1"], "argument --correct: must be an integer >= 0"),
    ("bench_correction_pass", "parse_args", ["--gpu-memory-utilization", "nan"], "argument --gpu-memory-utilization"),
    ("bench_gpu", "parse_args", ["--budget-s", "nan"], "argument --budget-s: must be a finite number in (0, inf)"),
    ("bench_gpu", "parse_args", ["--budget-s", "-1"], "argument --budget-s: must be a finite number in (0, inf)"),
    ("bench_gpu", "parse_args", ["--batches", "0"], "argument --batches: must be an integer >= 1"),
    ("bench_one_gpu_shape", "main", ["--timeout", "inf"], "argument --timeout: must be a finite number"),
    ("bench_preflight_rows", "main", ["--rows", "0"], "argument --rows: must be an integer >= 1"),
    ("bench_verifiers", "main", ["--repeats", "0"], "argument --repeats: must be an integer >= 1"),
    ("bench_correction_lookup", "parse_args", ["--factors", "nan"], "argument --factors: must be a finite number"),
    ("simulate_theorem", "parse_args", ["--regimes", "1.5"], "argument --regimes: must be a finite number in [0, 1]"),
    ("simulate_theorem", "parse_args", ["--lr", "nan"], "argument --lr: must be a finite number in (0, inf)"),
    ("compare_methods", "main", ["--assets", "a", "--out", "o", "--lr", "inf"], "argument --lr: must be a finite"),
    ("compare_methods", "main", ["--assets", "a", "--out", "o", "--seeds", "0", "0"], "--seeds: seed(s) [0] given twice"),
])
def test_a_numeric_option_out_of_range_is_a_parse_error_naming_it(script, entry, argv, message, capsys):
    module = load(script)
    with pytest.raises(SystemExit) as info:
        getattr(module, entry)(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_interval_text_has_no_interval_over_one_unit_nor_a_zero_width_one():
    from evaluation.stats import interval_text

    assert interval_text(0.5, 0.5, 0.5, 1) == "0.500 (n = 1: no interval)"
    assert interval_text(0.5, 0.5, 0.5, 3) == "0.500 (zero spread over 3 seeds: no interval)"
    assert interval_text(0.938, 0.143, 1.732, 2, bounds=(0, 1)) == "0.938 [0.143, 1.000] (clipped to [0, 1])"
    assert interval_text(0.5, 0.4, 0.6, 2) == "0.500 [0.400, 0.600]"


# ---------------------------------------------------------------------------------------------------------------
# evaluate.py compare


def results(k: int, scores: list, ids: list[str], temperature: float = 0.6) -> dict:
    return {"label": "r", "model": "m", "backend": "hf", "k": k, "pass_k": [1], "seeds": [0], "num_boot": 10,
            "sampling": {"temperature": temperature, "top_p": 0.95, "top_k": 20, "min_p": 0.0, "max_new_tokens": 8},
            "datasets": {"aime25": {"problem_ids": ids, "scores": {"sample": [scores]}}}}


def write(path: Path, data: dict) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def test_compare_over_one_problem_prints_no_interval_and_no_p(tmp_path, capsys):
    mod = load("evaluate")
    a = write(tmp_path / "a.json", results(4, [[1, 1, 1, 0]], ["A"]))
    b = write(tmp_path / "b.json", results(4, [[0, 0, 1, 0]], ["A"]))
    assert mod.main(["compare", a, b, "--num-boot", "200"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| aime25"))
    assert "+50.0 (n = 1: no interval) | - | 1 |" in row and "[" not in row


def test_compare_notes_runs_evaluated_with_different_settings(tmp_path, capsys):
    mod = load("evaluate")
    a = write(tmp_path / "a.json", results(4, [[1, 1, 1, 0], [0, 1, 0, 0]], ["A", "B"]))
    b = write(tmp_path / "b.json", results(2, [[1, 0], [0, 1]], ["A", "B"], temperature=1.0))
    assert mod.main(["compare", a, b, "--num-boot", "200"]) == 0
    out = capsys.readouterr().out
    assert "**Note: the runs were evaluated with different settings** (A vs B: k 4 vs 2; " \
           "sampling.temperature 0.6 vs 1.0)" in out
    same = write(tmp_path / "same.json", results(4, [[1, 0, 0, 0], [0, 1, 1, 0]], ["A", "B"]))
    assert mod.main(["compare", a, same, "--num-boot", "200"]) == 0
    assert "Note" not in capsys.readouterr().out


@pytest.mark.parametrize("scores, field, message", [
    ([[1, "x", 1, 0], [0, 1, 0, 0]], "[0][0] (seed 0, problem 'A')", "score 'x' is not a number in [0, 1]"),
    ([[1, 1, 1, 0], [0, 1]], "[0][1] (seed 0, problem 'B')", "2 sample scores, but the seed's first problem has 4"),
    ([[1, 1, 1, 0], [0, float("nan"), 0, 0]], "[0][1] (seed 0, problem 'B')", "score nan is not a number in [0, 1]"),
    ([[1, 1, 1, 0]], "[0] (seed 0)", "expected a list of 2 problems (problem_ids), got 1 entries"),
])
def test_compare_names_the_file_and_field_of_malformed_scores(tmp_path, capsys, scores, field, message):
    mod = load("evaluate")
    a = write(tmp_path / "a.json", results(4, [[1, 1, 1, 0], [0, 1, 0, 0]], ["A", "B"]))
    bad = write(tmp_path / "bad.json", results(4, scores, ["A", "B"]))
    assert mod.main(["compare", a, bad, "--num-boot", "200"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {bad}, datasets['aime25'].scores['sample']{field}: {message}\n", err


def test_compare_names_both_files_of_different_problems_and_an_empty_problem_list(tmp_path, capsys):
    mod = load("evaluate")
    a = write(tmp_path / "a.json", results(4, [[1, 1, 1, 0], [0, 1, 0, 0]], ["A", "B"]))
    b = write(tmp_path / "b.json", results(4, [[1, 1, 1, 0], [0, 1, 0, 0]], ["A", "C"]))
    assert mod.main(["compare", a, b, "--num-boot", "200"]) == 2
    # before: "aime25: the runs evaluated different problems (e.g. ['B', 'C'])", naming neither file
    assert capsys.readouterr().err == (f"error: aime25: {a} and {b} evaluated different problems (only in A: ['B'], "
                                       "only in B: ['C']); pairing needs the same\n")
    empty = write(tmp_path / "empty.json", results(4, [], []))
    assert mod.main(["compare", a, empty, "--num-boot", "200"]) == 2
    # before: "scores must be a non-empty (num_problems, k) matrix; got shape (0,)", naming no file
    assert capsys.readouterr().err == f"error: {empty}, datasets['aime25'].problem_ids: no problem\n"


def test_compare_refuses_a_run_with_itself_and_an_out_over_an_input(tmp_path, capsys):
    mod = load("evaluate")
    run = tmp_path / "run"
    run.mkdir()
    a = write(run / "results.json", results(4, [[1, 1, 1, 0], [0, 1, 0, 0]], ["A", "B"]))
    b = write(tmp_path / "b.json", results(4, [[1, 0, 0, 0], [0, 1, 1, 0]], ["A", "B"]))
    before = Path(a).read_text()
    cases = [
        # before: a difference of exactly 0 "compared"
        ([str(run), a], f"run_a {run} and run_b {a} are the same results.json and --method-a = --method-b = "
                        "'sample': a run compared with itself"),
        # before: the rows were written over run/results.json
        ([a, b, "--out", str(run / "results.md")], f"--out {run / 'results.md'}: would write {Path(a).resolve()}, "
                                                    "the run_a results.json"),
        # before: the rows were written over the table
        ([a, b, "--out", str(tmp_path / "cmp.json")], f"--out {tmp_path / 'cmp.json'}: the table and its rows "
                                                       "(.json beside it) would be the same file"),
    ]
    for argv, message in cases:
        assert mod.main(["compare", *argv, "--num-boot", "200"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {message}"), err
    assert Path(a).read_text() == before
    assert mod.main(["compare", a, a, "--method-b", "sample", "--method-a", "sample", "--num-boot", "200"]) == 2


def test_compare_says_which_data_sources_only_one_run_has(tmp_path, capsys):
    mod = load("evaluate")
    two = results(4, [[1, 1, 1, 0], [0, 1, 0, 0]], ["A", "B"])
    two["datasets"]["hmmt_feb_2025"] = two["datasets"]["aime25"]
    a = write(tmp_path / "a.json", two)
    b = write(tmp_path / "b.json", results(4, [[1, 0, 0, 0], [0, 1, 1, 0]], ["A", "B"]))
    assert mod.main(["compare", a, b, "--num-boot", "200"]) == 0
    # before: hmmt_feb_2025 left out of the table without a word
    assert "Not compared (one run only): hmmt_feb_2025 (only in A)." in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    # before: k = 10 with N = 8 kept one block of 8 and never looked at samples 9-10
    (["--k", "10", "--best-of-n", "8"], "--best-of-n=8 must divide --k=10: the last 2 samples of every problem"),
    # before: silently "off", like -1
    (["--top-k", "-5"], "--top-k=-5 must be 0 or -1 (off) or a k >= 1"),
])
def test_run_flags_out_of_range_stop_before_anything_is_loaded(tmp_path, capsys, argv, message):
    mod = load("evaluate")
    assert mod.main(["run", "--model", str(tmp_path / "none"), "--data", str(tmp_path / "none.parquet"),
                     "--out", str(tmp_path / "out"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}"), err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, named", [
    (["--bon-select", "majority"], "--bon-select: not used with --best-of-n 0"),
    (["--candidate-view", "strip_thinking", "--max-candidate-tokens", "100"],
     "--candidate-view, --max-candidate-tokens: not used with no --compare-and-correct"),
    (["--backend", "hf", "--compare-and-correct", "--max-model-len", "4096"],
     "--max-model-len: not used with --backend hf"),
    (["--backend", "vllm", "--batch", "8"], "--batch-size: not used with --backend vllm"),  # an abbreviation too
])
def test_run_options_the_settings_do_not_use_are_refused_naming_them(tmp_path, capsys, argv, named):
    """Before: accepted and ignored (a Best-of-N selection with no Best-of-N run, candidate options with no
    compare-and-correct, one backend's options with the other backend named)."""
    mod = load("evaluate")
    with pytest.raises(SystemExit) as exc:
        mod.main(["run", "--model", str(tmp_path / "none"), "--data", str(tmp_path / "none.parquet"),
                  "--out", str(tmp_path / "out"), *argv])
    assert exc.value.code == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_run_options_the_settings_use_are_not_refused(tmp_path, capsys):
    """The same options where they are used pass on to the flag checks (which then name the missing model)."""
    mod = load("evaluate")
    assert mod.main(["run", "--model", str(tmp_path / "none"), "--data", str(tmp_path / "none.parquet"),
                     "--out", str(tmp_path / "out"), "--k", "8", "--best-of-n", "4", "--bon-select", "majority",
                     "--compare-and-correct", "--candidate-view", "strip_thinking", "--backend", "hf",
                     "--batch-size", "8", "--dtype", "float32"]) == 2
    assert "--model" in capsys.readouterr().err


def test_run_table_has_no_interval_over_one_problem_of_one_seed():
    mod = load("evaluate")
    one = {"mean": 0.75, "low": 0.75, "high": 0.75, "num_problems": 1, "num_seeds": 1}
    assert mod.ci_text(one) == "75.0 (n = 1: no interval)"
    assert mod.ci_text({**one, "low": 0.5, "high": 0.9, "num_problems": 2}) == "75.0 [50.0, 90.0]"


# ---------------------------------------------------------------------------------------------------------------
# plot_curves.py


def write_log(path: Path, rewards: list) -> Path:
    lines = [json.dumps({"step": s, "data": {"ibpo/raw_score_mean": r, "ibpo/compute/total_flops": 100.0 * s}})
             .replace('"NAN"', "NaN") for s, r in enumerate(rewards, start=1)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_plot_curves_refuses_the_same_log_given_twice(tmp_path, capsys):
    mod = load("plot_curves")
    a = write_log(tmp_path / "a.jsonl", [0.1, 0.5, 0.9])
    b = write_log(tmp_path / "b.jsonl", [0.2, 0.4, 0.8])
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(a.read_bytes())
    for second in (a, copy):
        code = mod.main(["--run", f"A={a}", "--run", f"A={second}", "--run", f"B={b}", "--smooth", "1",
                         "--out", str(tmp_path / "f.png")])
        err = capsys.readouterr().err
        assert code == 2 and f"--run 'A={second}': the same log as --run 'A={a}' (duplicate input)" in err, err


@pytest.mark.parametrize("bad, shown", [('"x"', "'x'"), ("NaN", "nan")])
def test_plot_curves_refuses_a_non_numeric_reward_naming_file_line_and_field(tmp_path, capsys, bad, shown):
    mod = load("plot_curves")
    a = write_log(tmp_path / "a.jsonl", [0.1, 0.5, 0.9])
    text = a.read_text().splitlines()
    text[1] = text[1].replace('"ibpo/raw_score_mean": 0.5', f'"ibpo/raw_score_mean": {bad}')
    a.write_text("\n".join(text) + "\n")
    code = mod.main(["--run", f"A={a}", "--smooth", "1", "--out", str(tmp_path / "f.png")])
    err = capsys.readouterr().err
    assert code == 2 and err == f"error: {a}, line 2, field 'ibpo/raw_score_mean': {shown} is not a finite number\n"


@pytest.mark.parametrize("steps, message", [
    # before: both read as a curve that goes back in x (np.interp of a non-increasing x: a wrong crossing, exit 0)
    ([1, 2, 4, 3, 5], "line 4: step 3 after step 4 (line 3): the steps go back"),
    ([1, 2, 3, 3, 4], "line 4, field 'ibpo/raw_score_mean': logged again at step 3 (line 3): a step logged twice"),
])
def test_plot_curves_refuses_steps_out_of_order_or_repeated(tmp_path, capsys, steps, message):
    mod = load("plot_curves")
    a = tmp_path / "a.jsonl"
    a.write_text("".join(json.dumps({"step": s, "data": {"ibpo/raw_score_mean": 0.1 * i,
                                                          "ibpo/compute/total_flops": 100.0 * i}}) + "\n"
                         for i, s in enumerate(steps, start=1)))
    code = mod.main(["--run", f"A={a}", "--smooth", "1", "--threshold", "0.3", "--out", str(tmp_path / "f.png")])
    assert code == 2 and capsys.readouterr().err == f"error: {a}, {message}" + (
        " (two logs in one file, or a run resumed into it?)\n" if "go back" in message else "\n")
    # one step on two lines with different metrics (verl's validation before the first step) is fine
    a.write_text("".join(json.dumps(x) + "\n" for x in [{"step": 0, "data": {"val-core/x/acc/mean@1": 0.1}},
                                                         {"step": 0, "data": {"ibpo/raw_score_mean": 0.0}},
                                                         {"step": 1, "data": {"ibpo/raw_score_mean": 0.5}}]))
    assert [r.step for r in mod.read_file_log(a)] == [0, 0, 1]


def test_plot_curves_names_the_truncated_last_line_of_a_log(tmp_path, capsys):
    mod = load("plot_curves")
    a = write_log(tmp_path / "a.jsonl", [0.1, 0.5, 0.9])
    a.write_text(a.read_text()[:-10])  # a run killed while writing its last record
    assert mod.main(["--run", f"A={a}", "--smooth", "1", "--out", str(tmp_path / "f.png")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {a}, line 3: not JSON (")


def test_threshold_table_has_no_interval_over_one_seed_nor_a_zero_width_one():
    mod = load("plot_curves")
    recs = [mod.Record(s, {"ibpo/raw_score_mean": 0.1 * s, "x": 10.0 * s}) for s in range(1, 9)]
    table, _ = mod.threshold_table({"A": [recs], "B": [recs, list(recs)]}, "A", "ibpo/raw_score_mean", "x", 0.5, 1)
    assert "| A | 1 | 50 | n = 1: no interval |" in table
    assert "| B | 2 | 50 | zero spread over 2 seeds: no interval |" in table


# ---------------------------------------------------------------------------------------------------------------
# compare_methods.py --report-only


def loop_folder(root: Path, meta: dict) -> Path:
    root.mkdir()
    (root / "meta.json").write_text(json.dumps({"warm_start_sha256": "ab" * 32, "budget_flops": 1.0, "command": "c",
                                                **meta}))
    for arm in ("GSPO G=n", "IBPO G=n"):
        for seed in range(3):
            slug = arm.split()[0].lower()
            (root / f"{slug}_s{seed}.json").write_text(json.dumps({"arm": arm, "seed": seed, "evals": []}))
    return root


@pytest.mark.parametrize("meta, message", [
    ({"eval_split": "val", "warm_start_val_accuracy": 0.5}, "its runs were evaluated on the 'val' split"),
    ({"warm_start_test_accuracy": 0.5, "max_steps": 1}, "its runs are equal-steps runs (meta.json max_steps=1"),
])
def test_report_only_names_a_folder_of_another_kind(tmp_path, capsys, meta, message):
    # before: KeyError 'warm_start_test_accuracy' / TypeError NoneType - NoneType tracebacks
    mod = load("compare_methods")
    out = loop_folder(tmp_path / "runs", meta)
    assert mod.main(["--assets", "none", "--out", str(out), "--report-only", "--seeds", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {out}: ") and message in err and err.count("\n") == 1, err


@pytest.mark.parametrize("argv, named", [
    (["--steps", "30"], "--steps: not used with --engine loop"),
    (["--micro-batch", "8", "--budget-flops", "1e9"], "--budget-flops, --micro-batch: not used with --engine loop"),
    (["--engine", "verl", "--effect", "0.1"], "--effect: not used with --engine verl"),
    (["--engine", "verl", "--budget-steps", "48"], "--budget-steps: not used with --engine verl"),
    (["--report-only", "--lr", "1e-4"], "--lr: not used with --report-only"),
    (["--report-only", "--engine", "verl", "--timeout", "10"], "--timeout: not used with --report-only"),
])
def test_an_option_the_engine_or_the_report_does_not_use_is_refused(tmp_path, capsys, argv, named):
    # before: accepted and ignored (--steps with the loop engine, --effect with verl, --lr with --report-only)
    mod = load("compare_methods")
    with pytest.raises(SystemExit):
        mod.main(["--assets", str(tmp_path / "none"), "--out", str(tmp_path / "runs"), "--seeds", "0", *argv])
    assert named in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "none").exists()


def test_report_only_reports_only_the_given_seeds(tmp_path, monkeypatch, capsys):
    from lab.analysis import equal_compute_report

    seen = {}

    def fake_summarise(meta, results, baseline, **kwargs):
        seen.update({arm: sorted(runs) for arm, runs in results.items()})
        raise SystemExit(0)

    monkeypatch.setattr(equal_compute_report, "summarise_runs", fake_summarise)
    mod = load("compare_methods")
    out = loop_folder(tmp_path / "runs", {"warm_start_test_accuracy": 0.5})
    with pytest.raises(SystemExit):
        mod.main(["--assets", "none", "--out", str(out), "--report-only", "--seeds", "0", "1", "7",
                  "--methods", "GSPO G=n", "IBPO G=n"])
    assert seen == {"GSPO G=n": [0, 1], "IBPO G=n": [0, 1]}
    assert "no finished run of 'GSPO G=n' for seed(s) [7]" in capsys.readouterr().err


def test_verl_table_cells_have_no_interval_over_one_seed_and_clip_accuracy():
    mod = load("compare_methods")
    assert mod._ci({"mean": 0.4, "low": float("nan"), "high": float("nan"), "seeds": 1}) == "0.400 (n = 1: no interval)"
    assert mod._ci({"mean": 0.938, "low": 0.143, "high": 1.732, "seeds": 2}) == "0.938 [0.143, 1.000] (clipped to [0, 1])"
    assert mod._diff({"diff": 0.0, "low": 0.0, "high": 0.0, "seeds": 3}) == "+0.000 (zero spread over 3 seeds: no interval)"


# ---------------------------------------------------------------------------------------------------------------
# interval and p cells: evaluation.stats' interval_text / no_interval_reason / p_value_text, nowhere by hand


def test_p_value_text_prints_an_undefined_p_as_a_dash():
    from evaluation.stats import p_value_text

    assert p_value_text(0.01234) == "0.012" and p_value_text(0.01234, "{:.4f}") == "0.0123"
    assert p_value_text(float("nan")) == "-" and p_value_text(None) == "-"


def test_compare_cells_go_through_interval_text_and_p_value_text():
    mod = load("evaluate")
    row = {"diff": 0.05, "ci_low": 0.01, "ci_high": 0.09, "p_value": 0.0312, "num_problems": 30}
    assert (mod.diff_text(row), mod.p_text(row)) == ("+5.0 [+1.0, +9.0]", "0.0312")
    # an undefined p (NaN) beside an interval: before, the cell read "nan"
    assert mod.p_text({**row, "p_value": float("nan")}) == "-"
    one = {**row, "ci_low": None, "ci_high": None, "p_value": None, "num_problems": 1}
    assert (mod.diff_text(one), mod.p_text(one)) == ("+5.0 (n = 1: no interval)", "-")
    flat = {**row, "ci_low": 0.05, "ci_high": 0.05, "p_value": 1 / 201}
    assert (mod.diff_text(flat), mod.p_text(flat)) == ("+5.0 (zero spread over 30 problems: no interval)", "-")


def test_grad_probe_summary_has_no_interval_over_one_seed():
    from lab.analysis.grad_probe_loop import summary_lines

    nan = float("nan")
    summary = {"seeds": 1, "steps": 7, "steps_without_ratio": 0, "steps_with_shaping": 5, "median_step_ratio": 0.9,
               "seeds_below_1": 1, "mean_ratio": [0.8, nan, nan], "geometric_mean_ratio": [0.79, nan, nan],
               "by_kind": {"mixed_": {"seeds": 2, "geometric_mean_ratio": [0.5, 0.4, 0.6]}, "unnorm_": {"seeds": 0}}}
    lines = summary_lines(summary, 7)
    # before: "mean 0.800 [95% t CI nan, nan], geometric mean 0.790 [nan, nan]"
    assert "mean 0.800 (n = 1: no interval) (95% t CI), geometric mean 0.790 (n = 1: no interval)," in lines[0]
    assert "nan" not in lines[0]
    assert lines[1:] == ["  mixed: geometric mean ratio 0.500 [0.400, 0.600] over 2 seeds"]


def verl_summary(threshold: dict, seeds: int = 2) -> dict:
    ci = {"mean": 0.5, "low": 0.4, "high": 0.6, "seeds": seeds}
    return {"GSPO G=n": {"seeds": seeds, "steps": [10] * seeds, "eval_step0": ci, "final_eval": ci,
                         "final_eval_diff": None, "final_train_reward": ci, "threshold": threshold,
                         "total_flops": 1e3, "optimizer_updates": [10] * seeds,
                         "wall_s_by_phase": {title: 1.0 for title, _ in load("compare_methods").PHASES}}}


@pytest.mark.parametrize("threshold, cell", [
    ({"compute": 600.0, "low": 500.0, "high": 700.0, "reached_share": 1.0, "seeds": 2}, "| 600 [500, 700] |"),
    # every seed crossing at the same compute: before "| 600 [600, 600] |"
    ({"compute": 600.0, "low": 600.0, "high": 600.0, "reached_share": 1.0, "seeds": 2},
     "| 600 (zero spread over 2 seeds: no interval) |"),
    ({"compute": 600.0, "low": float("nan"), "high": float("nan"), "reached_share": 0.5, "seeds": 2},
     "| 600 (not estimable (reached by 50% of seeds)) |"),
    ({"compute": 600.0, "low": float("nan"), "high": float("nan"), "reached_share": 1.0, "seeds": 1},
     "| 600 (n = 1: no interval) |"),
    ({"compute": float("nan"), "low": float("nan"), "high": float("nan"), "reached_share": 0.0, "seeds": 2},
     "| not reached |"),
])
def test_verl_table_threshold_cell_goes_through_no_interval_reason(threshold, cell):
    import argparse

    mod = load("compare_methods")
    summary = verl_summary({**threshold, "relative": 1.0}, threshold["seeds"])
    args = argparse.Namespace(smooth=1, threshold=0.3, budget_flops=0.0)
    assert cell in mod.format_tables(summary, args)


# ---------------------------------------------------------------------------------------------------------------
# compare_methods.py --engine verl: optimizer updates and G from what the runs recorded


def test_verl_optimizer_updates_are_what_the_run_logged():
    mod = load("compare_methods")
    rec = mod.plot_curves.Record
    # the trainer counted 3 updates a step (e.g. joint rows under ibpo.joint_minibatch=grow); before, the count came
    # from --batch-size and G: ceil(32 / 32) = 1 a step
    logged = [rec(0, {"val": 0.1})] + [rec(s, {"actor/grad_norm": 1.0, "actor/num_optimizer_updates": 3.0})
                                       for s in range(1, 5)]
    assert mod.optimizer_updates(logged, 8, 4, 8) == 12
    older = [rec(s, {"actor/grad_norm": 1.0, "ibpo/num_joint_rows": 32.0}) for s in range(1, 5)]
    assert mod.optimizer_updates(older, 8, 4, 8) == 8  # a log from before the metric: from the options
    mixed = logged + [rec(5, {"actor/grad_norm": 1.0}, "m.jsonl, line 6")]
    with pytest.raises(ValueError, match=r"^m.jsonl, line 6: an actor update without 'actor/num_optimizer_updates'"):
        mod.optimizer_updates(mixed, 8, 4, 8)


def verl_run(out: Path, slug: str, seed: int, record: dict | None) -> None:
    lines = [{"step": s, "data": {"ibpo/raw_score_mean": 0.1 * s, "actor/grad_norm": 1.0}} for s in range(1, 4)]
    (out / f"{slug}_s{seed}_metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    if record is not None:
        (out / f"{slug}_s{seed}_run.json").write_text(json.dumps(record))


def run_record(**changes) -> dict:
    return {"method": "GSPO G=n", "seed": 0, "n": 4, "batch_size": 8, "steps": 3, "lr": 3e-4, "warmup_steps": 5,
            "max_response_length": 96, "test_freq": 10, "budget_flops": 0.0, "micro_batch": 32, **changes}


@pytest.mark.parametrize("argv, message", [
    (["--n", "8"], "gspo_g_n_s0_run.json: the run was made with --n 4, this command gives --n 8; give --n 4"),
    (["--batch-size", "16"], "gspo_g_n_s0_run.json: the run was made with --batch-size 8, this command gives "
                             "--batch-size 16"),
])
def test_verl_report_refuses_runs_recorded_with_another_n_or_batch_size(tmp_path, capsys, argv, message):
    # before: G and the optimizer updates were counted from the command line's --n / --batch-size, silently wrong
    mod = load("compare_methods")
    verl_run(tmp_path, "gspo_g_n", 0, run_record())
    verl_run(tmp_path, "ibpo_g_n", 0, None)  # a run from before records: counted from the options, as before
    common = ["--assets", str(tmp_path / "none"), "--out", str(tmp_path), "--engine", "verl", "--report-only",
              "--seeds", "0", "--methods", "GSPO G=n", "IBPO G=n", "--smooth", "1"]
    assert mod.main([*common, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1, err
    assert mod.main(common) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["GSPO G=n"]["G"] == 4 and summary["GSPO G=n"]["optimizer_updates"] == [3]


def test_verl_run_of_other_options_is_not_reused(tmp_path):
    import argparse

    mod = load("compare_methods")
    verl_run(tmp_path, "gspo_g_n", 0, run_record(lr=1e-4))
    args = argparse.Namespace(n=4, batch_size=8, steps=3, lr=3e-4, warmup_steps=5, max_response_length=96,
                              test_freq=10, budget_flops=0.0, micro_batch=32)
    # before: "complete metrics found, not run again", a lr 1e-4 run reported as a lr 3e-4 one
    with pytest.raises(ValueError, match=r"gspo_g_n_s0_run.json: the run was made with --lr 0.0001, this command "
                                         r"gives --lr 0.0003"):
        mod.run_one({}, tmp_path, mod.METHODS[0], 0, args)
    verl_run(tmp_path, "gspo_g_n", 0, run_record())
    assert mod.run_one({}, tmp_path, mod.METHODS[0], 0, args) == tmp_path / "gspo_g_n_s0_metrics.jsonl"
