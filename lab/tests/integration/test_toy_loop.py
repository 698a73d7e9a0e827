"""lab.analysis.toy_loop end to end on a tiny untrained model: every arm stops at the FLOP budget and is evaluated
at the milestones; the step's FLOPs are compute_accounting.flops's count of the rows it generated and trained; the
baseline and IBPO of a seed draw the same first samples (common random numbers); the JSON feeds the report."""

from __future__ import annotations

import json

import pytest
import torch

from lab.analysis import toy_loop
from compute_accounting.flops import StepWork, forward_flops, step_flops

# building the tiny tokenizer and model takes ~35 s on 2 shared cores: every test here is slow
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    from lab.toy_tasks.warm_start import tokenizer_corpus
    from verl_cpu.tiny_assets import build_tiny_model, build_tiny_tokenizer

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("toy")
    tokenizer = build_tiny_tokenizer(out / "tok", seed=0, corpus=tokenizer_corpus(0, num_lines=60),
                                     individual_digits=True)
    build_tiny_model(out / "model", tokenizer, hidden_size=32, num_layers=1, seed=0)
    return toy_loop.Toy(out / "model", train_size=16, test_size=4)


def test_arms_stop_at_the_budget_and_share_samples(toy, monkeypatch):
    monkeypatch.setattr(toy_loop, "MAX_RESPONSE_TOKENS", 12)
    arms = toy_loop.default_arms()
    gspo = toy_loop.run(toy, arms["GSPO G=n"], 3, budget=float("inf"), n=2, batch_size=2, lr=1e-3, warmup=0,
                        max_steps=1)
    step = gspo["steps"][0]
    budget = 2.5 * step["flops"]
    full = toy_loop.run(toy, arms["GSPO G=n"], 3, budget=budget, n=2, batch_size=2, lr=1e-3, warmup=0)
    assert full["steps"][0]["flops"] == step["flops"]  # same seed, same first step
    assert [e["milestone"] for e in full["evals"]] == [0.5, 1.0]
    # evaluated at the first step whose cumulative FLOPs reach each milestone, and stopped there
    for e in full["evals"]:
        reached = [s["flops"] for s in full["steps"] if s["flops"] >= e["milestone"] * budget]
        assert e["flops"] == reached[0]
    assert full["steps"][-1]["flops"] >= budget > full["steps"][-2]["flops"]
    assert len(full["evals"][-1]["correct"]) == 4
    # the step's FLOPs: 4 rows generated and trained, no separate old-log-prob forward
    assert step["flops_by_phase"]["actor_update"] == pytest.approx(3 * step["flops_by_phase"]["main_gen"])
    # IBPO of the same seed samples the same main responses at step 1 (its Δ only changes what is trained)
    ibpo = toy_loop.run(toy, arms["IBPO G=n"], 3, budget=float("inf"), n=2, batch_size=2, lr=1e-3, warmup=0,
                        max_steps=1)
    assert ibpo["steps"][0]["flops_by_phase"]["main_gen"] == step["flops_by_phase"]["main_gen"]
    assert ibpo["steps"][0]["reward"] == step["reward"]
    json.dumps(full)  # the result is plain JSON


