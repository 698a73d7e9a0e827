#!/usr/bin/env bash
# IBPO-ratio: Δ = |U|/T, the share of tokens the correction left unmodified (Eq. 16). λΔ < 1 needs λ < 1.
set -xeuo pipefail
EXP_NAME=${EXP_NAME:-ibpo_ratio_qwen3_32b} bash "$(dirname "$0")/run_ibpo_qwen3_32b.sh" ibpo.variant=ratio "$@"
