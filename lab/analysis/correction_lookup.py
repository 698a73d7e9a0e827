"""What lookup speculation and the length bound would do to the correction pass, on real and synthetic
corrections (docs/correction_pass.md, "CPU proxy of lookup decoding").

Real corrections come from a training run's dump (``trainer.rollout_data_dir`` makes the trainer write
``ibpo_corrections/step_<n>.jsonl``: correction prompt ids, correction ids, target ids, right/rewrite/shaped).
Synthetic corrections are built as a real correction is: the target response (Zipf text of L tokens, its
re-tokenised copy sits in the correction prompt) with local edits at the rate and run length measured on
the real ones (:func:`edit_profile`), the rest of the correction prompt from the project's own
``plan_corrections``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
from rapidfuzz.distance import Levenshtein

from ibpo.correction_lengths import bounded_lengths
from ibpo.lookup_decoding import LookupStats, NgramParams, batch_decode_steps, simulate_lookup


@dataclass
class CorrectionRecord:
    """One generated correction (a line of the trainer's dump)."""

    prompt_ids: list[int]
    correction_ids: list[int]
    target_ids: list[int]
    correct: bool
    shaped: bool
    step: int = 0


def load_dump(directory: str | Path) -> list[CorrectionRecord]:
    """Every correction of ``<directory>/ibpo_corrections/step_*.jsonl`` (or of ``directory`` itself)."""
    root = Path(directory)
    folder = root / "ibpo_corrections" if (root / "ibpo_corrections").is_dir() else root
    files = sorted(folder.glob("step_*.jsonl"))
    if not files:
        raise FileNotFoundError(f"no step_*.jsonl correction dumps under {folder} (set trainer.rollout_data_dir)")
    records = []
    for path in files:
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            try:
                row = json.loads(line)
                records.append(CorrectionRecord(row["prompt_ids"], row["correction_ids"], row["target_ids"],
                                                bool(row["correct"]), bool(row["shaped"]), int(row["step"])))
            except (KeyError, json.JSONDecodeError) as exc:
                raise ValueError(f"{path}:{lineno}: not a correction record ({exc})") from exc
    return records


# ---------------------------------------------------------------------------------------------- edit profile
@dataclass(frozen=True)
class EditProfile:
    """How corrections differ from their targets: the share of target tokens kept (an optimal alignment's
    equal positions, as ``ibpo/unmodified_ratio``) and the mean length, in target tokens, of a maximal
    run of edited target tokens; ``insert_per_edited``: correction tokens written per edited target token."""

    kept_fraction: float
    mean_edit_run: float
    insert_per_edited: float
    corrections: int


def edit_profile(pairs: Iterable[tuple[Sequence[int], Sequence[int]]]) -> EditProfile:
    """Edit profile of (target, correction) pairs (pooled over tokens)."""
    kept = total = runs = edited = written = n = 0
    for target, correction in pairs:
        n += 1
        mask = np.zeros(len(target), dtype=bool)
        for tag, i1, i2, j1, j2 in Levenshtein.opcodes(list(target), list(correction)):
            if tag == "equal":
                mask[i1:i2] = True
            else:
                written += j2 - j1
        kept += int(mask.sum())
        total += len(target)
        edited_here = ~mask
        edited += int(edited_here.sum())
        runs += int(np.sum(edited_here[1:] & ~edited_here[:-1]) + (edited_here[:1].sum() if len(mask) else 0))
    return EditProfile(kept / total if total else 0.0, edited / runs if runs else 0.0,
                       written / edited if edited else 0.0, n)


def edit_like(target: Sequence[int], profile: EditProfile, fresh: Sequence[int], rng: np.random.Generator) -> list[int]:
    """A correction of ``target`` with the profile's edits: alternating kept runs and edited runs
    (geometric lengths with the profile's means, so the kept share matches), each edited run replaced by
    ``insert_per_edited`` times as many tokens drawn in order from ``fresh`` (new text)."""
    keep = profile.kept_fraction
    if keep >= 1.0:
        return list(target)
    edit_mean = max(profile.mean_edit_run, 1.0)
    keep_mean = edit_mean * keep / max(1.0 - keep, 1e-9)
    out: list[int] = []
    i, f = 0, 0
    editing = rng.random() < (1.0 - keep)
    while i < len(target):
        mean = edit_mean if editing else max(keep_mean, 1.0)
        run = int(rng.geometric(1.0 / mean))
        if editing:
            count = int(round(run * profile.insert_per_edited))
            out.extend(fresh[f: f + count])
            f += count
        else:
            out.extend(target[i: i + run])
        i += run
        editing = not editing
    return out


# ---------------------------------------------------------------------------------------------- proxies
def replay(prompts: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]], params: NgramParams) -> dict:
    """Lookup statistics of a set of corrections decoded as one batch."""
    total = LookupStats()
    for prompt, output in zip(prompts, outputs):
        total = total + simulate_lookup(prompt, output, params)
    plain = batch_decode_steps([max(len(o) - 1, 0) for o in outputs])
    spec = batch_decode_steps(total.per_request_steps)
    return {"corrections": total.requests, "mean_tokens": total.output_tokens / max(total.requests, 1),
            "accepted_per_draft_step": total.accepted_per_draft_step,
            "acceptance_rate": total.acceptance_rate, "tokens_per_decode_step": total.tokens_per_decode_step,
            "decode_step_reduction": total.decode_step_reduction,
            "batch_decode_step_reduction": 1.0 - spec / plain if plain else 0.0}


