"""toy_task: the worked solutions are right, a mistake is a local edit, the rows are verl rows the project's
reward scores, written by the project's one row writer (``data_prep.common.write_verl_parquet``)."""

from __future__ import annotations

import random

import pyarrow.parquet as pq
import pytest

from data_prep.common import read_verl_parquet
from lab.toy_tasks.addition import DATA_SOURCE, AdditionProblem, digit_lines, render_solution, sample_problems, wrong_solution
from lab.toy_tasks.rows import EXTRA_INFO, SCHEMA, problem_row, write_task_parquets


def test_digit_lines_by_hand():
    lines, answer = digit_lines(4572, 3851)
    assert lines == ["d1: 2+1+0=3 write 3 carry 0", "d2: 7+5+0=12 write 2 carry 1",
                     "d3: 5+8+1=14 write 4 carry 1", "d4: 4+3+1=8 write 8 carry 0"]
    assert answer == "8423"
    assert digit_lines(9999, 1)[1] == "10000"  # final carry in front, operand zero-padded
    assert render_solution(55, 55).endswith("\\boxed{110}")


@pytest.mark.parametrize("seed", range(5))
def test_solutions_are_right_for_random_problems(seed):
    for p in sample_problems(50, seed):
        assert len(str(p.a)) == len(str(p.b)) == 4
        assert p.solution.endswith(f"\\boxed{{{p.a + p.b}}}")


def test_wrong_solution_is_wrong_and_local():
    rng = random.Random(0)
    for p in sample_problems(100, 3):
        right, wrong = p.solution.splitlines(), wrong_solution(p, rng).splitlines()
        assert len(right) == len(wrong) and right[-1] != wrong[-1]  # the answer differs
        changed = [i for i, (a, b) in enumerate(zip(right[:-1], wrong[:-1])) if a != b]
        # the first changed line is the mistake; later ones differ only through the carry it passes on
        assert changed and all(i == changed[0] or right[i].split("=")[0][:-1] == wrong[i].split("=")[0][:-1]
                               for i in changed)


def test_rows_schema_and_reward(tmp_path):
    paths = write_task_parquets(tmp_path, n_train=6, n_val=3, seed=0)
    train, val = read_verl_parquet(paths["train"]), read_verl_parquet(paths["val"])
    assert len(train) == 6 and len(val) == 3
    row = train[0]
    assert set(row) == set(SCHEMA.names) and row["data_source"] == DATA_SOURCE
    assert row["prompt"][0]["role"] == "user" and "\\boxed{}" in row["prompt"][0]["content"]
    assert {r["extra_info"]["question"] for r in train}.isdisjoint({r["extra_info"]["question"] for r in val})
    from reward_fns import compute_score

    p = AdditionProblem(1234, 5678)
    gt = problem_row(p, "train", 0)["reward_model"]["ground_truth"]
    assert compute_score(DATA_SOURCE, p.solution, gt)["score"] == 1.0
    assert compute_score(DATA_SOURCE, wrong_solution(p, random.Random(1)), gt)["score"] == 0.0


def test_rows_go_through_the_shared_writer(tmp_path):
    """The toy's files carry the shared verl schema with the toy's extra_info, and the shared writer's row check
    applies to them (an extra_info that differs from the schema's keys is refused, no file left behind)."""
    from data_prep.common import verl_schema, write_verl_parquet

    paths = write_task_parquets(tmp_path, n_train=2, n_val=1, seed=0)
    assert pq.read_schema(paths["train"]) == SCHEMA == verl_schema(EXTRA_INFO)
    row = problem_row(AdditionProblem(12, 34), "train", 0)
    row["extra_info"]["source"] = "oops"
    with pytest.raises(ValueError, match="row 0: extra_info keys"):
        write_verl_parquet([row], tmp_path / "bad.parquet", EXTRA_INFO)
    assert not list(tmp_path.glob("bad.parquet*"))


