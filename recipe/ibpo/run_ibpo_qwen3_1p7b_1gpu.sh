#!/usr/bin/env bash
# IBPO + GSPO on Qwen3-1.7B with ONE 80 GB GPU (H100/A100-80G): DAPO-Math-17k training, AIME 2025
# validation. The paper's method (G = 8, shaping + joint training, GSPO carrier, lr 5e-7 cosine to 0.1x, 3%
# warmup, entropy 0) on a model and at sizes one GPU holds; the optimizer state is offloaded to CPU and vLLM
# takes 45% of the GPU (it sleeps while the actor trains). Every path and size is an env var; extra Hydra
# overrides are appended ("$@"); run_gspo_qwen3_1p7b_1gpu.sh is the baseline through the same loop.
#   MODEL_PATH=~/models/Qwen3-1.7B DATA_DIR=~/data/ibpo bash recipe/ibpo/run_ibpo_qwen3_1p7b_1gpu.sh
#
# NOT the paper's experiment. What differs from the paper's settings (App. D, Table 1), and why:
#   - the model: Qwen3-1.7B, not Qwen3-32B / Qwen3-Next-80B (one GPU);
#   - context: 8k responses, not 30k (vLLM's KV cache and the actor share one GPU). Correction candidates are
#     shown whole (CANDIDATES=whole: a 32,768-token vLLM context, inside the model's own 40,960, no rope
#     scaling); CANDIDATES=cut keeps the former 16k context and cuts each candidate to 3,440 tokens
#     (docs/correction_pass.md: cutting cost the toy all its successful corrections);
#   - 32 prompts per step in mini-batches of 16: 2 optimizer updates per step (UPDATE_READING=minibatch);
#     UPDATE_READING=one_update makes the mini-batch the whole step (32 = App. D's mini-batch): one update per
#     iteration, as Alg. 1 reads;
#   - validation: AIME 2025 only, 16 samples per problem (Table 1: AIME, HMMT, LiveCodeBench v6, avg@64).
# The same as the paper: G, λ, β, α, the lr and its schedule, the GSPO clip range and aggregation. The GSPO
# baseline gets the same compute budget (COMPUTE_BUDGET, BUDGET_UNIT), not the same steps.
# What fits in 80 GB is CHOSEN, NOT MEASURED: no run of these sizes (32 prompts x G = 8, 8k responses, a 32k vLLM
# context, GPU_MEM=0.45) has been measured on a GPU; `python lab/scripts/bench_gpu.py` measures peak memory and
# per-phase seconds of one step at a reduced batch (docs/gpu.md, whose table says which rows are measured).
set -xeuo pipefail
source "$(dirname "$0")/../common/launch_env.sh"   # a bad variable stops here, naming it

MODEL_PATH=${MODEL_PATH:-"${HOME}/models/Qwen3-1.7B"}
DATA_DIR=${DATA_DIR:-"${HOME}/data/ibpo"}
TRAIN_FILES=${TRAIN_FILES:-"['${DATA_DIR}/dapo_math_17k.parquet']"}
VAL_FILES=${VAL_FILES:-"['${DATA_DIR}/aime25.parquet']"}
CKPTS_DIR=${CKPTS_DIR:-"${HOME}/ckpts/ibpo"}
PROJECT_NAME=${PROJECT_NAME:-ibpo-verl}
EXP_NAME=${EXP_NAME:-ibpo_gspo_qwen3_1p7b_g8_1gpu}

N_RESP=${N_RESP:-8}                     # G
TRAIN_BATCH=${TRAIN_BATCH:-32}          # prompts per step
UPDATE_READING=${UPDATE_READING:-minibatch}   # minibatch: 2 updates per step | one_update: 1 (header)
case "${UPDATE_READING}" in
    minibatch)  DEFAULT_MINI_BATCH=16 ;;
    one_update) DEFAULT_MINI_BATCH=${TRAIN_BATCH} ;;
    *) env_choice UPDATE_READING minibatch one_update ;;
esac
MINI_BATCH=${MINI_BATCH:-${DEFAULT_MINI_BATCH}}
MAX_PROMPT=${MAX_PROMPT:-1024}
MAX_RESPONSE=${MAX_RESPONSE:-8192}
env_int N_RESP TRAIN_BATCH MINI_BATCH MAX_PROMPT MAX_RESPONSE
CANDIDATES=${CANDIDATES:-whole}        # whole | cut (header)
case "${CANDIDATES}" in
    whole) MAX_MODEL_LEN=${MAX_MODEL_LEN:-32768}    # x + 2 whole candidates + a full correction (Qwen3-1.7B: 40960)
           MAX_CANDIDATE=${MAX_CANDIDATE:-${MAX_RESPONSE}} ;;
    cut)   MAX_MODEL_LEN=${MAX_MODEL_LEN:-16384}
           # each candidate middle-truncated so that x~ plus a full response fits (checked at start)
           MAX_CANDIDATE=${MAX_CANDIDATE:-$(( (MAX_MODEL_LEN - MAX_RESPONSE - MAX_PROMPT - 256) / 2 - 16 ))} ;;
    *) env_choice CANDIDATES whole cut ;;
