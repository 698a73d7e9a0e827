#!/usr/bin/env bash
# Counterfactual importance weighting and its controls on the math sets (DAPO-Math-17k train, AIME 2025 /
# HMMT Feb 2025 validation), same DAPO objective as run_counterfactual_gsm8k.sh.
set -xeuo pipefail
source "$(dirname "$0")/../common/launch_env.sh"   # a bad variable stops here, naming it
DATA_DIR=${DATA_DIR:-"${HOME}/data/ibpo"}
TRAIN_FILES=${TRAIN_FILES:-"['${DATA_DIR}/dapo_math_17k.parquet']"} \
VAL_FILES=${VAL_FILES:-"['${DATA_DIR}/aime25.parquet','${DATA_DIR}/hmmt_feb_2025.parquet']"} \
MAX_PROMPT=${MAX_PROMPT:-2048} MAX_RESPONSE=${MAX_RESPONSE:-8192} EXP_PREFIX=${EXP_PREFIX:-cf_math} \
    bash "$(dirname "$0")/run_counterfactual_gsm8k.sh" "$@"
