"""What makes ``lab.analysis.toy_loop`` output folders comparable, in one place: the options that define a run
(:data:`RUN_DEFINING_OPTIONS`, each with its value in a ``meta.json`` written before the option existed), the warm
start's identity (:func:`sha256_of_dir`, ``meta.json``'s ``warm_start_sha256``), and the checks every reader that
pools or compares several folders runs before it reads a number:

- :func:`check_comparable`: the folders agree on every run-defining option (the evaluation split included) but the
  ones the reader deliberately varies; folders given for the same warm start hold the same warm start, folders
  given for different warm starts different ones (one warm start under two names would count as two strata);
- :func:`check_models`: a folder's runs started from the ``MODEL_DIR`` the command names;
- :func:`check_distinct`: a warm-start name or folder is not given twice;
- :func:`check_arm_names` / :func:`check_seeds`: every requested arm, baseline and seed has runs there (a misspelt
  name would otherwise print a table of dashes or a "no paired seed" message that names no cause), and the
  baseline is not among the arms compared with it.

Light on purpose (no torch): the readers import it without loading a model.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Collection, Iterable, Sequence

DEFAULT_COST_MODEL = "roofline:H100-SXM"  # every modelled-GPU-second result before docs/evidence.md 2f used it
# the milestones of every run before ``--milestones`` existed (lab.analysis.toy_loop's MILESTONES then)
MILESTONES_BEFORE_THE_OPTION = [0.25, 0.5, 0.75, 1.0]

RUN_DEFINING_OPTIONS = {  # option -> its value in a meta.json written before the option existed
    "task": "addition", "n": 4, "batch_size": 8, "lr": 3e-4, "warmup_steps": 5, "budget_steps": 20,
    "budget_flops": None, "train_size": 1024, "test_size": 512, "max_steps": None, "eval_split": "test",
    "budget_unit": "flops", "correction_cost_share": 1.0, "warmup_unit": "budget", "budget_arm": None,
    "cost_model": DEFAULT_COST_MODEL, "milestones": MILESTONES_BEFORE_THE_OPTION}

SPLIT_NAMES = {"test": "test", "val": "validation"}


def sha256_of_dir(path: str | Path) -> str:
    """sha256 over the sorted relative paths and bytes of every file under ``path`` (the warm start's identity)."""
    digest = hashlib.sha256()
    root = Path(path)
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(root)).encode() + b"\0")
        digest.update(file.read_bytes())
    return digest.hexdigest()


def option_flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def recorded_options(meta: dict) -> dict:
    """The run-defining options of a folder's ``meta.json`` (its ``args``), each one it does not record at the value
    it had before the option existed; ``budget_arm`` is the arm whose step set the budget (:func:`budget_arm`)."""
    args = meta.get("args") if isinstance(meta.get("args"), dict) else {}
    out = {key: args.get(key, default) for key, default in RUN_DEFINING_OPTIONS.items()}
    out["budget_arm"] = budget_arm(meta)
    return out


def budget_arm(meta: dict) -> str | None:
    """The arm whose cost per step set a folder's budget: ``meta.json``'s ``budget_arm``; for a folder written before
    that was recorded, its ``--budget-arm``, else the first of its ``--arms``; ``None`` when it records none."""
    args = meta.get("args") if isinstance(meta.get("args"), dict) else {}
    return meta.get("budget_arm") or args.get("budget_arm") or (args.get("arms") or [None])[0]


def eval_split(meta: dict) -> str:
    """The split a results folder's evaluations scored (``lab.analysis.toy_loop --eval-split``; ``test`` for a folder
    recorded before the option existed)."""
    return recorded_options(meta)["eval_split"]


