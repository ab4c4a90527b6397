#!/usr/bin/env bash
# The GPU checks and benchmarks in one go, for a CUDA machine borrowed for a few minutes.
#
#   bash bench/gpu_suite.sh OUT_DIR paths      # every curator path on cuda (gpu_tests/test_curator_paths.py, <= 8 min)
#   bash bench/gpu_suite.sh OUT_DIR tests      # the engine's CUDA promises (gpu_tests/test_cuda.py, <= 8 min)
#   bash bench/gpu_suite.sh OUT_DIR train      # the optimization ladder (<= 9 min: three rows compile the model)
#   bash bench/gpu_suite.sh OUT_DIR rest       # batch sweep, profile, inference, vocoder (<= 7 min)
#   bash bench/gpu_suite.sh OUT_DIR quality    # data loading, time to quality (<= 6 min, and <= 4 to speak the corpus)
#   bash bench/gpu_suite.sh OUT_DIR data       # preparation of 10 h (x20 = 200 h), separation speed (<= 7 min)
#   bash bench/gpu_suite.sh OUT_DIR f5         # F5-TTS v1 Base step: time, frames/s, memory (<= 3 min)
#
# Run the phases in this order: what is most likely to break comes first (paths: code no GPU ever ran; tests; f5;
# then the measurements). One phase per call where a command may run at most 10 minutes (a borrowed machine's limit). A machine that
# reaches no package registry gets what it lacks from .gpu/ (python bench/gpu_carry.py here; carry [".gpu"]):
# every call installs it again, since a machine is given back 30 s after a call.
#
# STUDIO_GPU_WORKSPACE: a workspace with the espeak-ng dataset `bench` (bench/common.espeak_dataset) instead of
# speaking one. Every step has its own time limit, so one hang costs one step, not the lease;
# each step's output goes to OUT_DIR/<step>.log, and the JSON/PNG of every step so far to OUT_DIR/bench.tgz
# (few files: a borrowed machine may hand back only a handful).
set -uo pipefail
cd "$(dirname "$0")/.."
out=$1; shift
json=$(mktemp -d)
mkdir -p "$out"
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}  # a borrowed machine's python3 is the one with torch; it may have no `python`

setup() {  # what .gpu/ carries: wheels and source archives of what the image lacks, and espeak-ng
  [ -d .gpu ] || return 0
  local site=/tmp/studio-site
  if [ ! -e $site/.installed ]; then
    $py -m pip install -q --no-index --no-deps --no-compile --target $site .gpu/wheels/*.whl || exit 3
    if compgen -G ".gpu/sdists/*" >/dev/null; then  # built against the image's numpy and Cython
      $py -m pip install -q --no-index --no-deps --no-build-isolation --target $site .gpu/sdists/* || exit 3
    fi
    touch $site/.installed
  fi
  export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} PATH=$PWD/.gpu/bin:$PATH
  # Debian's espeak-ng program on espeakng-loader's library and voices, which need nothing from the system
  export LD_LIBRARY_PATH=$site/espeakng_loader${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export ESPEAK_DATA_PATH=$site/espeakng_loader/espeak-ng-data
  echo "installed from .gpu/: $(tr '\n' ' ' < .gpu/CONTENTS.txt)"
  espeak-ng --version || exit 3
}
setup

ws=${STUDIO_GPU_WORKSPACE:-}
if [ -z "$ws" ] && [[ " $* " == *" quality "* ]]; then  # the corpus time to quality and data loading share
  ws=$(mktemp -d)
  echo "=== speaking the corpus into $ws ($(date +%T))"
  timeout -k 10 240 $py -c "import sys; sys.path.insert(0, 'bench'); import common; common.espeak_dataset('$ws', 780, 20, 110)" \
    > "$out/corpus.log" 2>&1 || { tail -n 20 "$out/corpus.log"; exit 3; }
fi
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
    paths|tests)
      nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
      $py -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
      # per test: the first one speaks nothing yet but trains its voices (start-up, the probe, kernels): minutes
      per_test=(); $py -c "import pytest_timeout" 2>/dev/null && per_test=(--timeout 300)
      file=gpu_tests/test_curator_paths.py; [ "$phase" = tests ] && file=gpu_tests/test_cuda.py
      step "gpu_$phase" 540 $py -m pytest "$file" -v -rfE --durations=10 -p no:cacheprovider "${per_test[@]}" ;;
    train)
      step train_throughput 530 $py bench/train_throughput.py --preset base --frames 16000 --steps 15 --warmup 5 \
        --out "$json" ;;
    rest)
      step batch_sweep 120 $py bench/batch_sweep.py --preset base --out "$json"
      step profile_step 70 $py bench/profile_step.py --preset base --frames 16000 --out "$json"
      step inference 90 $py bench/inference.py --presets base --batch 1 8 --e2e-sentences 24 --out "$json"
      step vocoder_throughput 90 $py bench/vocoder_throughput.py --devices cuda --seconds 10 --train-batch 16 \
        --train-repeat 5 --out "$json" ;;
    quality)
      step data_loading 60 $py bench/data_loading.py "${data[@]}" --workers 0 2 4 8 --step-ms 40 \
        --out "$json"
      step time_to_quality 300 $py bench/time_to_quality.py "${data[@]}" --preset base \
        --minutes 4 --eval-every 250 --mcd logmel --out "$json" ;;
    data)
      step prepare 330 $py bench/prepare.py --hours 10 --workers "$(nproc)" --device cuda --out "$json"
      step separation 90 $py bench/separation.py --device cuda --skip-quality --random-weights --seconds 120 \
        --voices 2 --out "$json" ;;
    f5)
      step f5_step 150 $py bench/f5_step.py --frames 38400 --steps 10 --precision bf16 --out "$json" ;;
    *) echo "unknown phase $phase (paths | tests | f5 | train | rest | quality | data)"; exit 2 ;;
  esac
done