def bound_cuts(records: Sequence[CorrectionRecord], factors: Sequence[float], closing_tokens: int,
               response_length: int) -> list[dict]:
    """What max_tokens = ⌈c·|y|⌉ + closing would have cut, per c: the share of correction tokens beyond the
    bound, and the corrections (all, right, shaped) longer than their bound."""
    lengths = np.array([len(r.correction_ids) for r in records])
    targets = [len(r.target_ids) for r in records]
    right = np.array([r.correct for r in records])
    shaped = np.array([r.shaped for r in records])
    rows = []
    for c in factors:
        bounds = bounded_lengths(targets, c, closing_tokens, response_length)
        cut = lengths > bounds
        rows.append({"factor": c, "closing_tokens": closing_tokens,
                     "tokens_cut_frac": float(np.maximum(lengths - bounds, 0).sum() / max(lengths.sum(), 1)),
                     "corrections_cut": int(cut.sum()), "right_cut": int((cut & right).sum()),
                     "shaped_cut": int((cut & shaped).sum()), "corrections": len(records),
                     "right": int(right.sum()), "shaped": int(shaped.sum())})
    return rows


def synthetic_corrections(tokenizer, length: int, profile: EditProfile, num_prompts: int, group_size: int,
                          num_correct: int, layout: dict, seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    """Correction prompts (chat-templated ids, the project's ``plan_corrections``) and corrections built as
    edits of each target's ids, at response length ``length``."""
    from lab.analysis.correction_workload import (
        build_workload, chat_prompt_ids, correction_requests, zipf_text_ids)

    workload = build_workload(tokenizer, num_prompts, group_size, num_correct, length, seed=seed)
    requests = correction_requests(tokenizer, workload, layout, max_candidate_tokens=length, seed=seed)
    rng = np.random.default_rng([seed, length])
    prompts, outputs = [], []
    for req in requests:
        prompts.append(chat_prompt_ids(tokenizer, req.messages))
        target = workload.response_ids[req.target_row]
        fresh = zipf_text_ids(tokenizer, length, rng)
        outputs.append(edit_like(target, profile, fresh, rng))
    return prompts, outputs


__all__ = ["CorrectionRecord", "EditProfile", "bound_cuts", "edit_like", "edit_profile", "load_dump", "replay",
           "synthetic_corrections"]
