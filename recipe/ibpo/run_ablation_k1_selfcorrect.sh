#!/usr/bin/env bash
# Table 3 ablation "k = 1": self-correction with no reference (the prompt shows only the wrong response).
# Built on run_ibpo_qwen3_32b.sh: the same compute budget (COMPUTE_BUDGET, BUDGET_UNIT), whole candidates
# (CANDIDATES) and reading of Alg. 1's "one update per iteration" (UPDATE_READING: minibatch, 4 updates of
# 32 prompts per step, by default; one_update for one update per iteration).
set -xeuo pipefail
source "$(dirname "$0")/../common/launch_env.sh"   # a bad variable stops here, naming it
EXP_NAME=${EXP_NAME:-ibpo_k1_selfcorrect} bash "$(dirname "$0")/run_ibpo_qwen3_32b.sh" ibpo.num_references=0 "$@"
