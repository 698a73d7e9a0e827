#!/usr/bin/env bash
# Table 3 ablation "k = 1": self-correction with no reference (the prompt shows only the wrong response).
set -xeuo pipefail
EXP_NAME=${EXP_NAME:-ibpo_k1_selfcorrect} bash "$(dirname "$0")/run_ibpo_qwen3_32b.sh" ibpo.num_references=0 "$@"
