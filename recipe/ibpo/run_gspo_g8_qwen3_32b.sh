#!/usr/bin/env bash
# Table 1 baseline: GSPO with G = 8 on Qwen3-32B (the same samples per prompt as IBPO), at the same compute budget
# as IBPO G = 8: COMPUTE_BUDGET / BUDGET_UNIT of run_ibpo_qwen3_32b.sh, which this runs with the correction pass
# off (Δ = 0) and no joint training. Without corrections a step costs about half of IBPO's, so the budget
# stops it after ~580 steps (ARM_STEPS: the cosine schedule's length, ~1.2x that).
# UPDATE_READING (minibatch | one_update): as in run_ibpo_qwen3_32b.sh.
set -xeuo pipefail
source "$(dirname "$0")/../common/launch_env.sh"   # a bad variable stops here, naming it
env_unused JOINT "the GSPO baseline trains no corrections"
EXP_NAME=${EXP_NAME:-gspo_qwen3_32b_g8} N_RESP=${N_RESP:-8} ARM_STEPS=${ARM_STEPS:-700} \
    JOINT=False bash "$(dirname "$0")/run_ibpo_qwen3_32b.sh" ibpo.enable=False "$@"
