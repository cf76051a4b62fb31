#!/usr/bin/env bash
# Builds the BytePS fork's own test programs (tests/test_benchmark.cc,
# tests/test_benchmark_stress.cc, tests/test_ipc_benchmark.cc of a
# checkout of github.com/bytedance/ps-lite) unchanged against cbridge and
# runs each as a local job with elasticps local. Their sources are not
# ours to commit, so this is not part of make test; compat_tests has
# programs of our own that use the same API with exact checks
# (test_fork_benchmark, test_fork_stress, test_instance_groups,
# test_ipc_style).
#
#   scripts/run-fork-programs.sh PATH_TO_FORK_CHECKOUT [FILTER]
#
# The fork's programs check what they receive (lens, key ranges, ranks)
# but not values; test_ipc_benchmark loops forever by design, so its case
# passes when it is still running and has reported goodput after
# IPC_SECONDS (default 8), and is then stopped.
#
# PROGS=DIR runs the same cases with programs built elsewhere instead, e.g.
# linked with the fork's own library by scripts/build-fork.sh, to compare
# outcomes (the IPC cases then do not look for van=samehost, which only
# our nodes log).
set -u
FORK=${1:?usage: $0 PATH_TO_FORK_CHECKOUT [FILTER]}
FILTER=${2:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/build/fork-programs}
mkdir -p "$OUT/logs"
[ -f "$FORK/tests/test_benchmark.cc" ] || { echo "$FORK/tests/test_benchmark.cc not found: give a checkout of github.com/bytedance/ps-lite" >&2; exit 2; }

echo "== building the launcher, the bridge and the fork's programs"
(cd "$ROOT" && go build -o bin/elasticps ./cmd/elasticps && make -s -C cbridge) || exit 1
if [ -n "${PROGS:-}" ]; then
  OUT=$PROGS
else
  for p in test_benchmark test_benchmark_stress test_ipc_benchmark; do
    g++ -std=c++14 -O2 -g1 -I "$ROOT/cbridge/include" -o "$OUT/$p" "$FORK/tests/$p.cc" \
      "$ROOT/cbridge/build/libps.a" -lzmq -lpthread -ldl -lm -lrt || exit 1
  done
fi
LOGS=${LOGS:-$ROOT/build/fork-programs/logs}
LAUNCHER=$ROOT/bin/elasticps
pass=0 fail=0 failed=()

# run NAME S W [launcher options] -- PROGRAM [ARGS]
run() {
  local name=$1 s=$2 w=$3
  shift 3
  if [ -n "$FILTER" ] && [[ "$name" != *"$FILTER"* ]]; then return; fi
  local log="$LOGS/$name.log" start=$SECONDS
  if "$LAUNCHER" local -s "$s" -w "$w" --timeout 120s "$@" >"$log" 2>&1; then
    pass=$((pass + 1)); printf 'PASS  %-44s %3ds\n' "$name" $((SECONDS - start))
  else
    fail=$((fail + 1)); failed+=("$name")
    printf 'FAIL  %-44s %3ds  (log: %s)\n' "$name" $((SECONDS - start)) "$log"
    tail -n 20 "$log" | sed 's/^/      /'
  fi
}

# fails NAME PATTERN S W [launcher options] -- PROGRAM [ARGS]: a job the
# fork's program fails on the fork too; passes when the job fails and its
# log shows PATTERN.
fails() {
  local name=$1 pattern=$2 s=$3 w=$4
  shift 4
  if [ -n "$FILTER" ] && [[ "$name" != *"$FILTER"* ]]; then return; fi
  local log="$LOGS/$name.log" start=$SECONDS
  if ! "$LAUNCHER" local -s "$s" -w "$w" --timeout 120s "$@" >"$log" 2>&1 && grep -q -- "$pattern" "$log"; then
    pass=$((pass + 1)); printf 'PASS  %-44s %3ds  (fails as on the fork: %s)\n' "$name" $((SECONDS - start)) "$pattern"
  else
    fail=$((fail + 1)); failed+=("$name")
    printf 'FAIL  %-44s %3ds  (expected a failure with "%s"; log: %s)\n' "$name" $((SECONDS - start)) "$pattern" "$log"
    tail -n 20 "$log" | sed 's/^/      /'
  fi
}

