#!/usr/bin/env bash
# IBPO + GSPO on Qwen3-Next-80B-A3B-Thinking at 256k context (§4): thinking candidates are shown without
# their <think> block in correction prompts. Everything else as run_ibpo_qwen3_32b.sh (UPDATE_READING included).
# Validation sampling: the Thinking model's own generation config (temperature 0.6, top-p 0.95, top-k 20; Qwen's
# model card for Qwen3-Next-80B-A3B-Thinking). The paper's §5 gives temperature 0.7, top-p 0.8, top-k 20 for
# "Qwen3-Next-80B-A3B-Instruct" (the Instruct model's settings) while Table 1 names the Thinking model; to use
# the paper's text: VAL_TEMPERATURE=0.7 VAL_TOP_P=0.8. The start check prints the values against
# MODEL_PATH/generation_config.json.
# Candidates (CANDIDATES, as run_ibpo_qwen3_32b.sh, and for the same evidence): whole (default) extends the
# context with YaRN (factor 4 over 262,144: 1,048,576 tokens, Qwen's model card), for the rollout and the actor
# alike, so each thinking-stripped candidate is shown whole; cut keeps 2,928 tokens of each in the native
# 262,144-token context (about 1% of a full-length answer).
# Compute budget: the 32B default is a 32B number, so this script runs TOTAL_STEPS steps unless COMPUTE_BUDGET
# is given (then every arm of the comparison, e.g. N_RESP=64 ... ibpo.enable=False, gets the same one).
set -xeuo pipefail
source "$(dirname "$0")/../common/launch_env.sh"   # a bad variable stops here, naming it
# whole: YaRN over the model's native 262,144 tokens (cut runs the native context, no rope scaling)
if [ "${CANDIDATES:-whole}" = "whole" ]; then DEFAULT_MODEL_LEN=1048576; export ROPE_ORIGINAL=${ROPE_ORIGINAL:-262144}
else DEFAULT_MODEL_LEN=262144; fi
MODEL_PATH=${MODEL_PATH:-"${HOME}/models/Qwen3-Next-80B-A3B-Thinking"} \
EXP_NAME=${EXP_NAME:-ibpo_gspo_qwen3_next_80b} \
MAX_RESPONSE=${MAX_RESPONSE:-253952} MAX_MODEL_LEN=${MAX_MODEL_LEN:-${DEFAULT_MODEL_LEN}} \
GEN_TP=${GEN_TP:-8} SP_SIZE=${SP_SIZE:-8} \
COMPUTE_BUDGET=${COMPUTE_BUDGET:-0} ARM_STEPS=${ARM_STEPS:-300} \
VAL_TEMPERATURE=${VAL_TEMPERATURE:-0.6} VAL_TOP_P=${VAL_TOP_P:-0.95} VAL_TOP_K=${VAL_TOP_K:-20} \
    bash "$(dirname "$0")/run_ibpo_qwen3_32b.sh" \
    ibpo.candidate_view=strip_thinking \
    "$@"