def test_gspo_loss_gradient_is_the_advantage_weighted_mean_log_prob(toy):
    """At the on-policy point the loss's gradient equals that of −mean_i mean_t Â_t log π_t (slow reference)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(toy.model_dir, dtype=torch.float32)
    prompts = [[1, 2, 3], [4, 5]]
    responses = [[6, 7], [8, 9, 10]]
    adv = [torch.tensor([0.5, -1.0]).numpy(), torch.tensor([2.0, 2.0, 0.0]).numpy()]
    loss = toy_loop.gspo_loss(model, prompts, responses, adv, pad_id=0)
    grads = torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad])
    ref = 0.0
    for p, r, a in zip(prompts, responses, adv):
        ids = torch.tensor([p + r])
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1], -1)
        lp = torch.stack([logp[len(p) - 1 + t, tok] for t, tok in enumerate(r)])
        ref = ref - (torch.as_tensor(a) * lp).mean() / len(prompts)
    ref_grads = torch.autograd.grad(ref, [p for p in model.parameters() if p.requires_grad])
    assert loss.item() == pytest.approx(-(0.5 - 1.0) / 2 / 2 - (2 + 2 + 0) / 3 / 2)
    for g, h in zip(grads, ref_grads):
        torch.testing.assert_close(g, h, rtol=1e-4, atol=1e-6)


def test_model_shape_matches_the_setup_check(toy):
    from transformers import AutoModelForCausalLM

    from recipe.common.preflight.model import model_flop_shape

    model = AutoModelForCausalLM.from_pretrained(toy.model_dir, dtype=torch.float32)
    assert toy_loop.model_shape(model) == model_flop_shape(toy.model_dir)
    shape = toy_loop.model_shape(model)
    assert step_flops(StepWork(main_gen=[5], train_main=[5], old_log_prob_forward=False), shape).total == \
        pytest.approx(4 * forward_flops([5], shape))


def _without_wall_times(result: dict) -> dict:
    """A run's JSON minus what measures the machine, not the run (seconds)."""
    result = {k: v for k, v in result.items() if k != "wall_s"}
    result["steps"] = [{k: v for k, v in s.items() if k != "time"} for s in result["steps"]]
    return result


def test_jobs_do_not_change_results_and_existing_runs_are_skipped(toy, tmp_path):
    """--jobs 2 (spawned workers) writes the same per-run JSON as --jobs 1, bit for bit apart from seconds; a run
    whose JSON exists is not run again; --deadline in the past starts no seed."""
    assets = tmp_path / "assets"
    assets.mkdir()
    (assets / "assets.json").write_text(json.dumps({"model": toy.model_dir}))
    arms = toy_loop.default_arms()
    one = toy_loop.run(toy, arms["GSPO G=n"], 0, budget=float("inf"), n=2, batch_size=2, lr=1e-3, warmup=0,
                       max_steps=1)
    budget = 1.5 * one["steps"][0]["flops"]  # two steps of the baseline
    common = ["--assets", str(assets), "--arms", "GSPO G=n", "IBPO G=n", "--seeds", "1", "--n", "2",
              "--batch-size", "2", "--lr", "1e-3", "--budget-flops", str(budget), "--train-size", "16",
              "--test-size", "4"]
    for jobs in (1, 2):
        assert toy_loop.main([*common, "--out", str(tmp_path / f"j{jobs}"), "--jobs", str(jobs)]) == 0
    names = ["gspo_g_n_s1.json", "ibpo_g_n_s1.json"]
    for name in names:
        a, b = (json.loads((tmp_path / f"j{j}" / name).read_text()) for j in (1, 2))
        assert [e["milestone"] for e in a["evals"]] == [0.5, 1.0]
        assert _without_wall_times(a) == _without_wall_times(b)
    assert len(json.loads((tmp_path / "j1" / names[0]).read_text())["steps"]) == 2
    stamps = {n: (tmp_path / "j2" / n).stat().st_mtime_ns for n in names}
    assert toy_loop.main([*common, "--out", str(tmp_path / "j2"), "--jobs", "2"]) == 0
    assert {n: (tmp_path / "j2" / n).stat().st_mtime_ns for n in names} == stamps
    assert toy_loop.main([*common, "--seeds", "2", "--out", str(tmp_path / "late"), "--deadline", "1"]) == 0
    assert not list((tmp_path / "late").glob("*_s2.json"))


def test_equal_steps_mode_makes_exactly_max_steps_and_evaluates_after_the_last(toy):
    arms = toy_loop.default_arms()
    result = toy_loop.run(toy, arms["GSPO G=n"], 0, budget=float("inf"), n=2, batch_size=2, lr=1e-3,
                          warmup=0, max_steps=3, milestones=())
    assert [s["step"] for s in result["steps"]] == [1, 2, 3]
    assert [(e["milestone"], e["step"]) for e in result["evals"]] == [(None, 3)]
    assert len(result["evals"][0]["correct"]) == 4


