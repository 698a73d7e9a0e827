#!/usr/bin/env bash
# Table 5: rewrite threshold α ∈ {0.5, 0.55, 0.6, 0.65, 0.7, 0.8} and the adaptive μ_d + 2σ_d threshold.
# Built on run_ibpo_qwen3_32b.sh: the same compute budget (COMPUTE_BUDGET, BUDGET_UNIT), whole candidates
# (CANDIDATES) and reading of Alg. 1's "one update per iteration" (UPDATE_READING: minibatch, 4 updates of
# 32 prompts per step, by default; one_update for one update per iteration).
set -xeuo pipefail
source "$(dirname "$0")/../common/launch_env.sh"   # a bad variable stops here, naming it
env_unused EXP_NAME "each run is named ibpo_alpha_<value>"
ALPHAS=${ALPHAS:-0.5 0.55 0.6 0.65 0.7 0.8}
env_numbers ALPHAS   # every value before the first run
for ALPHA in ${ALPHAS}; do
    EXP_NAME=ibpo_alpha_${ALPHA} bash "$(dirname "$0")/run_ibpo_qwen3_32b.sh" ibpo.alpha=${ALPHA} "$@"
done
EXP_NAME=ibpo_alpha_adaptive bash "$(dirname "$0")/run_ibpo_qwen3_32b.sh" ibpo.alpha_mode=adaptive "$@"
