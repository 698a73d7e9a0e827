#!/usr/bin/env bash
# IBPO-ratio: Δ = |U|/T, the share of tokens the correction left unmodified (Eq. 16). λΔ < 1 needs λ < 1.
# Built on run_ibpo_qwen3_32b.sh: the same compute budget (COMPUTE_BUDGET, BUDGET_UNIT), whole candidates
# (CANDIDATES) and reading of Alg. 1's "one update per iteration" (UPDATE_READING: minibatch, 4 updates of
# 32 prompts per step, by default; one_update for one update per iteration).
set -xeuo pipefail
source "$(dirname "$0")/../common/launch_env.sh"   # a bad variable stops here, naming it
env_unused VARIANT "this script runs VARIANT=ratio"
EXP_NAME=${EXP_NAME:-ibpo_ratio_qwen3_32b} VARIANT=ratio bash "$(dirname "$0")/run_ibpo_qwen3_32b.sh" "$@"