def test_three_sum_orders_repairs_and_errors():
    """The second task: six right solutions per problem (one per order), all scoring 1; a wrong one scores 0 and
    its repair is the right solution in the same order; the 'forgot the third number' error is far from every
    right solution; the task registry names both tasks."""
    from ibpo.alignment import normalized_edit_distance
    from reward_fns import compute_score
    from lab.toy_tasks import three_sum
    from lab.toy_tasks.tasks import TASKS, get_task

    assert sorted(TASKS) == ["addition", "three_sum", "three_sum_named"]
    with pytest.raises(ValueError, match="unknown toy task 'sum3'"):
        get_task("sum3")
    rng = random.Random(0)
    problems = three_sum.sample_problems(40, seed=1)
    assert all(100 <= x <= 999 for p in problems for x in p.operands)
    far = []
    for p in problems:
        rights = p.right_solutions
        assert 1 <= len(rights) <= 6
        if len(set(p.operands)) == 3:
            assert len(rights) == 6
        for text in rights:
            assert text.endswith(f"\\boxed{{{p.answer}}}")
            assert compute_score(three_sum.DATA_SOURCE, text, str(p.answer))["score"] == 1.0
        wrong, repair = three_sum.wrong_and_repair(p, rng)
        assert compute_score(three_sum.DATA_SOURCE, wrong, str(p.answer))["score"] == 0.0
        assert repair in rights and wrong.splitlines()[0] == repair.splitlines()[0]  # same order
        if "then" not in wrong:
            far.append(min(normalized_edit_distance(list(wrong), list(r)) for r in rights))
    assert far and min(far) > 0.4  # the third number forgotten: far from any right solution
    p = three_sum.ThreeSumProblem(352, 918, 461)
    assert three_sum.render_solution(p, (1, 2, 0)).splitlines()[:5] == [
        "first 918 + 461", "d1: 8+1+0=9 write 9 carry 0", "d2: 1+6+0=7 write 7 carry 0",
        "d3: 9+4+0=13 write 3 carry 1", "sum 1379"]
    assert three_sum.render_solution(p, (1, 2, 0)).endswith("\\boxed{1731}")


def test_three_sum_named_fetches_operands_by_name():
    """The named variant: the same operands as three_sum's for a seed, labelled in the prompt; its solutions name
    the operands (no 3-digit operand is written in the response before the answer) and keep the six orders, the
    error kinds (a wrong one scores 0, its repair is the right solution in its order) and the scoring."""
    from reward_fns import compute_score
    from lab.toy_tasks import three_sum
    from lab.toy_tasks.tasks import get_task

    task = get_task("three_sum_named")
    named, plain = task.sample_problems(30, 4), three_sum.sample_problems(30, 4)
    assert [p.operands for p in named] == [p.operands for p in plain]
    p = three_sum.NamedThreeSumProblem(352, 918, 461)
    assert p.prompt_text.startswith("a=352 b=918 c=461. What is a + b + c? ")
    assert three_sum.render_solution(p, (1, 2, 0)).splitlines() == [
        "first b + c", "d1: 8+1+0=9 write 9 carry 0", "d2: 1+6+0=7 write 7 carry 0",
        "d3: 9+4+0=13 write 3 carry 1", "sum 1379", "then sum + a", "d1: 9+2+0=11 write 1 carry 1",
        "d2: 7+5+1=13 write 3 carry 1", "d3: 3+3+1=7 write 7 carry 0", "d4: 1+0+0=1 write 1 carry 0", "\\boxed{1731}"]
    # a miscopied partial sum is written on the sum line and carried on from there
    wrong = three_sum.render_solution(p, (1, 2, 0), copied_sum_offset=10).splitlines()
    assert wrong[4] == "sum 1389" and wrong[-1] == "\\boxed{1741}"
    rng = random.Random(2)
    for q in named:
        rights = task.right_solutions(q)
        assert all(str(x) not in text.rsplit("\\boxed", 1)[0] for text in rights for x in q.operands)
        assert all(compute_score(three_sum.NAMED_DATA_SOURCE, t, str(q.answer))["score"] == 1.0 for t in rights)
        wrong, repair = task.wrong_and_repair(q, rng)
        assert compute_score(three_sum.NAMED_DATA_SOURCE, wrong, str(q.answer))["score"] == 0.0
        assert repair in rights and wrong.splitlines()[0] == repair.splitlines()[0]


