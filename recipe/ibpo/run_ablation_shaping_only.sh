#!/usr/bin/env bash
# Table 3 ablation "shaping only": IBPO without joint training on the correction samples (App. E.2 (C));
# the main script run_ibpo_qwen3_32b.sh is the full method with joint training.
set -xeuo pipefail
EXP_NAME=${EXP_NAME:-ibpo_shaping_only} JOINT=False bash "$(dirname "$0")/run_ibpo_qwen3_32b.sh" "$@"
