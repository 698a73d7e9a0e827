#!/usr/bin/env bash
# IBPO + GSPO on Qwen3-32B, the paper's main setting (App. D, §4, App. E.2): G = 8, shaping plus joint
# training on the corrections, lr 5e-7 cosine to 0.1x, 3% warmup, entropy 0, mini-batch 32, 32k context,
# vLLM rollout. Every path and size is an env var;
# extra Hydra overrides are passed through ("$@"), which is how the variant scripts build on this one.
#
# Table 1 arms: this script (IBPO G = 8), run_gspo_g8_qwen3_32b.sh (GSPO G = 8) and run_gspo_g64_qwen3_32b.sh
# (GSPO G = 64) share ONE compute budget, COMPUTE_BUDGET in BUDGET_UNIT (compute_accounting/budget.py): each run stops
# when its cumulative compute reaches it (overshoot < one step) and validates at 25/50/75/100 % of it, so
# the arms are compared at equal compute (App. B; Table 1's caption: FLOPs), not at equal steps.
#
# "One update per iteration" (Alg. 1) has two readings; UPDATE_READING picks one:
#   minibatch  (default): 128 prompts per step in mini-batches of 32 (App. D) = 4 optimizer updates per step;
#   one_update: 32 prompts per step, one mini-batch of 32 = one optimizer update per iteration, as Alg. 1 reads.
# Evaluation of Table 1 after training: docs/evaluation.md (the same response length as in-training validation).
set -xeuo pipefail
source "$(dirname "$0")/../common/launch_env.sh"   # a bad variable stops here, naming it

MODEL_PATH=${MODEL_PATH:-"${HOME}/models/Qwen3-32B"}
DATA_DIR=${DATA_DIR:-"${HOME}/data/ibpo"}
TRAIN_FILES=${TRAIN_FILES:-"['${DATA_DIR}/dapo_math_17k.parquet']"}
# Table 1's benchmarks: AIME 2025, HMMT Feb 2025, LiveCodeBench v6 (python -m data_prep.all --out-dir DATA_DIR)
VAL_FILES=${VAL_FILES:-"['${DATA_DIR}/aime25.parquet','${DATA_DIR}/hmmt_feb_2025.parquet','${DATA_DIR}/lcb_v6.parquet']"}
CKPTS_DIR=${CKPTS_DIR:-"${HOME}/ckpts/ibpo"}
PROJECT_NAME=${PROJECT_NAME:-ibpo-verl}
EXP_NAME=${EXP_NAME:-ibpo_gspo_qwen3_32b_g8}

NNODES=${NNODES:-4}
NGPUS_PER_NODE=${NGPUS_PER_NODE:-8}
GEN_TP=${GEN_TP:-4}
SP_SIZE=${SP_SIZE:-8}
env_int NNODES NGPUS_PER_NODE GEN_TP SP_SIZE

N_RESP=${N_RESP:-8}                     # G
UPDATE_READING=${UPDATE_READING:-minibatch}   # minibatch | one_update (header)
case "${UPDATE_READING}" in
    minibatch)  DEFAULT_TRAIN_BATCH=128 ;;   # prompts per step (the paper gives only the mini-batch): 4 updates
    one_update) DEFAULT_TRAIN_BATCH=32 ;;    # one mini-batch per step: one update per iteration
    *) env_choice UPDATE_READING minibatch one_update ;;
