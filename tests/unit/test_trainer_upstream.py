"""One rule for every piece of verl this project copies (recipe/common/upstream/manifest.toml).

- the pin: recipe/common/REQUIRED_VERL.txt is the one place verl's version is written; setup.py and the drift
  checks read it; the installed verl is that version;
- for every manifest entry: the installed verl's text equals the stored text, and (copies) ours equals the
  stored text plus only marked lines (``# RECIPE``, or fit's hook calls) and the listed ``replaced`` lines;
- each check really fails, naming the symbol and the lines, on a modified copy of each symbol;
- the upgrade guide (docs/upgrading_verl.md) run once on a synthetic "new verl".
"""

from __future__ import annotations

import inspect
import runpy
import shutil
from pathlib import Path

import pytest
import setuptools

from recipe.common import upstream
from recipe.counterfactual.counterfactual_trainer import RayCounterfactualTrainer
from recipe.ibpo.ibpo_ray_trainer import RayIBPOTrainer
from recipe.common.trainer_base import HookedRayPPOTrainer
from recipe.common.upstream.__main__ import main as upstream_cli

ROOT = Path(__file__).resolve().parents[2]
COPIES = [e for e in upstream.MANIFEST if e.kind == "copy"]


# ------------------------------------------------------------------ the pin
def test_one_pin_read_by_setup_py_and_the_checks(monkeypatch):
    requirement = upstream.pinned_verl_requirement()
    captured = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kw: captured.update(kw))
    monkeypatch.chdir(ROOT)
    runpy.run_path(str(ROOT / "setup.py"))
    verl_reqs = [r for r in captured["install_requires"] if r.startswith("verl")]
    assert verl_reqs == [requirement]
    assert "*/*.txt" in captured["package_data"]["recipe"]  # recipe/common/REQUIRED_VERL.txt ships
    upstream.check_installed_version()  # the installed verl is the pinned one
    with pytest.raises(upstream.UpstreamDriftError, match="installed verl is 9.9.9.*upgrading_verl.md"):
        upstream.check_installed_version(installed="9.9.9")


def test_no_stored_file_is_named_by_the_version():
    """An upgrade moves the pin and regenerates the stored texts; no file name changes. (That no shipped file's
    text writes the version outside the pin and the run records: tests/unit/test_no_outside_references.py.)"""
    version = upstream.pinned_verl_version()
    assert not [p.name for p in (ROOT / "recipe/common/upstream").iterdir() if version.replace(".", "_") in p.name]


def test_bad_pin_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "REQUIRED_VERL.txt"
    bad.write_text("# comment\nverl==1\nverl==2\n")
    with pytest.raises(ValueError, match="REQUIRED_VERL.txt: expected exactly one line"):
        upstream.pinned_verl_requirement(bad)


# ------------------------------------------------------------------ the manifest and both checks
def test_manifest_lists_every_stored_text_and_the_copies_we_know():
    stored = {p.name for p in (ROOT / "recipe/common/upstream").glob("*.py.txt")}
    assert stored == {e.stored for e in upstream.MANIFEST}
    assert {e.name for e in upstream.MANIFEST} == {
        "RayPPOTrainer.fit", "RayPPOTrainer._update_actor", "TaskRunner.run", "initialize_global_process_group",
        "RayPPOTrainer._compute_old_log_prob"}
    assert upstream.BY_NAME["RayPPOTrainer._compute_old_log_prob"].kind == "mirror"


@pytest.mark.parametrize("entry", upstream.MANIFEST, ids=lambda e: e.name)
def test_installed_verl_equals_the_stored_text(entry):
    upstream.check_installed(entry)


@pytest.mark.parametrize("entry", COPIES, ids=lambda e: e.name)
def test_ours_is_the_stored_text_plus_marked_lines_only(entry):
    upstream.check_ours(entry)


def test_cli_check_passes_on_this_tree(capsys):
    assert upstream_cli(["check"]) == 0
    assert "5 copied/mirrored symbols, 0 problem(s)" in capsys.readouterr().out


