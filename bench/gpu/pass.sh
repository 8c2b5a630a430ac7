#!/usr/bin/env bash
# The GPU pass: everything this project checks on a CUDA machine, in one call, into one report.
#
#   bash bench/gpu/pass.sh REPORT_DIR      (or: make gpu-pass REPORT=DIR)
#
# Installs the kit (`make gpu-kit`: the wheels the machine lacks, in .gpu-kit/) offline into a
# scratch folder, then runs, each stage bounded in time: the environment's facts, `pytest -m gpu`
# (kernels started from the same python), notebooks/mnist_gpu.ipynb and quickstart.ipynb, the
# launch benches (a no-op on CPU ranks, and a first collective on the GPUs) and the GPU step
# bench. Writes REPORT_DIR/report.md and report.json (bench/gpu/report.py), the stages' whole
# output in logs.txt and pytest's junit.xml, and ends whatever a stage left running: each stage
# runs under bench/gpu/contained.py, a child subreaper that ends its own descendants and nothing
# else (a person's kernels, another user's processes, are never touched). It exits non-zero when
# a stage failed (a GPU test, a notebook), ran past its limit, or left something running. Without
# a GPU (`make gpu-dry-run`) the GPU tests skip, the notebooks and the benches run on CPU ranks,
# and the report says so. Settings: GPU_PYTHON (python3), GPU_KIT (.gpu-kit), GPU_PASS_QUICK=1
# (fewer bench rounds, for the dry run), GPU_PASS_ONLY="stage stage..." (those stages alone, and
# no kit: the python's own packages; for tests of the pass itself), GPU_PASS_SKIP="stage..." (not
# those), GPU_PASS_BUDGET=SECONDS (the whole pass within that: a lent machine's time is counted; each
# stage gets at most what is left, and one that would get under 20 s is recorded as skipped).
set -u
SECONDS=0
report=${1:?usage: bench/gpu/pass.sh REPORT_DIR}
cd "$(dirname "$0")/../.."
repo=$PWD
mkdir -p "$report" && report=$(cd "$report" && pwd)
python=$(command -v "${GPU_PYTHON:-python3}")
kit=${GPU_KIT:-.gpu-kit}
site=$(mktemp -d /tmp/gpu-pass-site.XXXXXX)
home=$(mktemp -d /tmp/gpu-pass-home.XXXXXX)
work=$(mktemp -d /tmp/gpu-pass-work.XXXXXX) # each stage's log, read by report.py
trap 'rm -rf "$site" "$home" "$work"' EXIT
: >"$work/stages.tsv"
: >"$report/logs.txt"

# One stage: NAME SECONDS COMMAND...; its output goes to logs.txt, its exit code and time to
# stages.tsv, what it left running (then ended) to leftover.txt.
stage() {
    local name=$1 limit=$2 start end rc
    shift 2
    if [ -n "${GPU_PASS_ONLY:-}" ] && [[ " $GPU_PASS_ONLY " != *" $name "* ]]; then return 0; fi
    if [[ " ${GPU_PASS_SKIP:-} " == *" $name "* ]]; then return 0; fi
    if [ -n "${GPU_PASS_BUDGET:-}" ]; then
        local left=$((GPU_PASS_BUDGET - SECONDS - 15)) # 15 s kept for the report
        if [ "$left" -lt 20 ]; then
            echo "===== $name: skipped, the pass's budget of ${GPU_PASS_BUDGET}s is spent" >>"$report/logs.txt"
            printf '%s\tskipped\t0\t%s\n' "$name" "$limit" >>"$work/stages.tsv"
            return 0
        fi
        [ "$left" -lt "$limit" ] && limit=$left
    fi
    echo "===== $name (at most ${limit}s): $*" >>"$report/logs.txt"
    start=$(date +%s%N)
    timeout -k 10 "$limit" "$python" bench/gpu/contained.py "$work/leftover.txt" -- "$@" >"$work/$name.log" 2>&1
    rc=$?
    end=$(date +%s%N)
    cat "$work/$name.log" >>"$report/logs.txt"
    printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(((end - start) / 1000000))" "$limit" >>"$work/stages.tsv"
    echo "----- $name: exit $rc" >>"$report/logs.txt"
    return 0
}

export PYTHONPATH="$site:$repo" PYTHONUNBUFFERED=1 NL_TEST_KERNEL_PYTHON="$python"
: >"$work/leftover.txt"
if [ -z "${GPU_PASS_ONLY:-}" ]; then
    ls "$kit"/*.whl >/dev/null 2>&1 || { echo "no kit in $kit: run 'make gpu-kit' first" >&2; exit 2; }
    stage kit 60 "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$site" "$kit"/*.whl
fi
# Jupyter's runtime and data folders (connection files, kernel specs) in a scratch home of the pass.
export JUPYTER_RUNTIME_DIR="$home/runtime" JUPYTER_DATA_DIR="$home/data" IPYTHONDIR="$home/ipython"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MNIST_OFFLINE=1 MPLBACKEND=agg

stage environment 60 "$python" bench/gpu/facts.py
mapfile -t gpu_tests < <(grep -rl --include='test_*.py' "pytest.mark.gpu" tests)
stage gpu-tests 200 "$python" -m pytest -m gpu -p no:cacheprovider -o addopts= -ra --strict-markers \
    --timeout 150 --junitxml="$report/junit.xml" "${gpu_tests[@]}"
MNIST_EPOCHS=2 stage notebook 90 "$python" notebooks/run_notebook.py notebooks/mnist_gpu.ipynb
QUICKSTART_EPOCHS=2 stage quickstart 90 "$python" notebooks/run_notebook.py notebooks/quickstart.ipynb
rounds=30 gpu_rounds=8 quick=()
[ "${GPU_PASS_QUICK:-0}" = 1 ] && rounds=3 gpu_rounds=2 quick=(--quick)
# the no-op launch of bench/launch_overhead.py on this machine's CPUs (2 CPU ranks: GPUs hidden)
CUDA_VISIBLE_DEVICES= stage bench-launch 60 "$python" bench/launch_overhead.py --rounds "$rounds"
stage bench-gpu-launch 90 "$python" bench/gpu/launch.py --rounds "$gpu_rounds"
stage bench-step 120 "$python" bench/gpu/step.py --json "$work/step.json" "${quick[@]}"
# torch.compile's first step, one rank per GPU, beside Accelerate and torch.multiprocessing (GPUs only:
# on 2 CPU cores the same table takes ~25 minutes, bench/compile_start.py)
if gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU') && [ "$gpus" -gt 0 ]; then
    stage bench-compile 420 "$python" bench/compile_start.py --device cuda --ranks "$gpus"
fi

"$python" bench/gpu/report.py "$work" "$report"
# the pass fails when a stage failed or ran out of time, or a stage left something running
! cut -f2 "$work/stages.tsv" | grep -qv '^0$' && [ ! -s "$work/leftover.txt" ]