def test_validation_split_runs_and_a_folder_keeps_one_protocol(toy, tmp_path):
    """--eval-split val scores as many validation problems, none of them a train or test problem, and records the
    warm start's validation accuracy under its own name; adding runs of another lr to the folder is refused."""
    val_toy = toy_loop.Toy(toy.model_dir, train_size=16, test_size=4, eval_split="val")
    assert len(val_toy.eval_problems) == 4 and val_toy.test == toy.test
    assert not set(val_toy.eval_problems) & (set(val_toy.test) | set(val_toy.train))
    common = ["--model", toy.model_dir, "--arms", "GSPO G=n", "--n", "2", "--batch-size", "2", "--train-size", "16",
              "--test-size", "4", "--budget-steps", "1", "--milestones", "1.0", "--eval-split", "val",
              "--out", str(tmp_path / "val")]
    assert toy_loop.main([*common, "--seeds", "0", "--lr", "1e-3"]) == 0
    meta = json.loads((tmp_path / "val" / "meta.json").read_text())
    assert "warm_start_val_accuracy" in meta and "warm_start_test_accuracy" not in meta
    assert len(json.loads((tmp_path / "val" / "gspo_g_n_s0.json").read_text())["evals"][0]["correct"]) == 4
    with pytest.raises(SystemExit, match="--lr 0.001 there, 0.0003 now"):
        toy_loop.main([*common, "--seeds", "1", "--lr", "3e-4"])
    assert not (tmp_path / "val" / "gspo_g_n_s1.json").exists()


def test_modelled_gpu_budget_correction_share_and_coverage(toy, monkeypatch):
    """The modelled-GPU-seconds unit: a step's charge is the sum of its priced phases; a correction share of 0
    charges the correction phase nothing in either unit; warm-up in updates ramps per update; the localiser
    arms localise wrong responses (coverage counted against the wrong rows) and charge their prefill."""
    monkeypatch.setattr(toy_loop, "MAX_RESPONSE_TOKENS", 12)
    arms = toy_loop.default_arms()
    modelled = toy_loop.Schedule(unit="modelled_gpu_seconds")
    full = toy_loop.run(toy, arms["IBPO G=n"], 3, budget=float("inf"), n=2, batch_size=2, lr=1e-3, warmup=0,
                        max_steps=2, schedule=modelled)
    free = toy_loop.run(toy, arms["IBPO G=n"], 3, budget=float("inf"), n=2, batch_size=2, lr=1e-3, warmup=0,
                        max_steps=2, schedule=toy_loop.Schedule(unit="modelled_gpu_seconds", correction_share=0.0))
    for step in full["steps"]:
        assert step["modelled_gpu_seconds_by_phase"]["weight_sync"] > 0
    first, first_free = full["steps"][0], free["steps"][0]
    assert first["spent"] == pytest.approx(sum(first["modelled_gpu_seconds_by_phase"].values()))
    phases = first["modelled_gpu_seconds_by_phase"]
    corr = phases["correction_gen_prefill"] + phases["correction_gen_decode"]
    assert first_free["spent"] == pytest.approx(first["spent"] - corr)
    assert first_free["flops"] == pytest.approx(first["flops"] - first["flops_by_phase"]["correction_gen"])
    # warm-up in updates: step k trains at lr * k / warmup whatever it cost
    assert toy_loop.Schedule(warmup_unit="updates").lr_factor(1e30, 2, 4.0) == 0.5
    assert toy_loop.Schedule().lr_factor(1.0, 2, 4.0) == 0.25
    for name in ("first divergence", "greedy disagreements", "oracle mask", "GSPO G=n"):
        result = toy_loop.run(toy, arms[name], 3, budget=float("inf"), n=2, batch_size=2, lr=1e-3, warmup=0,
                              max_steps=1)
        step = result["steps"][0]
        wrong = step["localised/wrong_rows"]
        assert 0 <= step["localised/masked_rows"] <= wrong
        if name == "GSPO G=n":
            assert step["localised/masked_rows"] == 0
        if name == "oracle mask":
            assert step["localised/masked_rows"] == wrong
        if name in ("first divergence", "greedy disagreements") and wrong:
            assert step["flops_by_phase"]["correction_gen"] > 0  # the teacher-forced prefill is charged
            assert step["modelled_gpu_seconds_by_phase"]["correction_gen_decode"] == 0.0  # and no decode pass


