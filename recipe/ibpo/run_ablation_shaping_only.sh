#!/usr/bin/env bash
# Table 3 ablations: "shaping only" (no joint training on corrections) vs the full method with joint
# training (App. E.2 (C)). Set JOINT=True for the latter.
set -xeuo pipefail
JOINT=${JOINT:-False}
EXP_NAME=${EXP_NAME:-ibpo_joint_${JOINT}} bash "$(dirname "$0")/run_ibpo_qwen3_32b.sh" ibpo.joint_training=${JOINT} "$@"