esac
env_int MAX_MODEL_LEN
env_int_min 0 MAX_CANDIDATE              # 0: derived from the model's context at start
LR=${LR:-5e-7}                          # App. D (the scripts used 1e-6 before, with no stated reason)
TEMPERATURE=${TEMPERATURE:-1.0}
GPU_MEM=${GPU_MEM:-0.45}
VAL_N=${VAL_N:-16}                      # AIME 2025: 30 problems x 16 samples
VAL_TEMPERATURE=${VAL_TEMPERATURE:-0.6} # Qwen3's generation_config.json (the start check prints it)
VAL_TOP_P=${VAL_TOP_P:-0.95}
VAL_TOP_K=${VAL_TOP_K:-20}
JOINT=${JOINT:-True}
env_number LR TEMPERATURE GPU_MEM VAL_TEMPERATURE VAL_TOP_P
env_int VAL_N
env_choice JOINT True False
# One compute budget for the pair (compute_accounting/budget.py; COMPUTE_BUDGET=0: TOTAL_STEPS steps). Default: about
# 200 IBPO steps by the FLOP formula of compute_accounting/flops.py (mean response 5k tokens, 60% wrong: 7.5e16 FLOPs per
# step); the G = 8 baseline then gets ~550 steps. TOTAL_STEPS: the cap and the cosine schedule's length
# (ARM_STEPS ~1.2x the expected steps to the budget).
COMPUTE_BUDGET=${COMPUTE_BUDGET:-1.5e19}
BUDGET_UNIT=${BUDGET_UNIT:-flops}
ARM_STEPS=${ARM_STEPS:-240}
TOTAL_STEPS=${TOTAL_STEPS:-${ARM_STEPS}}
env_number COMPUTE_BUDGET
env_int ARM_STEPS TOTAL_STEPS
if env_is_zero COMPUTE_BUDGET; then TEST_FREQ=${TEST_FREQ:-10}
else
    env_unused TEST_FREQ "validation follows COMPUTE_BUDGET (at 25/50/75/100 %; COMPUTE_BUDGET=0 for steps)"
    TEST_FREQ=-1
fi
LOGGER=${LOGGER:-"['console','file']"}
# the registered method; only lab/scripts/bench_gpu.py sets another (its bench-only ibpo_then_gspo, same `ibpo:` block)
METHOD=${METHOD:-ibpo}
# Start-up options for a short run or a GPU check (docs/gpu.md, "Start-up"); what each saves at start and costs
# per step is unmeasured (no GPU in the session that added them):
#   FAST_START=1    the actor's FSDP engine without torch.compile (its first pass compiles otherwise) and vLLM's
#                   CUDA graphs captured for batches up to CUDAGRAPH_MAX only (default: the step's TRAIN_BATCH x
#                   N_RESP requests, at most 512; vLLM captures up to 512 otherwise). With speculation a decode
#                   pass carries 1 + k tokens per request: set CUDAGRAPH_MAX to requests x (1 + k) to keep graphs.
#   ENFORCE_EAGER=1 vLLM without CUDA graphs or compilation (the slowest decode; for a check, not a run).
FAST_START=${FAST_START:-0}
ENFORCE_EAGER=${ENFORCE_EAGER:-0}
env_choice FAST_START 0 1
env_choice ENFORCE_EAGER 0 1
START_OPTS=()
if [ "${FAST_START}" = "1" ]; then
    CUDAGRAPH_MAX=${CUDAGRAPH_MAX:-$(( TRAIN_BATCH * N_RESP < 512 ? TRAIN_BATCH * N_RESP : 512 ))}
    env_int CUDAGRAPH_MAX
    SIZES=1; s=2; while [ "${s}" -lt "${CUDAGRAPH_MAX}" ]; do SIZES="${SIZES},${s}"; s=$((s * 2)); done
    if [ "${CUDAGRAPH_MAX}" -gt 1 ]; then SIZES="${SIZES},${CUDAGRAPH_MAX}"; fi
    START_OPTS+=(actor_rollout_ref.actor.use_torch_compile=False actor_rollout_ref.actor.fsdp_config.use_torch_compile=False
                 "actor_rollout_ref.rollout.cudagraph_capture_sizes=[${SIZES}]")
fi
if [ "${FAST_START}" = "0" ]; then env_unused CUDAGRAPH_MAX "it sizes FAST_START=1's CUDA graphs"; fi
if [ "${ENFORCE_EAGER}" = "1" ]; then START_OPTS+=(actor_rollout_ref.rollout.enforce_eager=True); fi

python3 -m recipe.main method="${METHOD}" \
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
    actor_rollout_ref.rollout.val_kwargs.n=${VAL_N} \
    actor_rollout_ref.rollout.val_kwargs.do_sample=True \
    actor_rollout_ref.rollout.val_kwargs.temperature=${VAL_TEMPERATURE} \
    actor_rollout_ref.rollout.val_kwargs.top_p=${VAL_TOP_P} \
    actor_rollout_ref.rollout.val_kwargs.top_k=${VAL_TOP_K} \
    ibpo.max_candidate_tokens=${MAX_CANDIDATE} \
    ibpo.joint_training=${JOINT} \
    trainer.logger="${LOGGER}" \
    trainer.project_name="${PROJECT_NAME}" \
    trainer.experiment_name="${EXP_NAME}" \
    trainer.n_gpus_per_node=1 \
    trainer.nnodes=1 \
    trainer.default_local_dir="${CKPTS_DIR}/${EXP_NAME}" \
    trainer.total_training_steps=${TOTAL_STEPS} \
    trainer.test_freq=${TEST_FREQ} \
    compute_budget.limit=${COMPUTE_BUDGET} \
    compute_budget.unit=${BUDGET_UNIT} \
    trainer.save_freq=50 \
    ${START_OPTS[@]+"${START_OPTS[@]}"} \
    "$@"