def test_each_arm_chooses_its_own_rate_through_the_real_ablation(toy, tmp_path):
    """lab.analysis.lr_per_arm end to end: every rate runs through lab.analysis.ablation on the validation split with the
    protocol options passed through, and each arm's choice is read back from those runs."""
    from lab.analysis import lr_per_arm

    out = tmp_path / "lr"
    argv = ["--out", str(out), "--warm-start", f"w={toy.model_dir}", "--arms", "GSPO G=n", "greedy disagreements",
            "--lrs", "3e-4", "1e-3", "--seeds", "100", "--val-size", "4", "--jobs", "1",
            "--", "--budget-steps", "1", "--budget-unit", "modelled_gpu_seconds"]
    assert lr_per_arm.main(argv) == 0
    meta = json.loads((out / "lr_0.001" / "ws_w" / "meta.json").read_text())
    assert meta["args"]["eval_split"] == "val" and meta["args"]["budget_unit"] == "modelled_gpu_seconds"
    assert meta["args"]["lr"] == 1e-3 and meta["args"]["milestones"] == [1.0]
    chosen = json.loads((out / "selection.json").read_text())["chosen"]
    rows = lr_per_arm.per_arm_rows(out, [3e-4, 1e-3], ["w"], ["GSPO G=n", "greedy disagreements"])
    assert chosen == lr_per_arm.chosen_lrs(rows) and set(chosen) == {"GSPO G=n", "greedy disagreements"}


def test_the_budget_arm_sets_the_budget_whether_it_runs_or_not(toy, tmp_path):
    """--budget-arm: an IBPO arm at a budget of GSPO steps, GSPO not run, by default (GSPO G=n whatever --arms lists);
    an arm's own steps only when named (a head-to-head of two IBPO arms in their own steps gets more compute)."""
    common = ["--model", toy.model_dir, "--n", "2", "--batch-size", "2", "--train-size", "16", "--test-size", "4",
              "--budget-steps", "1", "--milestones", "1.0", "--seeds", "0", "--lr", "1e-3"]
    assert toy_loop.main([*common, "--out", str(tmp_path / "gspo"), "--arms", "GSPO G=n"]) == 0
    assert toy_loop.main([*common, "--out", str(tmp_path / "by_gspo"), "--arms", "IBPO G=n"]) == 0  # the default
    assert toy_loop.main([*common, "--out", str(tmp_path / "by_first"), "--arms", "IBPO G=n",
                          "--budget-arm", "IBPO G=n"]) == 0
    meta = {k: json.loads((tmp_path / k / "meta.json").read_text()) for k in ("gspo", "by_gspo", "by_first")}
    assert meta["by_gspo"]["budget_flops"] == meta["gspo"]["budget_flops"]
    assert meta["by_gspo"]["budget_arm"] == "GSPO G=n" and meta["by_first"]["budget_arm"] == "IBPO G=n"
    assert meta["by_first"]["budget_flops"] != meta["gspo"]["budget_flops"]  # IBPO's step costs more
    assert not (tmp_path / "by_gspo" / "gspo_g_n_s0.json").exists()
    with pytest.raises(SystemExit, match="--budget-arm 'IBPO G=n' there, 'GSPO G=n' now"):  # it keeps its budget arm
        toy_loop.main([*common, "--out", str(tmp_path / "by_first"), "--arms", "IBPO G=n", "--budget-arm", "GSPO G=n",
                       "--seeds", "1"])