esac
TRAIN_BATCH=${TRAIN_BATCH:-${DEFAULT_TRAIN_BATCH}}
MINI_BATCH=${MINI_BATCH:-32}            # App. D
MAX_PROMPT=${MAX_PROMPT:-2048}
MAX_RESPONSE=${MAX_RESPONSE:-30720}     # 32k context
env_int N_RESP TRAIN_BATCH MINI_BATCH MAX_PROMPT MAX_RESPONSE
# What the correction prompt shows of each candidate (CANDIDATES; docs/correction_pass.md measures the cost of
# cutting, and the start check prints how much of an answer the configuration keeps). The default is whole: on
# the toy, keeping 50% or 25% of each candidate took correction success from 0.22 to 0.00 (the corrector
# rebuilds the answer from the candidates' middle lines, which a cut removes; docs/correction_pass.md).
#   cut:   the model's own 40,960-token context; x and two candidates plus a full-length correction
#          must fit it, so each candidate is middle-truncated to MAX_CANDIDATE = 3,952 tokens (13% of a
#          30,720-token wrong answer, whole up to 3,952 tokens).
#   whole (default): the paper's x~ (App. B: the whole wrong answer and a whole correct one). The context is extended to
#          131,072 tokens with Qwen3's YaRN rope scaling (factor 4 over 32,768, Qwen's model card), set for the
#          rollout engine (vLLM hf_overrides through rollout.engine_kwargs) and the actor (model.override_config)
#          alike, so the sampling and the trained policy stay one model. What that does to the main rollout:
#          vLLM's YaRN is static, every sequence (short ones too) is computed with the scaled rope, which
#          Qwen notes "may impact performance on shorter texts"; and the vLLM context is 3.2x longer.
#   The thinking-stripped view (ibpo.candidate_view=strip_thinking) is the 80B script's; with either choice
#   here it can be added as an override.
CANDIDATES=${CANDIDATES:-whole}
ROPE_OVERRIDES=()
case "${CANDIDATES}" in
    cut)
        MAX_MODEL_LEN=${MAX_MODEL_LEN:-40960}   # the model's context (Qwen3-32B max_position_embeddings)
        # x and two candidates + the full response budget must fit the context (checked at start: a rollout
        # that runs out of context would silently shorten corrections)
        MAX_CANDIDATE=${MAX_CANDIDATE:-$(( (MAX_MODEL_LEN - MAX_RESPONSE - MAX_PROMPT - 256) / 2 - 16 ))} ;;
    whole)
        ROPE_ORIGINAL=${ROPE_ORIGINAL:-32768}     # the native context YaRN scales (80B: 262,144)
        env_int ROPE_ORIGINAL
        ROPE="{rope_type:yarn,factor:4.0,original_max_position_embeddings:${ROPE_ORIGINAL}}"
        MAX_MODEL_LEN=${MAX_MODEL_LEN:-$(( ROPE_ORIGINAL * 4 ))}
        MAX_CANDIDATE=${MAX_CANDIDATE:-${MAX_RESPONSE}}
        ROPE_OVERRIDES=("++actor_rollout_ref.model.override_config.rope_scaling=${ROPE}"
                        "++actor_rollout_ref.rollout.engine_kwargs.vllm.hf_overrides={rope_scaling:${ROPE}}") ;;
    *) env_choice CANDIDATES cut whole ;;
