"""The reward tests of projects that are not ours (math-verify 0.9.0's own test pairs, verl's reward-score tests,
TRL's reward tests), converted to our API by scripts/external_math_suites.py and stored with their repository,
path and commit in tests/fixtures/reward/external_math_suites.json. Each upstream expectation holds here, or the
case is a documented difference (``DIFFERENCES``) with the reward_fns/README.md line that decides it; no pair an
upstream suite asserts NOT equal scores correct except the two documented ones (math-verify's parser tests whose
values are equal); reward_fns/external_suites.md is the report of this very run."""

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # ~300 cases through the math workers: 15-45 s on the 2-core machine


def _script():
    path = ROOT / "scripts" / "external_math_suites.py"
    spec = importlib.util.spec_from_file_location("ibpo_external_math_suites", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def scored():
    suites = _script()
    cases = json.loads(suites.FIXTURE.read_text(encoding="utf-8"))
    return suites, cases, {c["id"]: suites.score(c) for c in cases}


def test_the_fixture_records_where_each_case_comes_from(scored):
    _suites, cases, _verdicts = scored
    assert {c["suite"] for c in cases} == {"math-verify", "verl", "trl"}
    assert sum(c["suite"] == "math-verify" for c in cases) > 250
    for case in cases:
        assert case["repo"] and case["path"] and re.fullmatch(r"[0-9a-f]{7,40}", case["commit"]), case["id"]
        assert case["upstream"] in (0, 1, None)


def test_every_upstream_expectation_holds_or_is_a_documented_difference(scored):
    suites, cases, verdicts = scored
    differing = {c["id"].split(":", 1)[1] for c in cases if not suites.agrees(c, verdicts[c["id"]])}
    assert differing - set(suites.DIFFERENCES) == set(), "undocumented differences"
    assert set(suites.DIFFERENCES) - differing == set(), "documented differences that no longer differ"
    for rule, _why in suites.DIFFERENCES.values():
        suites.readme_line(rule)  # the README still holds the line that decides it


def test_no_pair_an_upstream_suite_asserts_not_equal_is_paid(scored):
    suites, cases, verdicts = scored
    paid = {c["id"].split(":", 1)[1] for c in cases if c["upstream"] == 0 and verdicts[c["id"]] == "correct"}
    # math-verify's parser tests "inline $ math across lines is not read": the value is the gold (9 for 9)
    assert paid == {"tests/test_all.py:132", "tests/test_all.py:133"}
    assert all(verdicts[c["id"]] == "bad_gold" for c in cases if c["upstream"] is None)  # TRL's unparsable golds


def test_the_report_in_docs_is_this_run(scored):
    suites, cases, verdicts = scored
    table = [line for line in suites.report(cases, verdicts).splitlines() if line.startswith("| ") and "(" in line
             and "|---" not in line and line.count("|") == 7]
    committed = (ROOT / "reward_fns" / "external_suites.md").read_text(encoding="utf-8")
    assert table and all(row in committed for row in table), "regenerate reward_fns/external_suites.md"


def test_a_short_prediction_is_boxed_where_a_model_would_box_it():
    suites = _script()
    assert suites.as_response(r"We find that $x \lt 3$.") == ("math_dapo", r"We find that $\boxed{x \lt 3}$.")
    assert suites.as_response("7,425,000") == ("math_dapo", r"The answer is $\boxed{7,425,000}$.")
    assert suites.as_response(r"so $\boxed{2}$") == ("math_dapo", r"so $\boxed{2}$")
    assert suites.as_response("x" * 100)[0] == "aime25"
