#!/usr/bin/env bash
# Baseline for run_ibpo_qwen3_1p7b_1gpu.sh: GSPO through the same loop with the correction pass off (Δ = 0)
# and no joint training. Default G = 8 (same samples per prompt). The paper's compute-matched baseline
# uses G = 64 (N_RESP=64), at about 8x the generation cost of this one.
set -xeuo pipefail
EXP_NAME=${EXP_NAME:-gspo_qwen3_1p7b_g${N_RESP:-8}_1gpu} \
    JOINT=False bash "$(dirname "$0")/run_ibpo_qwen3_1p7b_1gpu.sh" ibpo.enable=False "$@"
