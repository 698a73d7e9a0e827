#!/usr/bin/env bash
# Baseline: GSPO with G = 64 on Qwen3-32B, compute-matched to IBPO G = 8 (App. B, Table 2).
# Same loop with the correction pass off (Δ = 0).
set -xeuo pipefail
EXP_NAME=${EXP_NAME:-gspo_qwen3_32b_g64} N_RESP=${N_RESP:-64} \
    JOINT=False bash "$(dirname "$0")/run_ibpo_qwen3_32b.sh" ibpo.enable=False "$@"
