#!/usr/bin/env bash
# The GPU checks and benchmarks, for a CUDA machine borrowed for a few minutes.
#
# All of them in ONE device call (a lease is 15 minutes in all, the machine's start included; a command runs at most
# 10), after `python bench/gpu_carry.py` here has built .gpu/:
#
#   device.run(carry=[".gpu"], command="bash bench/gpu_suite.sh $OUT all", timeout_s=590)
#
# `all` runs five lanes side by side, each in its own process session and TMPDIR, under one deadline (DEADLINE
# seconds from this script's start, default 560: each step is cut to end 5 s before it, what still runs then is
# stopped, and the call ends about 15 s after it, inside the call's 590):
#   A  the `paths` phase: every curator path on cuda (gpu_tests/test_curator_paths.py) but lane D's
#   B  the `tests` phase: the gpu_tests files that take long (test_cuda.py, whatever else is not in QUICK_TESTS) but
#      lane D's
#   D  the `long` phase: LONG_TESTS, long tests of A's and B's that need nothing those lanes make (the transcript
#      check, batched music removal, resume: 100, 180 and 92 s on the H100 suite, where A and B each ended at the
#      deadline; on the first H200 run the deadline cut the transcript check, then last in lane A)
#   C  the `quick` phase (QUICK_TESTS: the short gpu_tests files, those never run on a GPU first), the F5 step beside
#      the reference f5-tts (`f5`: ours compiled, as the trainer runs it, the reference eager, bf16 at 38400 frames,
#      the same batch; the eager ladder's rows, `ladder`, measured on the H100 and H200, are left to a call of that
#      phase alone, as is `compiled`: bf16 eager beside the compiled auto at 40,000 frames, issue 57's >= 1.5x: the
#      F5 step's compilation takes their time), then, once A, B and D are done or
#      only LATE_RESERVE s are left (default 360: on the first H200 run lane C waited 163 s for A and B, which then
#      were cut by the deadline, and its late steps found no time), the OmniVoice step and speech, the MMS step, the
#      ladder's compiled rows and inference (`late`), each only if MIN_STEP s are left (default 45) and cut to what
#      is left.
#   E  the `ttq` phase: time to quality, what a curator's Start gives: Matcha `base` with every setting auto (compile
#      on, as for a 20,000-step run) on ~800 espeak-ng sentences (spoken first, ~2 min), stopped after TTQ_MINUTES
#      (default 6) or what the deadline leaves: held-out MCD (WORLD, through Griffin-Lim) against wall-clock minutes
#      since Start, the warm-up (data, probe, compilation) included, and the warm-up said in one line
# Lane C's and lane E's timings share the card and the cores with the other lanes (the summary says when): compare
# lane C's rows with each other, not with another call's; lane E's minutes are those of a run on a busy machine.
# A lane's step stopped by its own time limit, or a lane stopped by the deadline, touches no other lane. OUT_DIR then
# holds two files (a device call hands back at most 8): suite.tgz (every log, the benches' JSON/PNG, and each
# training run's train.log, metrics.jsonl, config.json and status.json from the runs/ under the lanes' TMPDIRs) and
# summary.txt (pass/fail per test, each step's exit, the bench tables), which is also printed last.
#
# One phase per call, the older way (a phase's limit is its steps' limits together):
#   bash bench/gpu_suite.sh OUT_DIR paths      # every curator path on cuda (gpu_tests/test_curator_paths.py, <= 9 min)
#   bash bench/gpu_suite.sh OUT_DIR tests      # the other gpu_tests files but QUICK_TESTS (test_cuda.py; <= 9 min)
#   bash bench/gpu_suite.sh OUT_DIR quick      # QUICK_TESTS (bf16, fp16, OmniVoice; <= 4 min)
#   bash bench/gpu_suite.sh OUT_DIR f5         # F5-TTS v1 Base step, compiled, beside the reference's, bf16 (<= 4 min)
#   bash bench/gpu_suite.sh OUT_DIR ladder     # the optimization ladder's eager rows: fp32, TF32, bf16 (<= 3 min)
#   bash bench/gpu_suite.sh OUT_DIR compiled   # bf16 eager beside the compiled trainer's auto, base at 40,000 frames
#   bash bench/gpu_suite.sh OUT_DIR late       # MMS step, OmniVoice, the ladder's compiled rows, inference (<= 9 min)
#   bash bench/gpu_suite.sh OUT_DIR train      # the optimization ladder (<= 9 min: three rows compile the model)
#   bash bench/gpu_suite.sh OUT_DIR rest       # batch sweep, profile, inference, vocoder (<= 7 min)
#   bash bench/gpu_suite.sh OUT_DIR quality    # data loading, time to quality (<= 6 min, and <= 4 to speak the corpus)
#   bash bench/gpu_suite.sh OUT_DIR ttq        # time to quality with every setting auto (TTQ_MINUTES, after the corpus)
#   bash bench/gpu_suite.sh OUT_DIR data       # preparation of 10 h (x20 = 200 h), separation speed (<= 7 min)
# each step's output goes to OUT_DIR/<step>.log, and the JSON/PNG of every step so far to OUT_DIR/bench.tgz.
#
# A machine that reaches no package registry gets what it lacks from .gpu/ (wheels, pyworld/pysptk prebuilt for its
# CPython 3.12, espeak-ng): setup() installs it at the start of every call, about 9 s (a machine is given back 30 s
# after a call). STUDIO_GPU_WORKSPACE: a workspace with the espeak-ng dataset `bench` (bench/common.espeak_dataset)
# instead of speaking one. Every step has its own time limit, so one hang costs one step, not the lease.
# A short lease (less than 10 minutes of device time left): choose what must be seen first, side by side as usual:
#   SUITE_PATHS / SUITE_TESTS  lane A's / lane B's test files or node ids (gpu_tests/test_cuda.py::test_..., ...)
#   LONG_TESTS                 lane D's node ids
#   QUICK_TESTS                lane C's test files (default: test_omnivoice.py test_fp16.py test_bf16.py)
#   SUITE_SKIP                 step names not to run (f5_bf16 inference time_to_quality_auto ...); LADDER_ROWS  the
#                              late ladder's rows; TTQ_MINUTES, TTQ_RESERVE  lane E's training budget at most, and
#                              the seconds it leaves before the deadline (default 90)
#   DEADLINE, LATE_RESERVE     e.g. DEADLINE=380 LATE_RESERVE=380: lane C's late steps start at once, beside A and B
# For the CPU test of `all`'s plumbing (tests/test_gpu_carry.py): PYTHON (the interpreter every step runs),
# STUDIO_GPU_CARRY (default .gpu) and STUDIO_GPU_SITE (where it is installed, default /tmp/studio-site).
set -uo pipefail
T0=${SUITE_T0:-$(date +%s)}  # a lane of `all` counts from the suite's start
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/.."
out=$1; shift
mkdir -p "$out" && out=$(cd "$out" && pwd)
# a borrowed machine reaches no registry: the hub's libraries must not wait for it
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} TOKENIZERS_PARALLELISM=false
py=${PYTHON:-python3}  # a borrowed machine's python3 is the one with torch; it may have no `python`
carry=${STUDIO_GPU_CARRY:-.gpu}
site=${STUDIO_GPU_SITE:-/tmp/studio-site}
MIN_STEP=${MIN_STEP:-45}
# lane D's tests under `all`, which lanes A and B then leave out (node ids)
LONG_TESTS=${LONG_TESTS:-"gpu_tests/test_curator_paths.py::test_the_transcript_check_aligns_on_cuda_in_a_process_of_its_own
  gpu_tests/test_curator_paths.py::test_music_removal_batches_its_chunks_on_cuda_as_on_the_cpu
  gpu_tests/test_cuda.py::test_resume_on_gpu_continues_the_loss_curve"}
# lane C's gpu_tests: short, and those never run on a GPU first (lane B's long test_cuda.py may meet the deadline)
QUICK_TESTS=${QUICK_TESTS:-"gpu_tests/test_omnivoice.py gpu_tests/test_fp16.py gpu_tests/test_bf16.py"}
# SUITE_JSON (set by `all` for its lanes): where the benches write their JSON/PNG, kept as files for suite.tgz;
# else a temp folder, packed into OUT_DIR/bench.tgz after each step
json=${SUITE_JSON:-}
failed=0

setup() {  # what $carry holds: wheels (some built for the machine's CPython), source archives, espeak-ng
  [ -d "$carry" ] || return 0
  if [ ! -e "$site/.installed" ]; then
    $py -m pip install -q --no-index --no-deps --no-compile --target "$site" "$carry"/wheels/*.whl || return 3
    if compgen -G "$carry/sdists/*" >/dev/null; then  # no wheel was built for them: built here, against the image's
      $py -m pip install -q --no-index --no-deps --no-build-isolation --target "$site" "$carry"/sdists/* || return 3
    fi
    # a wheel built there (pyworld, pysptk) that does not load here: its source is built (pkg_resources: see
    # utils/evaluation.py)
    local built; built=$(ls "$carry/fallback" 2>/dev/null | sed 's/-[0-9].*//' | paste -sd, -)
    if [ -n "$built" ] && ! PYTHONPATH=$site:$PWD${PYTHONPATH:+:$PYTHONPATH} $py -c "
from utils.evaluation import _allow_pkg_resources; _allow_pkg_resources(); import $built"; then
      echo "the wheels of $built do not load: building their source archives (about a minute)"
      $py -m pip install -q --no-index --no-deps --no-build-isolation --upgrade --target "$site" \
        "$carry"/fallback/* || return 3
    fi
    touch "$site/.installed"
  fi
  export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} PATH=$PWD/$carry/bin:$PATH
  # OmniVoice's packages in their own folder, as a user's `python -m utils.omnivoice.runtime install` makes it (the
  # image's torchaudio runs with its torch, so only the omnivoice wheel is installed)
  export AMHARIC_TTS_OMNIVOICE_PACKAGES=$site/omnivoice-packages
  if [ -d "$carry/omnivoice" ]; then
    $py -m utils.omnivoice.runtime install --wheels "$carry/omnivoice" || return 3
  fi
  # Debian's espeak-ng program on espeakng-loader's library and voices, which need nothing from the system
  export LD_LIBRARY_PATH=$site/espeakng_loader${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export ESPEAK_DATA_PATH=$site/espeakng_loader/espeak-ng-data
  echo "installed from $carry/: $(tr '\n' ' ' < "$carry/CONTENTS.txt")"
  espeak-ng --version || return 3
}

left() {  # seconds to the deadline of `all` (SUITE_END, epoch seconds); a phase run alone has none
  if [ -n "${SUITE_END:-}" ]; then echo $(( SUITE_END - $(date +%s) )); else echo 1000000; fi
}

step() {  # [STEP_SIGNAL=INT] step NAME SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  if [[ " ${SUITE_SKIP:-} " == *" $name "* ]]; then echo "=== $name: skipped (SUITE_SKIP)"; return; fi
  # under a deadline: cut to what is left, less 15 s for the stop (KILL 10 s after the signal) before it
  local rest=$(( $(left) - 15 ))
  if [ "$rest" -lt "$(( limit < MIN_STEP ? limit : MIN_STEP ))" ]; then
    echo "=== $name: skipped, $rest s left before the deadline"; return
  fi
  [ "$limit" -le "$rest" ] || limit=$rest
  echo "=== $name ($(date +%T), limit ${limit}s): $*"
  # SIGTERM asks the trainer for a graceful stop, SIGINT makes pytest print its summary; a hung step never reaches
  # either: KILL 10 s later
  local mark="SUITE_STEP=$name.$$.$RANDOM"
  env "$mark" timeout -k 10 -s "${STEP_SIGNAL:-TERM}" "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$? cut=
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && cut=" (cut at its ${limit} s limit${STEP_CUT_NOTE:-})"
  echo "=== $name: exit $rc after $(( $(date +%s) - T0 )) s in all$cut"
  # what the step started in sessions of their own (utils/jobs.py's trainers) and left behind when it was stopped
  local left_behind; left_behind=$(procs_with "$mark")
  if [ -n "$left_behind" ]; then
    echo "=== $name: stopping what it left running:" $left_behind
    stop $left_behind
  fi
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
  tail -n 40 "$out/$name.log"
  [ -n "${SUITE_JSON:-}" ] || tar czf "$out/bench.tgz" -C "$json" .
}

gpu_tests() {  # [TESTS_LIMIT=S] gpu_tests NAME FILE...: pytest on cuda, a per-test limit where pytest-timeout is there
  local name=$1; shift
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  $py -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  # per test: the first one speaks nothing yet but trains its voices (start-up, the probe, kernels): minutes
  local per_test=(); $py -c "import pytest_timeout" 2>/dev/null && per_test=(--timeout 300)
  # a trainer takes the signal as a graceful stop: the test then running reads FAILED in the log, yet was cut
  STEP_CUT_NOTE=": the test then running was stopped, not failed" STEP_SIGNAL=INT \
    step "$name" "${TESTS_LIMIT:-540}" $py -m pytest "$@" -v -rfE --durations=10 -p no:cacheprovider "${per_test[@]}"
}

long_tests() {  # every gpu_tests file but the curator paths (lane A's) and QUICK_TESTS (lane C's)
  local f; for f in gpu_tests/test_*.py; do
    [ "$f" = gpu_tests/test_curator_paths.py ] || [[ " $QUICK_TESTS " == *" $f "* ]] || echo "$f"; done
}

procs_with() {  # procs_with NAME=VALUE: the processes whose environment holds it, which every child inherits: also
  # those in sessions of their own, and those whose parent is gone
  grep -lzxF "$1" /proc/[0-9]*/environ 2>/dev/null | sed 's|^/proc/||; s|/environ$||' | grep -vx "$$"
}

stop() {  # stop PID...: TERM, and KILL 5 s later to any that is still there
  kill -TERM "$@" 2>/dev/null
  local i; for i in 1 2 3 4 5; do kill -0 "$@" 2>/dev/null || return 0; sleep 1; done
  kill -KILL "$@" 2>/dev/null
}

run_all() {  # the four lanes under one deadline, then suite.tgz and summary.txt (see the top of this file)
  local work; work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-suite.XXXXXX")
  export SUITE_T0=$T0 SUITE_END=$(( T0 + ${DEADLINE:-560} ))
  {
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    echo "$(nproc) cores"; free -g | head -2
    $py -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
    setup; local rc=$?; echo "setup: exit $rc after $(( $(date +%s) - T0 )) s"
  } > "$work/setup.log" 2>&1
  cat "$work/setup.log"
  local t deselect=()  # lane D's tests, which lanes A and B leave out
  for t in $LONG_TESTS; do deselect+=(--deselect "$t"); done
  local tests=($(long_tests) "${deselect[@]}")
  [ -z "${SUITE_TESTS:-}" ] || tests=($SUITE_TESTS)  # a chosen few (node ids too), when the lease is short
  declare -A pid status
  lane() {  # lane NAME PHASE...: this script on those phases, in its own session and TMPDIR
    local name=$1; shift
    mkdir -p "$work/$name" "$work/tmp-$name"
    SUITE_LANE=$work/$name TMPDIR=$work/tmp-$name SUITE_JSON=$work/$name/json \
      setsid -w bash "$self" "$work/$name" "$@" > "$work/$name.log" 2>&1 < /dev/null &
    pid[$name]=$!
    echo "lane $name ($*) started at $(( $(date +%s) - T0 )) s: pid ${pid[$name]}"
  }
  local n alive lanes="A B C D E"
  local paths=${SUITE_PATHS:-"gpu_tests/test_curator_paths.py ${deselect[*]}"}
  if grep -q "^setup: exit 0 " "$work/setup.log"; then
    SUITE_PATHS=$paths lane A paths
    SUITE_TESTS="${tests[*]}" lane B tests
    lane D long
    lane E ttq
    SUITE_WAIT="${pid[A]} ${pid[B]} ${pid[D]}" lane C quick f5 late
  else
    for n in $lanes; do status[$n]="not started: setup failed"; pid[$n]=; done
  fi
  while :; do
    alive=0; for n in $lanes; do [ -n "${pid[$n]}" ] && kill -0 "${pid[$n]}" 2>/dev/null && alive=1; done
    [ "$alive" = 1 ] && [ "$(left)" -gt 0 ] || break
    sleep 1
  done
  local stopping=()
  for n in $lanes; do
    [ -n "${pid[$n]}" ] || continue
    if kill -0 "${pid[$n]}" 2>/dev/null; then
      status[$n]="stopped at the deadline ($(( $(date +%s) - T0 )) s)"
    fi
    # a lane ended, or stopped now: nothing of it may keep the GPU (a trainer in a session of its own)
    stopping+=($(procs_with "SUITE_LANE=$work/$n"))
  done
  if [ ${#stopping[@]} -gt 0 ]; then echo "stopping the lanes' processes:" "${stopping[@]}"; stop "${stopping[@]}"; fi
  for n in $lanes; do
    if [ -n "${pid[$n]}" ]; then wait "${pid[$n]}"; local rc=$?; fi
    status[$n]=${status[$n]:-"exit $rc"}
    echo "lane $n: ${status[$n]}"
  done
  nvidia-smi --query-gpu=memory.used --format=csv > "$work/after.txt" 2>&1

  {
    echo "gpu_suite.sh all: deadline ${DEADLINE:-560} s, ended at $(( $(date +%s) - T0 )) s"
    grep -E "^(setup|installed)" "$work/setup.log" | cut -c1-300
    echo "lane A (paths: $paths): ${status[A]}"
    echo "lane B (tests: ${tests[*]}): ${status[B]}"
    echo "lane C (quick: $QUICK_TESTS; f5, late): ${status[C]}"
    echo "lane D (long: $(echo $LONG_TESTS)): ${status[D]}"
    echo "lane E (ttq: Matcha base, every setting auto, ${TTQ_MINUTES:-6} min at most): ${status[E]}"
    local log outcome="::.* (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)|^(FAILED|ERROR) |^=+ .*[0-9.]+s|Timeout"
    for log in "$work/A/gpu_paths.log" "$work/B/gpu_tests.log" "$work/C/gpu_quick.log" "$work/D/gpu_long.log"; do
      echo "--- ${log#"$work"/}"
      [ -f "$log" ] && grep -E "$outcome" "$log" | cut -c1-200
    done
    for n in $lanes; do
      echo "--- lane $n's steps"
      grep -E "^=== .*(exit|skipped|stopping)|^=== the other lanes" "$work/$n.log" | cut -c1-200
    done
    for log in "$work"/C/*.log "$work"/E/*.log; do
      [ -f "$log" ] || continue
      echo "--- ${log#"$work"/}"
      grep -E "^\||^ours vs|^  [^ ].*ms/step|^goals|steps in .* min; best MCD" "$log" | head -n 40
    done
  } > "$work/summary.txt" 2>&1
  cp "$work/summary.txt" "$out/summary.txt"
  # every log, JSON and PNG, and the small files of each training run under the lanes' TMPDIRs
  (cd "$work" && { find . -path ./tmp-\* -prune -o -type f -print
                   find ./tmp-* -path "*/runs/*" -size -3M \( -name train.log -o -name metrics.jsonl \
                     -o -name config.json -o -name status.json \) 2>/dev/null; }) > "$work/files.txt"
  tar czf "$out/suite.tgz" -C "$work" -T "$work/files.txt"
  echo "##### $out: $(ls "$out" | tr '\n' ' ')($(du -sh "$out/suite.tgz" | cut -f1) archive)"
  cat "$out/summary.txt"
  rm -rf "$work"
  for n in $lanes; do [[ ${status[$n]} == "exit 0" ]] || return 1; done
}

if [ "$*" = all ]; then
  run_all
  exit
fi
setup || exit 3
[ -n "$json" ] || json=$(mktemp -d)
mkdir -p "$json"

ws=${STUDIO_GPU_WORKSPACE:-}
if [ -z "$ws" ] && [[ " $* " == *" quality "* || " $* " == *" ttq "* ]]; then  # the time to quality corpus
  ws=$(mktemp -d)
  echo "=== speaking the corpus into $ws ($(date +%T))"
  timeout -k 10 240 $py -c "import sys; sys.path.insert(0, 'bench'); import common; common.espeak_dataset('$ws', 780, 20, 110)" \
    > "$out/corpus.log" 2>&1 || { tail -n 20 "$out/corpus.log"; exit 3; }
fi
data=()
[ -n "$ws" ] && data=(--dataset bench --workspace "$ws")

for phase in "$@"; do
  case $phase in
    paths)  # SUITE_PATHS: other test files or node ids for this lane (a short lease: what must be seen first)
      gpu_tests gpu_paths ${SUITE_PATHS:-gpu_tests/test_curator_paths.py} ;;
    long)  # LONG_TESTS (`all`'s lane D; lanes A and B then leave them out)
      gpu_tests gpu_long $LONG_TESTS ;;
    tests)  # the gpu_tests files but the curator paths and QUICK_TESTS (`all` passes the list in SUITE_TESTS)
      files=(${SUITE_TESTS:-}); [ ${#files[@]} -gt 0 ] || files=($(long_tests))
      gpu_tests gpu_tests "${files[@]}" ;;
    quick)
      TESTS_LIMIT=300 gpu_tests gpu_quick $QUICK_TESTS ;;  # 242 s on the H100 suite
    f5)  # ours compiled (as the trainer runs it with compile on) beside the reference f5-tts, eager as it trains,
      # at the published per-GPU batch in bf16 (ours eager: 621 vs 585 ms on the H200, bench/RESULTS.md; fp32: the
      # first run)
      step f5_bf16 240 $py bench/f5_step.py --frames 38400 --steps 10 --precision bf16 --compile --reference \
        --out "$json" ;;
    ladder)  # what bf16 buys over fp32 eager and TF32, side by side in one process (issue 42's >= 1.3x): at the
      # first run's 16,000 frames, and at the 40,000 an H100's run takes in one micro-batch (bench/op_count.py: bf16
      # launches a third more kernels, its casts; the more frames, the more work each launch carries)
      step ladder_eager 150 $py bench/train_throughput.py --preset base --frames 16000 --steps 10 --warmup 4 \
        --rows fp32,tf32,bf16 --out "$json"
      step ladder_eager_40k 150 $py bench/train_throughput.py --preset base --frames 40000 --steps 8 --warmup 3 \
        --rows fp32,tf32,bf16 --out "$json/40k" ;;
    compiled)  # issue 57's goal, compiled >= 1.5x bf16 eager at the trainer's micro-batch: the two side by side in one
      # process at 40,000 frames (the eager ladder's other rows: the H100 and H200 runs, bench/RESULTS.md)
      step ladder_compiled_40k 240 $py bench/train_throughput.py --preset base --frames 40000 --steps 8 --warmup 3 \
        --rows bf16,speed --out "$json/40k" ;;
    late)  # under `all`: once lanes A, B and D (SUITE_WAIT) are done, or only LATE_RESERVE s are left
      busy=
      for p in ${SUITE_WAIT:-}; do
        while kill -0 "$p" 2>/dev/null && [ "$(left)" -gt "${LATE_RESERVE:-360}" ]; do sleep 2; done
        kill -0 "$p" 2>/dev/null && busy=1
      done
      if [ -n "$busy" ]; then
        echo "=== the other lanes not done at $(( $(date +%s) - T0 )) s, $(left) s left: these steps share the GPU" \
          "with them"
      elif [ -n "${SUITE_WAIT:-}" ]; then
        echo "=== the other lanes done at $(( $(date +%s) - T0 )) s, $(left) s left"
      fi
      # the first sound on a GPU (issue 57's item 8, never measured there): first, as the other steps may not all fit
      step inference 150 $py bench/inference.py --presets base --batch 1 8 --e2e-sentences 24 --out "$json"
      # the released base's shapes (613 M, random weights) at the recipe's 8192 positions: bf16, and a T4's fp16
      # (never run on a GPU yet, so before the MMS step, which the first H200 run measured)
      step omnivoice_step 150 $py bench/omnivoice_step.py --tokens 8192 --steps 6 --full-random --precision bf16 fp16 \
        --out "$json"
      step omnivoice_speak 90 $py bench/omnivoice_speak.py --steps 16 32 --sizes full --out "$json"
      # the loader worker that died at 16 clips (issue 42): the real size, 8 workers
      step mms_step 240 $py bench/mms_step.py --clips 4 16 --steps 6 --out "$json"
      # the compiled rows (the speed and memory configurations: their peak memory), minutes of compiling each
      step train_ladder 300 $py bench/train_throughput.py --preset base --frames 16000 --steps 10 --warmup 4 \
        --rows "${LADDER_ROWS:-speed,memory}" --out "$json" ;;
    train)
      step train_throughput 530 $py bench/train_throughput.py --preset base --frames 16000 --steps 15 --warmup 5 \
        --out "$json" ;;
    rest)
      step batch_sweep 120 $py bench/batch_sweep.py --preset base --out "$json"
      step profile_step 70 $py bench/profile_step.py --preset base --frames 16000 --out "$json"
      step inference 90 $py bench/inference.py --presets base --batch 1 8 --e2e-sentences 24 --out "$json"
      step vocoder_throughput 90 $py bench/vocoder_throughput.py --devices cuda --seconds 10 --train-batch 16 \
        --train-repeat 5 --out "$json" ;;
    ttq)  # lane E of `all`: TTQ_MINUTES of training at most, less where the deadline leaves less (after the corpus)
      # TTQ_RESERVE: what the end takes after the budget (the step then running, the last evaluation, the save, the
      # report); the budget is the trainer's own max_minutes, so a run that meets no scheduled evaluation still scores
      budget=$(( $(left) - ${TTQ_RESERVE:-90} ))
      [ "$budget" -le $(( ${TTQ_MINUTES:-6} * 60 )) ] || budget=$(( ${TTQ_MINUTES:-6} * 60 ))
      if [ "$budget" -lt "$MIN_STEP" ]; then
        echo "=== time_to_quality_auto: skipped, a budget of $budget s is left"; continue
      fi
      echo "=== time to quality: a budget of $budget s from Start, $(( $(date +%s) - T0 )) s into the call (setup," \
        "corpus)"
      step time_to_quality_auto $(( budget + ${TTQ_RESERVE:-90} - 15 )) $py bench/time_to_quality.py "${data[@]}" \
        --defaults --preset base \
        --minutes "$(awk "BEGIN { print $budget / 60 }")" --eval-every 500 --thresholds 12 10 8 7 6 5 4.5 \
        --out "$json" ;;
    quality)
      step data_loading 60 $py bench/data_loading.py "${data[@]}" --workers 0 2 4 8 --step-ms 40 \
        --out "$json"
      step time_to_quality 300 $py bench/time_to_quality.py "${data[@]}" --preset base \
        --minutes 4 --eval-every 250 --mcd logmel --out "$json" ;;
    data)
      step prepare 330 $py bench/prepare.py --hours 10 --workers "$(nproc)" --device cuda --out "$json"
      step separation 90 $py bench/separation.py --device cuda --skip-quality --random-weights --seconds 120 \
        --voices 2 --out "$json" ;;
    *) echo "unknown phase $phase (all | paths | long | tests | quick | f5 | ladder | compiled | late | train |" \
         "rest | quality | ttq | data)"
       exit 2 ;;
  esac
done
[ "$failed" -eq 0 ]