# test_benchmark: argv len repeat mode (0 push then pull, 1 push-pull,
# 2 push only, 3 pull only); TOTAL_DURATION bounds modes 1-3. The program
# needs DMLC_GROUP_SIZE set (unset, its servers create no KVServer).
for g in 1 2; do
  for m in 1x1 2x2; do
    for mode in 0 1 2 3; do
      name="test_benchmark-mode$mode-$m-GROUP_SIZE=$g"
      set -- "${m%x*}" "${m#*x}" --env DMLC_GROUP_SIZE=$g --env NUM_KEY_PER_SERVER=4 --env TOTAL_DURATION=20 \
        --env LOG_DURATION=10 -- "$OUT/test_benchmark" 65536 5 $mode
      if [ "$g" = 2 ] && [ "$m" = 2x2 ]; then
        # StartPS gives the instances of DMLC_RANK=1 the ranks 2 and 3
        # (rank * group size + i), and the program then checks that
        # my_rank() of instance 0 equals DMLC_RANK.
        fails "$name" "Check failed: assigned_rank == my_rank 2 v.s. 1" "$@"
      else
        run "$name" "$@"
      fi
    done
  done
done
run "test_benchmark-mode1-2x2-ENABLE_RECV_BUFFER" 2 2 --env DMLC_GROUP_SIZE=1 --env ENABLE_RECV_BUFFER=1 \
  --env NUM_KEY_PER_SERVER=4 --env TOTAL_DURATION=20 -- "$OUT/test_benchmark" 65536 5 1

# test_benchmark_stress: a scheduler and two joint processes, each with
# its machine's BYTEPS_NODE_ID; argv len repeat.
for t in 1 2; do
  run "test_benchmark_stress-2joint-NTHREAD=$t" 0 2 --env DMLC_NUM_SERVER=2 --env BENCHMARK_NTHREAD=$t \
    --worker-cmd "sh -c 'BYTEPS_NODE_ID=\$ELASTICPS_LOCAL_INDEX DMLC_ROLE=joint exec $OUT/test_benchmark_stress 65536 20'" \
    -- "$OUT/test_benchmark_stress" 65536 20
done

# test_ipc_benchmark: endless; over tcp its BYTEPS_ENABLE_IPC=1 selects the
# same-host van. ipc NAME S W [EXPECTED]: passes when, after IPC_SECONDS,
# every worker reported goodput, the server is on samehost, and no node
# failed; with EXPECTED, when the log shows it instead (a job the program
# fails on the fork too).
ipc() {
  local name=$1 s=$2 w=$3 expected=${4:-}
  if [ -n "$FILTER" ] && [[ "$name" != *"$FILTER"* ]]; then return; fi
  local log="$LOGS/$name.log" start=$SECONDS
  timeout -s INT "${IPC_SECONDS:-8}" "$LAUNCHER" local -s "$s" -w "$w" --env DMLC_PS_VAN_TYPE=tcp --env PS_VERBOSE=1 \
    --env NUM_KEY_PER_SERVER=4 --env LOG_DURATION=20 -- "$OUT/test_ipc_benchmark" 65536 >"$log" 2>&1
  local got ok=no
  got=$(grep -Eo '^\[worker [0-9]+' "$log" | sort -u | while read -r _ id; do grep -q "^\[worker $id.*Application goodput" "$log" && echo ok; done | wc -l)
  if [ -n "$expected" ]; then
    grep -q -- "$expected" "$log" && ok=yes
  elif [ "$got" -eq "$w" ] && { [ -n "${PROGS:-}" ] || grep -q 'van=samehost' "$log"; } &&
    ! grep -Eq 'Check failed|FATAL|panic|KV operation failed' "$log"; then
    ok=yes
  fi
  if [ $ok = yes ]; then
    pass=$((pass + 1)); printf 'PASS  %-44s %3ds%s\n' "$name" $((SECONDS - start)) "${expected:+  (fails as on the fork: $expected)}"
  else
    fail=$((fail + 1)); failed+=("$name")
    printf 'FAIL  %-44s %3ds  (%s of %s workers reported goodput%s; log: %s)\n' "$name" $((SECONDS - start)) "$got" "$w" \
      "${expected:+, expected \"$expected\"}" "$log"
    tail -n 20 "$log" | sed 's/^/      /'
  fi
}
ipc "test_ipc_benchmark-1x1" 1 1
# With two servers the program's handler answers a pull with the key
# relative to its own range (key - krs[rank].begin()), so server 1's
# answers are not the requested keys: the fork's KVWorker aborts, ours
# fails each such pull with a logged error (its Wait returns).
if [ -n "${PROGS:-}" ]; then
  ipc "test_ipc_benchmark-2x2" 2 2 "unmatched keys size from one server"
else
  ipc "test_ipc_benchmark-2x2" 2 2 "that are not a contiguous run of the requested keys"
fi

echo "== $pass passed, $fail failed"
for f in ${failed[@]+"${failed[@]}"}; do echo "   failed: $f"; done
[ "$fail" -eq 0 ]
