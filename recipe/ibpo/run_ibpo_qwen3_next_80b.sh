#!/usr/bin/env bash
# IBPO + GSPO on Qwen3-Next-80B-A3B-Thinking at 256k context (§4): thinking candidates are shown without
# their <think> block in correction prompts; eval sampling temperature 0.7, top-p 0.8, top-k 20.
set -xeuo pipefail
MODEL_PATH=${MODEL_PATH:-"${HOME}/models/Qwen3-Next-80B-A3B-Thinking"} \
EXP_NAME=${EXP_NAME:-ibpo_gspo_qwen3_next_80b} \
MAX_RESPONSE=${MAX_RESPONSE:-253952} MAX_MODEL_LEN=${MAX_MODEL_LEN:-262144} \
GEN_TP=${GEN_TP:-8} SP_SIZE=${SP_SIZE:-8} \
    bash "$(dirname "$0")/run_ibpo_qwen3_32b.sh" \
    ibpo.candidate_view=strip_thinking \
    actor_rollout_ref.rollout.val_kwargs.temperature=0.7 \
    actor_rollout_ref.rollout.val_kwargs.top_p=0.8 \
    actor_rollout_ref.rollout.val_kwargs.top_k=20 \
    "$@"