# Modified copies of each symbol (ours): (entry, stored line as it is in ours, its replacement, what the
# message must name). Each is an edit outside the marked lines that changes behaviour.
MODIFIED_OURS = [
    ("RayPPOTrainer._update_actor", 'dataloader_kwargs={"shuffle": shuffle},', 'dataloader_kwargs={"shuffle": False},',
     'dataloader_kwargs={"shuffle": False}'),
    ("RayPPOTrainer._update_actor", "calculate_entropy=calculate_entropy,", "calculate_entropy=False,",
     "calculate_entropy=False"),
    ("RayPPOTrainer._update_actor", "ppo_epochs = self.config.actor_rollout_ref.actor.ppo_epochs",
     "ppo_epochs = 1", "ppo_epochs = 1"),
    ("RayPPOTrainer.fit", "self.checkpoint_manager.sleep_replicas()", "pass", "sleep_replicas"),
    ("TaskRunner.run", "trainer.init_workers()", "pass", "init_workers"),
    ("TaskRunner.run", "is_train=True,", "is_train=False,", "is_train=False"),
    ("initialize_global_process_group", "timeout=timedelta(seconds=timeout_second),",
     "timeout=timedelta(seconds=60),", "seconds=60"),
]


@pytest.mark.parametrize("name,line,replacement,named", MODIFIED_OURS, ids=lambda v: str(v)[:40])
def test_ours_check_fails_on_an_unmarked_edit(name, line, replacement, named):
    entry = upstream.BY_NAME[name]
    ours = upstream.symbol_source(entry.ours)
    assert ours.count(line) == 1, line
    modified = ours.replace(line, replacement)
    with pytest.raises(upstream.UpstreamDriftError) as info:
        upstream.check_ours(entry, modified)
    message = str(info.value)
    assert message.startswith(f"{name}: ours") and named in message and line in message


@pytest.mark.parametrize("name,line,replacement,named", MODIFIED_OURS, ids=lambda v: str(v)[:40])
def test_marking_does_not_license_changing_an_unlisted_stored_line(name, line, replacement, named):
    """Marking ``# RECIPE`` admits the added line, but the stored line it replaces is not in ``replaced``."""
    entry = upstream.BY_NAME[name]
    ours = upstream.symbol_source(entry.ours)
    with pytest.raises(upstream.UpstreamDriftError, match=f"{name}: ours .* drops or changes stored lines"):
        upstream.check_ours(entry, ours.replace(line, replacement + "  # RECIPE"))


def test_ours_check_accepts_docstrings_blank_lines_and_marked_additions_and_rejects_reindented_lines():
    entry = upstream.BY_NAME["RayPPOTrainer._update_actor"]
    ours = upstream.symbol_source(entry.ours)
    upstream.check_ours(entry, ours.replace("The pinned verl's", "Some other docstring; the pinned verl's"))
    upstream.check_ours(entry, ours.replace("        ppo_epochs =", "\n\n        ppo_epochs ="))
    upstream.check_ours(entry, ours.replace("        ppo_epochs =", "        x = 1  # RECIPE: a marked addition\n"
                                                                    "        ppo_epochs ="))
    # a marker inside a string literal is not a marker
    with pytest.raises(upstream.UpstreamDriftError, match="adds unmarked lines .*note"):
        upstream.check_ours(entry, ours.replace("        ppo_epochs =", '        note = "x  # RECIPE"\n'
                                                                    "        ppo_epochs ="))
    # the same text moved into a block is a change, not a copy
    line = "        shuffle = self.config.actor_rollout_ref.actor.shuffle\n"
    with pytest.raises(upstream.UpstreamDriftError, match="drops or changes stored lines .*shuffle"):
        upstream.check_ours(entry, ours.replace(line, "        if True:  # RECIPE\n    " + line))
    # a hook call where it is not expected, or missing, fails fit's check
    fit_entry = upstream.BY_NAME["RayPPOTrainer.fit"]
    fit = upstream.symbol_source(fit_entry.ours)
    with pytest.raises(upstream.UpstreamDriftError, match="adds unmarked lines"):
        upstream.check_ours(fit_entry, fit.replace("                self._shape_rewards(batch, metrics)\n", ""))


MODIFIED_INSTALLED = [  # (entry, stored line, the "installed" replacement, stored line number named)
    ("RayPPOTrainer.fit", "self.checkpoint_manager.sleep_replicas()", "self.checkpoint_manager.sleep_all()", None),
    ("RayPPOTrainer._update_actor", 'dataloader_kwargs={"shuffle": shuffle},', 'dataloader_kwargs={},', 40),
    ("TaskRunner.run", "trainer.init_workers()", "trainer.init_workers(lazy=True)", 81),
    ("initialize_global_process_group", "timeout=timedelta(seconds=timeout_second),", "timeout=None,", 5),
    ("RayPPOTrainer._compute_old_log_prob", "calculate_entropy=True,", "calculate_entropy=False,", None),
]


