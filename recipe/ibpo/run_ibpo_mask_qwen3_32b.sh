#!/usr/bin/env bash
# IBPO-mask: gradient only on the tokens the correction modified (Eq. 7/17), Δ = β.
set -xeuo pipefail
EXP_NAME=${EXP_NAME:-ibpo_mask_qwen3_32b} bash "$(dirname "$0")/run_ibpo_qwen3_32b.sh" ibpo.variant=mask "$@"
