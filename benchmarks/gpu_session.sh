#!/usr/bin/env bash
# The GPU measurements of docs/benchmarks.md and docs/results.md, in one command, on a machine with a
# CUDA GPU (run from the repository root). Phases, in the order given:
#   setup   Python packages the GPU image lacks (Ray, MLflow, Optuna, neuraloperator), from .devenv/*.tar.xz
#           when present (a bundle for a machine with no network; elsewhere `pip install -e .` is enough)
#   tests   python -m pytest -m gpu (tests/test_gpu.py, tests/operators/test_population.py)
#   population  a training step of a population of 1..64 proxies against one proxy (benchmarks/population_step.py)
#   bench   step time, MFU and precision (benchmarks/bench_fno_step.py), ours vs neuraloperator, and the
#           planner against torch.cuda.max_memory_allocated (benchmarks/bench_memory.py, the 906M target included)
#   study   the reduced paper study (studies/navier_stokes_paper_1gpu.yaml) end to end: data generated on the
#           GPU, proxies on GPU shares, muP transfer, the target on the GPU; fitted into STUDY_SECONDS of
#           training by benchmarks/study_budget.py (the overrides it needed are printed and kept)
# Everything lands in $OUT (default /tmp/gpu-out): summary.txt, and results.tar.gz (logs/ and the JSON
# results, the study's MLflow store included).
#   bash benchmarks/gpu_session.sh setup tests bench
#   STUDY_SECONDS=300 bash benchmarks/gpu_session.sh setup study
set -u
OUT=${OUT:-/tmp/gpu-out}
RES=$OUT/results
LOGS=$RES/logs
mkdir -p "$LOGS"
ROOT=$(pwd)
export PYTHONPATH=/tmp/site:$ROOT${PYTHONPATH:+:$PYTHONPATH}
export MLFLOW_DISABLE_TELEMETRY=true RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1 TQDM_DISABLE=1
export MUTRANSFER_CACHE=${MUTRANSFER_CACHE:-/tmp/mutransfer-cache}
PY=${PY:-python3}
DEVICE=${DEVICE:-cuda}
STUDY=${STUDY:-studies/navier_stokes_paper_1gpu.yaml}
SUMMARY=$OUT/summary.txt
say() { echo "$*" | tee -a "$SUMMARY"; }
run() {  # run NAME TIMEOUT CMD...: log to logs/NAME.log, record the exit code and the time
    local name=$1 limit=$2; shift 2
    local start=$SECONDS
    timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1
    local rc=$?
    say "$(printf '%-28s rc=%-3s %4ss' "$name" "$rc" "$((SECONDS - start))")"
    return $rc
}

