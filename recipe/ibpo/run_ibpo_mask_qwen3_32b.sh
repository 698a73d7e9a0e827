#!/usr/bin/env bash
# IBPO-mask: Δ = β, and on a shaped response the gradient only on the tokens the correction modified
# (Eq. 7/17) -- applied by the sign of the row's normalised advantage Â: this runs the default
# ibpo.mask_sign=negative_only (mask where Â < 0, every token where Â >= 0), NOT Eq. 17 as written, which
# on a shaped response with Â > 0 would reinforce only the changed (likely wrong) tokens. Decision and the
# three policies: docs/method_ibpo.md (Step B, "mask sign"). The paper's literal rule:
#   bash run_ibpo_mask_qwen3_32b.sh ibpo.mask_sign=literal
# Built on run_ibpo_qwen3_32b.sh: the same compute budget (COMPUTE_BUDGET, BUDGET_UNIT), whole candidates
# (CANDIDATES) and reading of Alg. 1's "one update per iteration" (UPDATE_READING: minibatch, 4 updates of
# 32 prompts per step, by default; one_update for one update per iteration).
set -xeuo pipefail
source "$(dirname "$0")/../common/launch_env.sh"   # a bad variable stops here, naming it
env_unused VARIANT "this script runs VARIANT=mask"
EXP_NAME=${EXP_NAME:-ibpo_mask_qwen3_32b} VARIANT=mask bash "$(dirname "$0")/run_ibpo_qwen3_32b.sh" "$@"
