"""The neutral mix of lab/scripts/bench_verifiers.py: its real LiveCodeBench rows load through data_prep's decoder
(stdin and functional, private tests included), every verdict kind occurs at its stated count, our verifier gives
each response the verdict it is stated to earn, and the comparison table renders from a tiny run of both
verifiers. The timing itself is the bench's business, not a test's."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from data_prep.livecodebench import decode_private_tests
from reward_fns.code_tests import decode_tests

ROOT = Path(__file__).resolve().parents[3]
STATED_MIX = {"correct": 10, "wrong_answer": 9, "runtime_error": 3, "compile_error": 1, "timeout": 2,
              "memory_limit": 1, "no_answer": 2}  # the shares docs/verifiers.md quotes


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_verifiers_under_test", ROOT / "lab" / "scripts" / "bench_verifiers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


bench = load_bench()


def test_mix_loads_real_rows_of_both_kinds_with_their_private_tests():
    samples = bench.load_mix()
    tests = {s.question_id: decode_tests(s.ground_truth) for s in samples}
    assert sorted(tests) == ["1873_A", "1883_B", "2955", "3206", "abc302_a"]
    assert {q for q, t in tests.items() if t["fn_name"]} == {"2955", "3206"}
    doc = json.loads(bench.MIX_FIXTURE.read_text())
    for raw in doc["rows"]:  # every row has private tests, and the decoded truth holds public + private
        public = json.loads(raw["public_test_cases"])
        private = decode_private_tests(raw["private_test_cases"])
        assert private and len(tests[raw["question_id"]]["inputs"]) == len(public) + len(private)
    legacy = json.loads((ROOT / "tests" / "fixtures" / "reward" / "lcb_1873_A.json").read_text())
    assert tests["1873_A"]["inputs"] == legacy["inputs"] and tests["1873_A"]["outputs"] == legacy["outputs"]
    assert json.loads(samples[0].tests_json) == tests[samples[0].question_id]  # prime_code gets the same tests


def test_every_verdict_kind_occurs_at_its_stated_count():
    samples = bench.load_mix()
    assert Counter(s.kind for s in samples) == STATED_MIX
    assert set(STATED_MIX) == set(bench.MIX_KINDS)
    assert json.loads(bench.MIX_FIXTURE.read_text())["mix"] == STATED_MIX


def test_a_mix_whose_responses_differ_from_its_stated_shares_is_refused(tmp_path):
    doc = json.loads(bench.MIX_FIXTURE.read_text())
    doc["mix"]["correct"] += 1
    path = tmp_path / "mix.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"mix\.json: the responses' kinds .* differ from its stated mix"):
        bench.load_mix(path)
    doc["mix"]["correct"] -= 1
    doc["responses"][0]["question_id"] = "9999"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"response 1: question_id '9999'"):
        bench.load_mix(path)


def one_of_each(kinds):
    samples = bench.load_mix()
    return [next(s for s in samples if s.kind == kind) for kind in kinds]


def test_ours_gives_each_fast_kind_its_stated_verdict():
    for sample in one_of_each([k for k in bench.MIX_KINDS if k != "timeout"]):
        assert bench.ours(sample)[0] == sample.kind, (sample.question_id, sample.kind)


@pytest.mark.slow
def test_ours_gives_every_response_its_stated_verdict():
    for sample in bench.load_mix():
        assert bench.ours(sample)[0] == sample.kind, (sample.question_id, sample.kind, sample.response[:80])


def test_the_comparison_table_renders_from_a_tiny_run():
    run = bench.run_mix(one_of_each(["correct"]), threads=1)
    lines = bench.mix_table(run, "header line").splitlines()
    assert lines[0] == "header line" and lines[1].startswith("| verdict kind") and len(lines) == 6
    assert lines[3].startswith("| correct        |  1 |") and lines[3].endswith("|       1/1  |        1/1  |")
    assert lines[4].startswith("wall, whole mix (1): ours ") and lines[4].endswith("(prime_code time / ours; >1: ours faster)")
    assert lines[5].startswith("wall, without the time-outs (1, a second pass): ours ")
    assert run.results["ours"][0][0] == "correct" and run.results["prime_code"][0][0] == "correct"
