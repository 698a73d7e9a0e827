#!/usr/bin/env bash
# Table 4: λ ∈ {0.2, 0.4, 0.6, 0.8, 1.0} (binary variant, β = 0.5, so λβ <= 0.5 < 1). One run per value.
# Built on run_ibpo_qwen3_32b.sh: the same compute budget (COMPUTE_BUDGET, BUDGET_UNIT), whole candidates
# (CANDIDATES) and reading of Alg. 1's "one update per iteration" (UPDATE_READING: minibatch, 4 updates of
# 32 prompts per step, by default; one_update for one update per iteration).
set -xeuo pipefail
source "$(dirname "$0")/../common/launch_env.sh"   # a bad variable stops here, naming it
env_unused EXP_NAME "each run is named ibpo_lambda_<value>"
env_unused LAM "LAMBDAS lists the values"
LAMBDAS=${LAMBDAS:-0.2 0.4 0.6 0.8 1.0}
env_numbers LAMBDAS  # every value before the first run
for LAMBDA in ${LAMBDAS}; do
    EXP_NAME=ibpo_lambda_${LAMBDA} LAM=${LAMBDA} bash "$(dirname "$0")/run_ibpo_qwen3_32b.sh" "$@"
done
