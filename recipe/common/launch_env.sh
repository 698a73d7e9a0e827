# The launch scripts' environment variables, checked in one place (every run_*.sh sources this file): a value a
# script does not know stops it at once, status 2, with one line naming the variable and what it accepts,
# instead of being read as the default, reaching verl as a bad override or failing inside Ray minutes later.
#   env_choice NAME WORD...   the value is one of the words (FAST_START 0 1)
#   env_int NAME...           each value is an integer >= 1 (a size or a count: bash arithmetic reads a word
#                             as a variable name and 1e3 as an error, so nothing else may reach it)
#   env_int_min LOW NAME...   each value is an integer >= LOW
#   env_number NAME...        each value is a number >= 0 (5e-7, 1.5e19)
#   env_numbers NAME          a list of numbers (a sweep's values, all checked before its first run)
#   env_words_in NAME WORD... a list of words, each one of WORD...
#   env_unused NAME WHY       NAME must not be set: this configuration does not read it (WHY)
#   env_is_zero NAME          true when the (checked) number is 0 (0, 0.0, 0e5)
# Sourcing it refuses, in the script the user ran: a variable the script reads with a default (${NAME:-...}) that
# is set but empty; a variable another launch script reads that neither this script nor those it runs reads
# (FAST_START for a 32B run, COMPUTE_BUDGET for a counterfactual one would be ignored).

env_error() { echo "[recipe] launch error: $*" >&2; exit 2; }

# The checks below run with `set -x` off: their lines would bury the script's own trace.
env_quiet() { case $- in *x*) ENV_XTRACE=1; set +x ;; *) ENV_XTRACE=0 ;; esac; } 2>/dev/null
env_loud() { if [ "${ENV_XTRACE}" = 1 ]; then set -x; fi; }

env_choice() {
    env_quiet
    local name=$1 word; shift
    for word in "$@"; do if [ "${!name}" = "${word}" ]; then env_loud; return 0; fi; done
    env_error "${name}='${!name}': must be one of: $*"
}

env_int_min() {
    env_quiet
    local low=$1 name; shift
    for name in "$@"; do
        if ! [[ ${!name} =~ ^(0|[1-9][0-9]{0,17})$ ]] || [ "${!name}" -lt "${low}" ]; then
            env_error "${name}='${!name}': must be an integer >= ${low}"
        fi
    done
    env_loud
}
env_int() { env_int_min 1 "$@"; }

ENV_NUMBER='^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$'

env_number() {
    env_quiet
    local name
    for name in "$@"; do
        [[ ${!name} =~ ${ENV_NUMBER} ]] || env_error "${name}='${!name}': must be a number >= 0 (e.g. 5e-7, 1.5e19)"
    done
    env_loud
}

env_numbers() {
    env_quiet
    local word count=0
    for word in ${!1}; do
        count=$((count + 1))
        [[ ${word} =~ ${ENV_NUMBER} ]] || env_error "$1='${!1}': '${word}' is not a number >= 0"
    done
    if [ "${count}" = 0 ]; then env_error "$1='${!1}': must list at least one number"; fi
    env_loud
}

env_words_in() {
    env_quiet
    local name=$1 word allowed count=0; shift
    for word in ${!name}; do
        count=$((count + 1))
        for allowed in "$@"; do if [ "${word}" = "${allowed}" ]; then continue 2; fi; done
        env_error "${name}='${!name}': '${word}' is not one of: $*"
    done
    if [ "${count}" = 0 ]; then env_error "${name}='${!name}': must list at least one of: $*"; fi
    env_loud
}

env_unused() {
    env_quiet
    if [ -n "${!1+set}" ]; then env_error "$1='${!1}' is not read here: $2; unset it"; fi
    env_loud
}

env_is_zero() {  # the mantissa's digits are all 0
    local mantissa=${!1%%[eE]*}
    [ -z "${mantissa//[0.]/}" ]
}

# The variables a launch script reads with a default.
env_read_by() { grep -ho '\${[A-Z][A-Z0-9_]*:\?-' "$@" | sed 's/^..//; s/:\{0,1\}-$//' | sort -u; }

env_check_script() {
    env_quiet
    local script=$1 dir name mine others
    dir=$(dirname "${script}")
    for name in $(env_read_by "${script}"); do
        if [ -n "${!name+set}" ] && [ -z "${!name}" ]; then
            env_error "${name} is set but empty: give it a value, or unset it for the script's default"
        fi
    done
    if [ -z "${RECIPE_LAUNCH_SCRIPT:-}" ]; then  # the script the user ran: the scripts it runs read their own
        export RECIPE_LAUNCH_SCRIPT=${script}
        # this script and those it runs (a wrapper runs its main script, which runs no other)
        mine=("${script}")
        for name in $(grep -o 'dirname "$0")/run_[a-z0-9_]*\.sh' "${script}" | sed 's/.*\///'); do
            mine+=("${dir}/${name}")
        done
        others=$(comm -23 <(env_read_by "${dir}"/../*/run_*.sh) <(env_read_by "${mine[@]}"))
        for name in ${others}; do
            if [ -n "${!name+set}" ]; then
                env_error "${name}='${!name}' is read by other launch scripts, not by" \
                          "$(basename "${script}") (it would be ignored); unset it"
            fi
        done
    fi
    env_loud
}

env_check_script "${BASH_SOURCE[1]}"

# RECIPE_DEVICE=cpu runs the script on CPU through verl_cpu, at its own sizes (docs/gpu.md, "Real lengths on
# CPU"): verl_cpu's environment is exported and its device overrides (the hf rollout, fsdp2, fake Ray GPUs:
# `python3 -m verl_cpu.launch overrides`) are appended to the script's arguments, once (a wrapper passes them on
# to the script it runs).
# RECIPE_CPU_GPUS: the fake Ray GPUs (one per FSDP2 rank; the script's NNODES x NGPUS_PER_NODE).
RECIPE_DEVICE=${RECIPE_DEVICE:-gpu}
env_choice RECIPE_DEVICE gpu cpu
if [ "${RECIPE_DEVICE}" = cpu ] && [ -z "${RECIPE_CPU_APPENDED:-}" ]; then
    export RECIPE_CPU_APPENDED=1
    RECIPE_CPU_GPUS=${RECIPE_CPU_GPUS:-1}
    env_int RECIPE_CPU_GPUS
    unset CUDA_VISIBLE_DEVICES   # Ray refuses fake GPUs beside an empty CUDA_VISIBLE_DEVICES (docs/verl_on_cpu.md, a4)
    while IFS= read -r line; do export "${line?}"; done < <(python3 -m verl_cpu.launch env)
    while IFS= read -r line; do set -- "$@" "${line}"; done < <(python3 -m verl_cpu.launch overrides \
                                                                  --ray-gpus "${RECIPE_CPU_GPUS}")
fi
