#!/usr/bin/env bash
# IBPO + GSPO on Qwen3-1.7B with ONE 80 GB GPU (H100/A100-80G): DAPO-Math-17k training, AIME 2025
# validation. The paper's recipe (G = 8, shaping + joint training, GSPO carrier) at sizes one GPU holds:
# 8k responses in a 16k context, 32 prompts per step, the optimizer state offloaded to CPU, vLLM taking
# 45% of the GPU (it sleeps while the actor trains). Every path and size is an env var; extra Hydra
# overrides are appended ("$@"); run_gspo_qwen3_1p7b_1gpu.sh is the baseline through the same loop.
#   MODEL_PATH=~/models/Qwen3-1.7B DATA_DIR=~/data/ibpo bash recipe/ibpo/run_ibpo_qwen3_1p7b_1gpu.sh
set -xeuo pipefail

MODEL_PATH=${MODEL_PATH:-"${HOME}/models/Qwen3-1.7B"}
DATA_DIR=${DATA_DIR:-"${HOME}/data/ibpo"}
TRAIN_FILES=${TRAIN_FILES:-"['${DATA_DIR}/dapo_math_17k.parquet']"}
VAL_FILES=${VAL_FILES:-"['${DATA_DIR}/aime25.parquet']"}
CKPTS_DIR=${CKPTS_DIR:-"${HOME}/ckpts/ibpo"}
PROJECT_NAME=${PROJECT_NAME:-ibpo-verl}
EXP_NAME=${EXP_NAME:-ibpo_gspo_qwen3_1p7b_g8_1gpu}

N_RESP=${N_RESP:-8}                     # G
TRAIN_BATCH=${TRAIN_BATCH:-32}          # prompts per step
MINI_BATCH=${MINI_BATCH:-16}            # two updates per step
MAX_PROMPT=${MAX_PROMPT:-1024}
MAX_RESPONSE=${MAX_RESPONSE:-8192}
MAX_MODEL_LEN=${MAX_MODEL_LEN:-16384}   # vLLM context (Qwen3-1.7B allows 40960)
# Correction prompts show x and two candidates: each candidate is middle-truncated so that the prompt
# plus a full response fits MAX_MODEL_LEN (the trainer checks this at start).
MAX_CANDIDATE=${MAX_CANDIDATE:-$(( (MAX_MODEL_LEN - MAX_RESPONSE - MAX_PROMPT - 256) / 2 - 16 ))}
LR=${LR:-1e-6}
TEMPERATURE=${TEMPERATURE:-1.0}
GPU_MEM=${GPU_MEM:-0.45}
VAL_N=${VAL_N:-16}                      # AIME 2025: 30 problems x 16 samples
TOTAL_STEPS=${TOTAL_STEPS:-200}
LOGGER=${LOGGER:-"['console','file']"}

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
    actor_rollout_ref.actor.fsdp_config.param_offload=False \
    actor_rollout_ref.actor.fsdp_config.optimizer_offload=True \
    actor_rollout_ref.actor.checkpoint.save_contents="['model','optimizer','extra','hf_model']" \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=${N_RESP} \
    actor_rollout_ref.rollout.temperature=${TEMPERATURE} \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization=${GPU_MEM} \
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
    trainer.n_gpus_per_node=1 \
    trainer.nnodes=1 \
    trainer.default_local_dir="${CKPTS_DIR}/${EXP_NAME}" \
    trainer.total_training_steps=${TOTAL_STEPS} \
    trainer.test_freq=10 \
    trainer.save_freq=50 \
    "$@"