def test_synthetic_sibling_overlap_is_lower_with_several_orders():
    """lab.analysis.task_overlap on character ids: a wrong addition shares more of itself with the one right worked
    solution than a wrong three_sum does with right solutions written in random orders; both are shares."""
    from lab.analysis.task_overlap import synthetic_overlap

    chars = lambda text: [ord(c) for c in text]  # noqa: E731
    addition = synthetic_overlap("addition", chars, problems=40)
    three = synthetic_overlap("three_sum", chars, problems=40)
    assert addition["wrong_in_mixed_groups"] == three["wrong_in_mixed_groups"] == 80
    a, t = addition["wrong_tokens_shared_with_right_sibling"], three["wrong_tokens_shared_with_right_sibling"]
    assert 0 < t < a < 1


@pytest.mark.parametrize("module", ["lab.toy_tasks.warm_start", "toy_task.synthetic_task"])
@pytest.mark.parametrize("args, message", [
    # before: --sft-steps 0 built the tokenizer and model, then failed with IndexError (no loss to report)
    (["--sft-steps", "0"], "argument --sft-steps: must be an integer >= 1, got '0'"),
    (["--sft-steps", "-3"], "argument --sft-steps: must be an integer >= 1, got '-3'"),
])
def test_warm_start_clis_refuse_a_step_count_below_one(module, args, message, tmp_path, monkeypatch, capsys):
    import importlib

    cli = importlib.import_module(module)
    monkeypatch.setattr(cli, "build_toy_assets" if module.endswith("warm_start") else "build_cpu_demo_assets",
                        lambda *a, **k: pytest.fail("assets built"))
    with pytest.raises(SystemExit) as info:
        cli.main(["--out", str(tmp_path / "o"), *args])
    assert info.value.code == 2 and capsys.readouterr().err.strip().endswith(f"error: {message}")


@pytest.mark.parametrize("module", ["lab.toy_tasks.warm_start", "toy_task.synthetic_task"])
def test_warm_start_clis_refuse_an_out_folder_that_is_a_file(module, tmp_path, monkeypatch, capsys):
    # before: a NotADirectoryError traceback from the tokenizer's or model's save, after the work began
    import importlib

    cli = importlib.import_module(module)
    monkeypatch.setattr(cli, "build_toy_assets" if module.endswith("warm_start") else "build_cpu_demo_assets",
                        lambda *a, **k: pytest.fail("assets built"))
    (tmp_path / "f").write_text("")
    with pytest.raises(SystemExit) as info:
        cli.main(["--out", str(tmp_path / "f")])
    assert info.value.code == 2
    assert capsys.readouterr().err.strip().endswith(f"error: argument --out: {tmp_path / 'f'} is a file, not a folder")


def test_warm_start_measure_of_a_task_without_val_rows_is_refused(tmp_path, monkeypatch, capsys):
    # before: --measure with --task three_sum_named built the warm start and measured nothing, silently
    from lab.toy_tasks import warm_start

    monkeypatch.setattr(warm_start, "build_toy_assets", lambda *a, **k: pytest.fail("assets built"))
    with pytest.raises(SystemExit) as info:
        warm_start.main(["--out", str(tmp_path), "--task", "three_sum_named", "--measure"])
    assert info.value.code == 2 and capsys.readouterr().err.strip().endswith(
        "error: --measure: the addition task only (its val rows), not --task three_sum_named")
