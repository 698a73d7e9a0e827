#!/usr/bin/env bash
# Table 3 ablation "shaping only": IBPO without joint training on the correction samples (App. E.2 (C));
# the main script run_ibpo_qwen3_32b.sh is the full method with joint training.
# Built on run_ibpo_qwen3_32b.sh: the same compute budget (COMPUTE_BUDGET, BUDGET_UNIT), whole candidates
# (CANDIDATES) and reading of Alg. 1's "one update per iteration" (UPDATE_READING: minibatch, 4 updates of
# 32 prompts per step, by default; one_update for one update per iteration).
set -xeuo pipefail
source "$(dirname "$0")/../common/launch_env.sh"   # a bad variable stops here, naming it
env_unused JOINT "the ablation trains without the corrections (JOINT=False)"
EXP_NAME=${EXP_NAME:-ibpo_shaping_only} JOINT=False bash "$(dirname "$0")/run_ibpo_qwen3_32b.sh" "$@"