@pytest.mark.parametrize("name,line,replacement,lineno", MODIFIED_INSTALLED, ids=lambda v: str(v)[:40])
def test_installed_check_fails_on_a_modified_verl_naming_symbol_and_lines(name, line, replacement, lineno):
    entry = upstream.BY_NAME[name]
    stored = entry.stored_text()
    assert stored.count(line) == 1
    lineno = lineno or stored.splitlines().index(next(s for s in stored.splitlines() if line in s)) + 1
    with pytest.raises(upstream.UpstreamDriftError) as info:
        upstream.check_installed(entry, stored.replace(line, replacement))
    message = str(info.value)
    assert message.startswith(f"{name}: the installed verl's text differs from the stored text at stored lines "
                              f"{lineno} (2 lines changed)")
    assert "+" + stored.splitlines()[lineno - 1].replace(line, replacement) in message  # the diff is shown
    assert "docs/upgrading_verl.md" in message and entry.ours in message
    with pytest.raises(upstream.UpstreamDriftError, match=f"{name}: .* stored lines {lineno} "):
        upstream.check_installed(entry, stored.replace(stored.splitlines()[lineno - 1] + "\n", ""))


# ------------------------------------------------------------------ fit's hook calls sit where their contracts say
def test_our_fit_adds_exactly_the_hook_calls_in_order():
    added, removed = upstream.copy_changes(inspect.getsource(HookedRayPPOTrainer.fit),
                                           upstream.BY_NAME["RayPPOTrainer.fit"].stored_text())
    assert removed == []
    assert [t.strip() for _, t in added] == list(upstream.HOOK_CALLS) == [
        "self._before_generation(combined_gen_batch, metrics, timing_raw)",
        "self._after_generation(combined_gen_batch, combined_gen_output, metrics, timing_raw)",
        "batch = self._extend_batch_before_balance(batch, metrics)",
        "self._shape_rewards(batch, metrics)",
        "self._after_advantage(batch, metrics, timing_raw)",
        "self._step_metrics(batch, metrics, timing_raw)",
    ]


def test_the_hook_calls_sit_where_their_contracts_say():
    """Order inside the step: the correction hook runs before the replicas sleep, the batch extension
    before balancing, shaping before the advantage, the mask after it."""
    lines = [s.strip() for s in inspect.getsource(HookedRayPPOTrainer.fit).splitlines()]

    def at(text):
        return lines.index(text)

    assert at(upstream.HOOK_CALLS[0]) + 1 == at(
        "combined_gen_output = self.async_rollout_manager.generate_sequences(combined_gen_batch)")
    assert at(upstream.HOOK_CALLS[1]) + 1 == at("self.checkpoint_manager.sleep_replicas()")
    assert at(upstream.HOOK_CALLS[2]) + 1 == at("if self.config.trainer.balance_batch:")
    assert at('batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]') < at(upstream.HOOK_CALLS[3])
    assert at(upstream.HOOK_CALLS[3]) < at("batch = compute_advantage(") < at(upstream.HOOK_CALLS[4]) < at(
        "actor_output = self._update_actor(batch)")
    assert at(upstream.HOOK_CALLS[5]) + 1 == at("logger.log(data=metrics, step=self.global_steps)")


def test_each_method_overrides_only_hooks_not_the_loop():
    for cls in (RayIBPOTrainer, RayCounterfactualTrainer):
        assert cls.fit is HookedRayPPOTrainer.fit
    assert RayCounterfactualTrainer._extend_batch_before_balance is HookedRayPPOTrainer._extend_batch_before_balance
    assert RayCounterfactualTrainer._shape_rewards is HookedRayPPOTrainer._shape_rewards
    assert not hasattr(RayCounterfactualTrainer, "ibpo_correction_pass")
    assert not hasattr(RayIBPOTrainer, "apply_counterfactual_weights")


# ------------------------------------------------------------------ the upgrade guide on a synthetic new verl
def _apply_our_update_actor_changes(new_stored: str, ours_now: str, old_stored: str) -> str:
    """What the guide's step 5 asks of the maintainer: our marked lines, re-applied to the new text (here
    mechanically: the same replacements ours makes of the old stored text)."""
    import difflib
    import textwrap

    old, new_ours = old_stored.splitlines(keepends=True), ours_now.splitlines(keepends=True)
    result = new_stored
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new_ours, autojunk=False).get_opcodes():
        if tag == "replace":
            result = result.replace("".join(old[i1:i2]), "".join(new_ours[j1:j2]), 1)
        elif tag == "insert":
            anchor = old[i1 - 1]
            result = result.replace(anchor, anchor + "".join(new_ours[j1:j2]), 1)
    assert textwrap.dedent(result) != textwrap.dedent(new_stored)
    return result


