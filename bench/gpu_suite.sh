#!/usr/bin/env bash
# The GPU checks and benchmarks in one go, for a CUDA machine borrowed for a few minutes.
#
#   bash bench/gpu_suite.sh OUT_DIR tests      # gpu_tests/ (<= 5 min)
#   bash bench/gpu_suite.sh OUT_DIR train      # the optimization ladder (<= 9 min: three rows compile the model)
#   bash bench/gpu_suite.sh OUT_DIR rest       # batch sweep, profile, inference, vocoder (<= 7 min)
#   bash bench/gpu_suite.sh OUT_DIR quality    # data loading, time to quality (<= 6 min; needs espeak-ng data)
#
# One phase per call where a command may run at most 10 minutes (a borrowed machine's limit).
#
# STUDIO_GPU_WORKSPACE: a workspace with the espeak-ng dataset `bench` (bench/common.espeak_dataset) for
# machines without espeak-ng. Every step has its own time limit, so one hang costs one step, not the lease;
# each step's output goes to OUT_DIR/<step>.log, and the JSON/PNG of every step so far to OUT_DIR/bench.tgz
# (few files: a borrowed machine may hand back only a handful).
set -uo pipefail
cd "$(dirname "$0")/.."
out=$1; shift
json=$(mktemp -d)
mkdir -p "$out"
export PYTHONUNBUFFERED=1
ws=${STUDIO_GPU_WORKSPACE:-}
data=()
[ -n "$ws" ] && data=(--dataset bench --workspace "$ws")

step() {  # step NAME SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  echo "=== $name ($(date +%T), limit ${limit}s): $*"
  # SIGTERM asks the trainer for a graceful stop, which a hung step never reaches: KILL 10 s later
  timeout -k 10 "$limit" "$@" > "$out/$name.log" 2>&1
  echo "=== $name: exit $? after $SECONDS s in all"
  tail -n 40 "$out/$name.log"
  tar czf "$out/bench.tgz" -C "$json" .
}

for phase in "$@"; do
  case $phase in
    tests)
      nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
      python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
      per_test=(); python -c "import pytest_timeout" 2>/dev/null && per_test=(--timeout 120)
      step gpu_tests 280 python -m pytest gpu_tests -v -rfE --durations=10 -p no:cacheprovider "${per_test[@]}" ;;
    train)
      step train_throughput 530 python bench/train_throughput.py --preset base --frames 16000 --steps 15 --warmup 5 \
        --out "$json" ;;
    rest)
      step batch_sweep 120 python bench/batch_sweep.py --preset base --out "$json"
      step profile_step 70 python bench/profile_step.py --preset base --frames 16000 --out "$json"
      step inference 90 python bench/inference.py --presets base --batch 1 8 --e2e-sentences 24 --out "$json"
      step vocoder_throughput 90 python bench/vocoder_throughput.py --devices cuda --seconds 10 --train-batch 16 \
        --train-repeat 5 --out "$json" ;;
    quality)
      [ -z "$ws" ] && echo "quality: set STUDIO_GPU_WORKSPACE to a workspace with the espeak-ng dataset 'bench'"
      [ -n "$ws" ] && step data_loading 60 python bench/data_loading.py "${data[@]}" --workers 0 2 4 8 --step-ms 40 \
        --out "$json"
      [ -n "$ws" ] && step time_to_quality 300 python bench/time_to_quality.py "${data[@]}" --preset base \
        --minutes 4 --eval-every 250 --mcd logmel --out "$json" ;;
    *) echo "unknown phase $phase (tests | train | rest | quality)"; exit 2 ;;
  esac
done
