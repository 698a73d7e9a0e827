#!/usr/bin/env bash
# IBPO + GSPO on Qwen3-32B, the paper's main setting (App. D, §4, App. E.2): G = 8, shaping plus joint
# training on the corrections, lr 5e-7 cosine to 0.1x, 3% warmup, entropy 0, mini-batch 32, 32k context,
# vLLM rollout. Every path and size is an env var;
# extra Hydra overrides are passed through ("$@"), which is how the variant scripts build on this one.
set -xeuo pipefail

MODEL_PATH=${MODEL_PATH:-"${HOME}/models/Qwen3-32B"}
DATA_DIR=${DATA_DIR:-"${HOME}/data/ibpo"}
TRAIN_FILES=${TRAIN_FILES:-"['${DATA_DIR}/dapo_math_17k.parquet']"}
VAL_FILES=${VAL_FILES:-"['${DATA_DIR}/aime25.parquet','${DATA_DIR}/hmmt_feb_2025.parquet']"}
CKPTS_DIR=${CKPTS_DIR:-"${HOME}/ckpts/ibpo"}
PROJECT_NAME=${PROJECT_NAME:-ibpo-verl}
EXP_NAME=${EXP_NAME:-ibpo_gspo_qwen3_32b_g8}

NNODES=${NNODES:-4}
NGPUS_PER_NODE=${NGPUS_PER_NODE:-8}
GEN_TP=${GEN_TP:-4}
SP_SIZE=${SP_SIZE:-8}

N_RESP=${N_RESP:-8}                     # G
TRAIN_BATCH=${TRAIN_BATCH:-128}         # prompts per step (the paper gives only the mini-batch)
MINI_BATCH=${MINI_BATCH:-32}            # App. D
MAX_PROMPT=${MAX_PROMPT:-2048}
MAX_RESPONSE=${MAX_RESPONSE:-30720}     # 32k context
MAX_MODEL_LEN=${MAX_MODEL_LEN:-40960}   # the model's context (Qwen3-32B max_position_embeddings)
# A correction prompt shows x and two candidates, and its correction gets the full response budget, so
# each candidate is middle-truncated to what still fits the context (the trainer checks this at start:
# a rollout that runs out of context would silently shorten corrections).
MAX_CANDIDATE=${MAX_CANDIDATE:-$(( (MAX_MODEL_LEN - MAX_RESPONSE - MAX_PROMPT - 256) / 2 - 16 ))}
LR=${LR:-5e-7}
TEMPERATURE=${TEMPERATURE:-1.0}
VAL_N=${VAL_N:-64}                      # eval: 64 samples per problem
TOTAL_STEPS=${TOTAL_STEPS:-300}
LOGGER=${LOGGER:-"['console','tensorboard']"}

python3 -m recipe.ibpo.main_ibpo \
    data.train_files="${TRAIN_FILES}" \
    data.val_files="${VAL_FILES}" \
    data.train_batch_size=${TRAIN_BATCH} \
    data.max_prompt_length=${MAX_PROMPT} \
    data.max_response_length=${MAX_RESPONSE} \
    data.filter_overlong_prompts=True \
    actor_rollout_ref.model.path="${MODEL_PATH}" \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.actor.strategy=fsdp2 \
    actor_rollout_ref.actor.optim.lr=${LR} \
    actor_rollout_ref.actor.ppo_mini_batch_size=${MINI_BATCH} \
    actor_rollout_ref.actor.use_dynamic_bsz=True \
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$(((MAX_PROMPT + MAX_RESPONSE) * 2)) \
    actor_rollout_ref.actor.ulysses_sequence_parallel_size=${SP_SIZE} \
    actor_rollout_ref.actor.fsdp_config.param_offload=True \
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=True \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=${N_RESP} \
    actor_rollout_ref.rollout.temperature=${TEMPERATURE} \
    actor_rollout_ref.rollout.tensor_model_parallel_size=${GEN_TP} \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.8 \
    actor_rollout_ref.rollout.max_model_len=${MAX_MODEL_LEN} \
    actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True \
    actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=$(((MAX_PROMPT + MAX_RESPONSE) * 4)) \
    actor_rollout_ref.rollout.val_kwargs.n=${VAL_N} \
    actor_rollout_ref.rollout.val_kwargs.do_sample=True \
    actor_rollout_ref.rollout.val_kwargs.temperature=0.6 \
    actor_rollout_ref.rollout.val_kwargs.top_p=0.95 \
    actor_rollout_ref.rollout.val_kwargs.top_k=20 \
    ibpo.max_candidate_tokens=${MAX_CANDIDATE} \
    ibpo.joint_training=${JOINT:-True} \
    trainer.logger="${LOGGER}" \
    trainer.project_name="${PROJECT_NAME}" \
    trainer.experiment_name="${EXP_NAME}" \
    trainer.n_gpus_per_node=${NGPUS_PER_NODE} \
    trainer.nnodes=${NNODES} \
    trainer.default_local_dir="${CKPTS_DIR}/${EXP_NAME}" \
    trainer.total_training_steps=${TOTAL_STEPS} \
    trainer.test_freq=10 \
    trainer.save_freq=50 \
    "$@"