def test_upgrade_guide_on_a_synthetic_new_verl(tmp_path):
    """docs/upgrading_verl.md steps 3-6 on a "new verl" whose _update_actor gained a line and changed one:
    the check names exactly that symbol and those stored lines; regenerate stores the new text; the copy then
    fails until our marked lines are re-applied, and passes after."""
    for entry in upstream.MANIFEST:
        shutil.copy(entry.stored_path, tmp_path / entry.stored)
    entry = upstream.BY_NAME["RayPPOTrainer._update_actor"]
    old_stored = entry.stored_text()
    new_verl = old_stored.replace(
        '        batch.meta_info["temperature"] = rollout_config.temperature\n',
        '        batch.meta_info["temperature"] = rollout_config.temperature\n'
        '        batch.meta_info["new_upstream_flag"] = True\n').replace(
        "seed = self.config.actor_rollout_ref.actor.data_loader_seed",
        "seed = self.config.actor_rollout_ref.actor.data_loader_seed + self.global_steps")

    def installed(address):
        return new_verl if address == entry.upstream else upstream.symbol_source(address)

    # step 3: the check reports exactly which symbol and which stored lines
    problems = upstream.drift_report(installed_source=installed, folder=tmp_path)
    assert len(problems) == 1
    assert problems[0].startswith("RayPPOTrainer._update_actor: the installed verl's text differs from the stored "
                                  "text at stored lines 5, 29 (3 lines changed)")
    assert '+        batch.meta_info["new_upstream_flag"] = True' in problems[0]
    # step 4: regenerate stores the new text (only that file changes)
    before = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert upstream.regenerate(installed_source=installed, folder=tmp_path) == ["RayPPOTrainer._update_actor"]
    assert (tmp_path / entry.stored).read_text() == new_verl
    assert {p.name for p in tmp_path.iterdir() if p.read_text() != before[p.name]} == {entry.stored}
    # step 5: our copy is now behind: the check names the new upstream lines ours lacks
    problems = upstream.drift_report(installed_source=installed, folder=tmp_path)
    assert len(problems) == 2 and all(p.startswith("RayPPOTrainer._update_actor: ours") for p in problems)
    assert "new_upstream_flag" in problems[1] and "data_loader_seed + self.global_steps" in problems[1]
    assert "(6, 'batch.meta_info[\"new_upstream_flag\"] = True')" in problems[1]  # stored line number
    # step 5 done: the marked lines re-applied to the new text; everything passes again
    ours_new = _apply_our_update_actor_changes(new_verl, upstream.symbol_source(entry.ours), old_stored)

    def ours_source(address):
        return ours_new if address == entry.ours else upstream.symbol_source(address)

    assert upstream.drift_report(installed_source=installed, ours_source=ours_source, folder=tmp_path) == []


def test_the_cpu_copy_of_initialize_global_process_group_behaves(monkeypatch):
    """The manifest's verl_cpu copy: verl's body with a valid backend string (``cpu:gloo,cpu:gloo`` ->
    ``gloo``), verl's timeout and init method, and (rank, ...) read from the environment as verl does."""
    import types
    from datetime import timedelta

    import torch.distributed

    from verl_cpu.patches import patch_distributed_module

    module = types.SimpleNamespace(get_device_name=lambda: "cpu", get_nccl_backend=lambda: "gloo",
                                   initialize_global_process_group_ray=lambda **kw: kw,
                                   initialize_global_process_group=None)
    patch_distributed_module(module)
    calls = []
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda **kw: calls.append(kw))
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("DIST_INIT_METHOD", "tcp://127.0.0.1:1")
    assert module.initialize_global_process_group(timeout_second=12) == (1, 3, 4)
    assert calls == [{"backend": "gloo", "timeout": timedelta(seconds=12), "init_method": "tcp://127.0.0.1:1"}]


def test_cli_refuses_to_regenerate_against_another_version_than_the_pin(monkeypatch, capsys):
    before = {e.stored: e.stored_text() for e in upstream.MANIFEST}
    monkeypatch.setattr(upstream, "pinned_verl_version", lambda path=None: "9.9.9")
    assert upstream_cli(["regenerate"]) == 2
    assert "pins 9.9.9: update the pin first" in capsys.readouterr().err
    assert {e.stored: e.stored_text() for e in upstream.MANIFEST} == before
    assert upstream_cli(["check"]) == 1
    assert "REQUIRED_VERL.txt pins 9.9.9" in capsys.readouterr().out
