#!/usr/bin/env bash
# Baseline for run_ibpo_qwen3_1p7b_1gpu.sh: GSPO through the same loop with the correction pass off (Δ = 0)
# and no joint training, at the SAME compute budget (COMPUTE_BUDGET / BUDGET_UNIT of that script), so the pair
# is compared at equal compute, as the paper compares (App. B). Default G = 8: without corrections a step costs
# about a third of IBPO's, so the budget stops it after ~550 steps (ARM_STEPS ~1.2x that: the cosine length).
# N_RESP=64 is the paper's G = 64 baseline (~70 steps: set ARM_STEPS=85). What differs from the paper's
# settings, and why, and its reading of "one update per iteration" (UPDATE_READING): the header of
# run_ibpo_qwen3_1p7b_1gpu.sh; its start-up options (FAST_START, ENFORCE_EAGER) apply here too.
set -xeuo pipefail
source "$(dirname "$0")/../common/launch_env.sh"   # a bad variable stops here, naming it
env_unused JOINT "the GSPO baseline trains no corrections"
N_RESP=${N_RESP:-8}
if [ "${N_RESP}" = "64" ]; then DEFAULT_ARM_STEPS=85; else DEFAULT_ARM_STEPS=660; fi
EXP_NAME=${EXP_NAME:-gspo_qwen3_1p7b_g${N_RESP}_1gpu} N_RESP=${N_RESP} ARM_STEPS=${ARM_STEPS:-${DEFAULT_ARM_STEPS}} \
    JOINT=False bash "$(dirname "$0")/run_ibpo_qwen3_1p7b_1gpu.sh" ibpo.enable=False "$@"