esac
env_int MAX_MODEL_LEN
env_int_min 0 MAX_CANDIDATE              # 0: derived from the model's context at start
if [ "${CANDIDATES}" = "cut" ]; then env_unused ROPE_ORIGINAL "CANDIDATES=cut runs the model's own context"; fi
LR=${LR:-5e-7}
# The paper's IBPO, pinned here so this script reproduces it whatever the package defaults are (the project's
# default differs where docs/evidence.md section 2 showed the paper's rule unlearning on a weak warm start):
VARIANT=${VARIANT:-binary}            # binary | ratio | mask (run_ibpo_ratio_/run_ibpo_mask_ set it)
LAM=${LAM:-0.6}                       # Table 4's optimum (run_sweep_lambda.sh sets it)
SHAPING=${SHAPING:-reward}            # r' = r + λΔ before the normalisation (Eq. 15/23)
CORRECT_GROUPS=${CORRECT_GROUPS:-all} # every wrong response is corrected (Alg. 1)
TEMPERATURE=${TEMPERATURE:-1.0}
VAL_N=${VAL_N:-64}                      # eval: 64 samples per problem
# Validation sampling: Qwen3-32B's own generation_config.json (temperature 0.6, top-p 0.95, top-k 20), which the
# paper's §5 also gives; the start check prints these against MODEL_PATH/generation_config.json.
VAL_TEMPERATURE=${VAL_TEMPERATURE:-0.6}
VAL_TOP_P=${VAL_TOP_P:-0.95}
VAL_TOP_K=${VAL_TOP_K:-20}
JOINT=${JOINT:-True}
env_number LR LAM TEMPERATURE VAL_TEMPERATURE VAL_TOP_P
env_int VAL_N
env_choice JOINT True False
# The compute budget of every Table-1 arm (COMPUTE_BUDGET=0: no budget, TOTAL_STEPS steps). Default: about 300
# IBPO G = 8 steps of 128 prompts by the FLOP formula of compute_accounting/flops.py (mean response 12k tokens, half the
# answers wrong and corrected, 1.1e19 FLOPs per step); GSPO G = 8 then gets ~580 steps, G = 64 ~72. To match
# on a run you made, set it to that run's final compute_budget/flops. BUDGET_UNIT=gpu_seconds: App. B's GPU time.
COMPUTE_BUDGET=${COMPUTE_BUDGET:-3.3e21}
BUDGET_UNIT=${BUDGET_UNIT:-flops}
# With a budget, TOTAL_STEPS is a cap and the length of the cosine lr schedule (verl sets it at start): each arm
# script sets ARM_STEPS ~1.2x its expected steps of 128 prompts to the default budget, so every arm's lr decays
# alike (the trainer prints where the budget stopped it); scaled to the prompts per step of UPDATE_READING.
ARM_STEPS=${ARM_STEPS:-360}
env_number COMPUTE_BUDGET
env_int ARM_STEPS
TOTAL_STEPS=${TOTAL_STEPS:-$(( ARM_STEPS * 128 / TRAIN_BATCH ))}
env_int TOTAL_STEPS
if env_is_zero COMPUTE_BUDGET; then TEST_FREQ=${TEST_FREQ:-10}
else
    env_unused TEST_FREQ "validation follows COMPUTE_BUDGET (at 25/50/75/100 %; COMPUTE_BUDGET=0 for steps)"
    TEST_FREQ=-1
fi
LOGGER=${LOGGER:-"['console','tensorboard']"}

python3 -m recipe.main method=ibpo \
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
    actor_rollout_ref.rollout.val_kwargs.n=${VAL_N} \
    actor_rollout_ref.rollout.val_kwargs.do_sample=True \
    actor_rollout_ref.rollout.val_kwargs.temperature=${VAL_TEMPERATURE} \
    actor_rollout_ref.rollout.val_kwargs.top_p=${VAL_TOP_P} \
    actor_rollout_ref.rollout.val_kwargs.top_k=${VAL_TOP_K} \
    ibpo.max_candidate_tokens=${MAX_CANDIDATE} \
    ibpo.joint_training=${JOINT} \
    ibpo.variant=${VARIANT} \
    ibpo.lam=${LAM} \
    ibpo.shaping=${SHAPING} \
    ibpo.correct_groups=${CORRECT_GROUPS} \
    trainer.logger="${LOGGER}" \
    trainer.project_name="${PROJECT_NAME}" \
    trainer.experiment_name="${EXP_NAME}" \
    trainer.n_gpus_per_node=${NGPUS_PER_NODE} \
    trainer.nnodes=${NNODES} \
    trainer.default_local_dir="${CKPTS_DIR}/${EXP_NAME}" \
    trainer.total_training_steps=${TOTAL_STEPS} \
    trainer.test_freq=${TEST_FREQ} \
    compute_budget.limit=${COMPUTE_BUDGET} \
    compute_budget.unit=${BUDGET_UNIT} \
    "${ROPE_OVERRIDES[@]}" \
    trainer.save_freq=50 \
    "$@"