setup() {
    mkdir -p /tmp/site
    if [ ! -f /tmp/site/.ready ]; then
        for bundle in .devenv/*.tar.xz; do
            if [ -f "$bundle" ]; then tar -xJf "$bundle" -C /tmp/site; fi
        done
        touch /tmp/site/.ready
    fi
    nvidia-smi >"$LOGS/nvidia-smi.txt" 2>&1
    $PY benchmarks/gpu_env.py >"$LOGS/env.txt" 2>&1
    say "setup: $(head -2 "$LOGS/env.txt" | tr '\n' ' ')"
    grep MISSING "$LOGS/env.txt" | tee -a "$SUMMARY"
}

tests() {
    run gpu_tests 300 $PY -m pytest -m gpu tests/test_gpu.py tests/operators/test_population.py -v -s \
        -p no:cacheprovider
    grep -E "PASSED|FAILED|SKIPPED|ERROR|passed|failed" "$LOGS/gpu_tests.log" | tail -30 >>"$SUMMARY"
}

bench() {
    # the issue's MFU configurations, and the 1-GPU study's target: fp32 and bf16 with the current
    # contraction, fp32 with the former einsum (bench_fno_step.py --contraction einsum)
    local cfgs=("1 16 64 1024 20" "2 12 64 64x64 20" "3 8 32 32x32x32 4" "3 16 64 64x64x32 2")
    local cfg tag
    for cfg in "${cfgs[@]}"; do
        set -- $cfg
        tag="d$1_k$2_w$3"
        run "step_${tag}_fp32" 150 $PY benchmarks/bench_fno_step.py --device cuda --dim "$1" --modes "$2" \
            --width "$3" --layers 4 --grid "$4" --batch "$5" --repeats 30 --warmup 5 --json "$RES/step_${tag}_fp32.json"
        run "step_${tag}_bf16" 120 $PY benchmarks/bench_fno_step.py --device cuda --dim "$1" --modes "$2" \
            --width "$3" --layers 4 --grid "$4" --batch "$5" --repeats 30 --warmup 5 --precision bf16 --no-neuralop \
            --json "$RES/step_${tag}_bf16.json"
        run "step_${tag}_einsum" 120 $PY benchmarks/bench_fno_step.py --device cuda --dim "$1" --modes "$2" \
            --width "$3" --layers 4 --grid "$4" --batch "$5" --repeats 30 --warmup 5 --contraction einsum \
            --no-neuralop --json "$RES/step_${tag}_einsum.json"
    done
    # the truncated DFT as GEMMs (the CPU default) against cuFFT on the GPU, 2D and 3D
    run step_d2_dft 120 $PY benchmarks/bench_fno_step.py --device cuda --dim 2 --modes 12 --width 64 --layers 4 \
        --grid 64x64 --batch 20 --repeats 30 --warmup 5 --transform dft --no-neuralop --json "$RES/step_d2_k12_w64_dft.json"
    run step_d3_dft 120 $PY benchmarks/bench_fno_step.py --device cuda --dim 3 --modes 8 --width 32 --layers 4 \
        --grid 32x32x32 --batch 4 --repeats 30 --warmup 5 --transform dft --no-neuralop --json "$RES/step_d3_k8_w32_dft.json"
    run memory_cuda 240 $PY benchmarks/bench_memory.py --device cuda --paper --json "$RES/memory_cuda.json"
    run precision_cuda 240 $PY benchmarks/bench_precision.py --device cuda --epochs 20 --seeds 3 \
        --json "$RES/precision_cuda.json"
    grep "plan/measured" "$LOGS/memory_cuda.log" >>"$SUMMARY"
}

population() {
    run population_cuda 180 $PY benchmarks/population_step.py --device cuda --rounds 3 \
        --json "$RES/population_step_cuda.json"
    grep -E "alone|population of" "$LOGS/population_cuda.log" >>"$SUMMARY"
}

study() {
    local seconds=${STUDY_SECONDS:-300}
    # the cache file the study reads (problem.data: null), generated here on the device
    local data n res seed
    read -r data n res seed < <($PY benchmarks/gpu_env.py --data-args "$STUDY")
    mkdir -p "$(dirname "$data")"
    if [ ! -f "$data" ]; then
        run ns_data 240 $PY -m mutransfer data generate navier_stokes --n "$n" --resolution "$res" --seed "$seed" \
            --device "$DEVICE" --no-progress --out "$data"
    fi
    run study_budget 120 $PY benchmarks/study_budget.py --study "$STUDY" --device "$DEVICE" --seconds "$seconds" \
        --json "$RES/study_budget.json"
    local flags
    flags=$(tail -1 "$LOGS/study_budget.log" | grep -E '^--' || true)
    say "study overrides to fit ${seconds}s of training: ${flags:-none}"
    local name
    name=$($PY -c "import yaml,sys; print(yaml.safe_load(open(sys.argv[1]))['name'])" "$STUDY")
    rm -rf "mutransfer-runs/$name"
    local start=$SECONDS
    # shellcheck disable=SC2086
    timeout "${STUDY_LIMIT:-540}" $PY -m mutransfer sweep --study "$STUDY" --json $flags \
        --tracking-uri "sqlite:///$RES/mlflow.db" >"$RES/study_report.json" 2>"$LOGS/study.log"
    say "$(printf '%-28s rc=%-3s %4ss' study "$?" "$((SECONDS - start))")"
    tail -4 "$LOGS/study.log" >>"$SUMMARY"
    $PY benchmarks/gpu_env.py --report "$RES/study_report.json" >>"$SUMMARY" 2>&1
    cp "mutransfer-runs/$name/state.json" "$RES/study_state.json" 2>/dev/null
}

for phase in "$@"; do
    say "=== $phase $(date +%T)"
    "$phase"
done
cd "$OUT" && tar -czf results.tar.gz results && rm -rf results
cat "$SUMMARY"
