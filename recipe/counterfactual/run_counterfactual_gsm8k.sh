#!/usr/bin/env bash
# Counterfactual importance weighting (docs/method_counterfactual.md) on a DAPO objective (token-mean, clip-higher 0.28),
# GSM8K-style data, and its three controls. MODE=counterfactual|inverted|random|vanilla (default: all four,
# one run each). Prepare the data first: python -m data_prep.gsm8k --input RAW --output $DATA_DIR/gsm8k_train.parquet
set -xeuo pipefail
source "$(dirname "$0")/../common/launch_env.sh"   # a bad variable stops here, naming it

MODEL_PATH=${MODEL_PATH:-"${HOME}/models/Qwen2.5-1.5B-Instruct"}
DATA_DIR=${DATA_DIR:-"${HOME}/data/ibpo"}
TRAIN_FILES=${TRAIN_FILES:-"['${DATA_DIR}/gsm8k_train.parquet']"}
VAL_FILES=${VAL_FILES:-"['${DATA_DIR}/gsm8k_test.parquet']"}
NNODES=${NNODES:-1}
NGPUS_PER_NODE=${NGPUS_PER_NODE:-8}
N_RESP=${N_RESP:-8}
TRAIN_BATCH=${TRAIN_BATCH:-128}
MINI_BATCH=${MINI_BATCH:-32}
MAX_PROMPT=${MAX_PROMPT:-512}
MAX_RESPONSE=${MAX_RESPONSE:-1024}
TOTAL_STEPS=${TOTAL_STEPS:-200}
EXP_PREFIX=${EXP_PREFIX:-cf_gsm8k}
MODES=${MODES:-counterfactual inverted random vanilla}
env_int NNODES NGPUS_PER_NODE N_RESP TRAIN_BATCH MINI_BATCH MAX_PROMPT MAX_RESPONSE TOTAL_STEPS
env_words_in MODES counterfactual inverted random vanilla   # every mode before the first run

for MODE in ${MODES}; do
    python3 -m recipe.main method=counterfactual \
        data.train_files="${TRAIN_FILES}" \
        data.val_files="${VAL_FILES}" \
        data.train_batch_size=${TRAIN_BATCH} \
        data.max_prompt_length=${MAX_PROMPT} \
        data.max_response_length=${MAX_RESPONSE} \
        actor_rollout_ref.model.path="${MODEL_PATH}" \
        actor_rollout_ref.actor.strategy=fsdp2 \
        actor_rollout_ref.actor.ppo_mini_batch_size=${MINI_BATCH} \
        actor_rollout_ref.actor.use_dynamic_bsz=True \
        actor_rollout_ref.rollout.name=vllm \
        actor_rollout_ref.rollout.n=${N_RESP} \
        actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True \
        counterfactual.mode=${MODE} \
        trainer.experiment_name=${EXP_PREFIX}_${MODE} \
        trainer.n_gpus_per_node=${NGPUS_PER_NODE} \
        trainer.nnodes=${NNODES} \
        trainer.total_training_steps=${TOTAL_STEPS} \
        trainer.test_freq=10 \
        "$@"
done