def same_value(a, b) -> bool:
    """Equal as recorded values: numbers by value (JSON turns 20 into 20 and 2e1 into 20.0), lists item by item."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return a == b


def check_comparable(folders: Sequence[tuple[str, Path, dict]], varies: Collection[str] = (),
                     reader: str = "", per_task: Collection[str] = ()) -> None:
    """``folders``: (warm-start name, folder, its ``meta.json``) of every folder a reader pools or compares.
    Stops (``ValueError`` naming the two folders, the option and both values) unless

    - every run-defining option (:data:`RUN_DEFINING_OPTIONS`, the evaluation split and the budget arm among them)
      but those in ``varies`` is the same in every folder: runs of two protocols would be one table;
    - folders of the same warm-start name record the same ``warm_start_sha256`` (and model), folders of different
      names different ones: one warm start given twice would count as two independent strata.

    ``per_task``: options that may differ between folders of different tasks (``task`` itself and the rate each
    task's ``lab.analysis.lr_selection`` chose, for a table that pools warm starts of several tasks); folders of the
    same task still agree on them. A folder that records no sha (a hand-made one) is not compared on it; a budget
    arm is compared only where both folders record it."""
    what = f"{reader}: " if reader else ""
    if not folders:
        return
    first = (folders[0][1], recorded_options(folders[0][2]))
    first_of_task: dict[str, tuple[Path, dict]] = {}
    allowed = "".join(f", {option_flag(k)} across tasks" for k in per_task if k != "task")
    for _, folder, meta in folders:
        here = recorded_options(meta)
        first_of_task.setdefault(here["task"], (folder, here))
        for key in RUN_DEFINING_OPTIONS:
            ref_folder, ref = first_of_task[here["task"]] if key in per_task else first
            if key in varies or (key == "budget_arm" and None in (ref[key], here[key])):
                continue
            if not same_value(ref[key], here[key]):
                raise ValueError(f"{what}{ref_folder} and {folder} were run with different {option_flag(key)} "
                                 f"({ref[key]!r} and {here[key]!r}): their runs are not one protocol; compare "
                                 "folders that differ only in " + (", ".join(map(option_flag, varies)) or
                                                                   "their warm start") + allowed)
    by_sha: dict[str, tuple[str, Path]] = {}
    by_name: dict[str, tuple[str, Path]] = {}
    for name, folder, meta in folders:
        sha = meta.get("warm_start_sha256")
        if sha is None:
            continue
        if name in by_name and by_name[name][0] != sha:
            other_sha, other = by_name[name]
            raise ValueError(f"{what}warm start {name!r}: {other} holds runs of warm start {other_sha[:12]}, {folder} "
                             f"of {sha[:12]} (meta.json's warm_start_sha256): not the same warm start")
        if sha in by_sha and by_sha[sha][0] != name:
            other_name, other = by_sha[sha]
            raise ValueError(f"{what}warm starts {other_name!r} ({other}) and {name!r} ({folder}) are the same warm "
                             f"start (sha256 {sha[:12]}): one warm start would be counted as two")
        by_name.setdefault(name, (sha, folder))
        by_sha.setdefault(sha, (name, folder))


def check_models(folders: Iterable[tuple[Path, dict, str | Path]], option: str = "--warm-start") -> None:
    """(folder, its ``meta.json``, the ``MODEL_DIR`` the command names for it): the folder's runs started from that
    model (its ``warm_start_sha256`` is the model's :func:`sha256_of_dir`), or a ``ValueError`` naming both."""
    hashes: dict[str, str] = {}
    for folder, meta, model in folders:
        recorded = meta.get("warm_start_sha256")
        if recorded is None:
            continue
        key = str(Path(model).resolve())
        if key not in hashes:
            hashes[key] = sha256_of_dir(model)
        if hashes[key] != recorded:
            raise ValueError(f"{option} {model}: {folder}'s runs started from warm start {recorded[:12]} "
                             f"(meta.json's warm_start_sha256, model {recorded_model(meta)}), not this model "
                             f"({hashes[key][:12]})")


def recorded_model(meta: dict) -> str:
    """The warm-start path a folder's command named (``--model`` or ``--assets``), or ``unrecorded``."""
    args = meta.get("args") if isinstance(meta.get("args"), dict) else {}
    return str(args.get("model") or args.get("assets") or "unrecorded")


def check_distinct(option: str, names: Sequence[str], folders: Sequence[str | Path] = ()) -> None:
    """A name (or folder, compared resolved) given twice to ``option`` is a ``ValueError``: every seed of it would
    count twice, and the intervals would narrow."""
    for values, kind in ((list(names), "name"), ([str(Path(f).resolve()) for f in folders], "folder")):
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise ValueError(f"{option}: the {kind} {twice[0]!r} is given twice (its runs would be counted twice)")


def arms_present(loaded: dict) -> list[str]:
    """The arms with runs in ``loaded`` (``{warm start: (meta, {arm: {seed: result}})}``)."""
    return sorted({a for _, res in loaded.values() for a, runs in res.items() if runs})


def check_arm_names(loaded: dict, baseline: str, arms: list[str] | None, baseline_option: str = "--baseline",
                    arms_option: str = "--arms") -> None:
    """The baseline and every requested arm have runs in at least one warm start's folder, and the baseline is not
    among the arms compared with it; otherwise a ``ValueError`` naming the option and the arms there are (a
    misspelt name would otherwise print a table of dashes; the baseline as its own arm a Δ of 0 with no spread)."""
    present = arms_present(loaded)
    if baseline not in present:
        raise ValueError(f"{baseline_option} {baseline!r}: no run of that arm in the warm starts "
                         f"{sorted(loaded)}; the arms are {present}")
    if baseline in (arms or []):
        raise ValueError(f"{arms_option}: {baseline!r} is the baseline ({baseline_option}); an arm compared with "
                         "itself is not a result. List the other arms")
    unknown = [a for a in arms or [] if a not in present]
    if unknown:
        raise ValueError(f"{arms_option}: no run of {unknown} in the warm starts {sorted(loaded)}; the arms are {present}")


def check_seeds(loaded: dict, seeds: Iterable[int] | None, option: str = "--seeds") -> None:
    """Every requested seed has a run in some folder of ``loaded``, or a ``ValueError`` naming the missing ones and
    the seeds there are."""
    if seeds is None:
        return
    present = sorted({s for _, res in loaded.values() for runs in res.values() for s in runs})
    missing = sorted(set(seeds) - set(present))
    if missing:
        raise ValueError(f"{option}: no run of seed(s) {missing} in the warm starts {sorted(loaded)}; the seeds are "
                         f"{present}")
