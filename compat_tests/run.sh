#!/usr/bin/env bash
# Runs every compatibility scenario as a local job (one scheduler, S
# servers, W workers) with the elasticps launcher, and fails if any fails.
#
#   ./run.sh            everything
#   ./run.sh kv_app     only the cases whose name contains "kv_app"
#
# Programs are built by `make` (in this directory) first. Each case gets
# TIMEOUT (default 120s); its output is kept in build/logs/<case>.log and
# shown when it fails.
set -u
cd "$(dirname "$0")"
HERE=$(pwd)
ROOT=$(cd .. && pwd)
FILTER=${1:-}
TIMEOUT=${TIMEOUT:-120s}
LAUNCHER="$ROOT/bin/elasticps"
# BIN_DIR: where the programs are (build, or build-rdma for the RDMA
# library); COMPAT_ENV: extra KEY=VAL settings for every node, e.g.
# DMLC_ENABLE_RDMA=fabric.
BIN_DIR=${BIN_DIR:-build}
EXTRA=()
for kv in ${COMPAT_ENV:-}; do EXTRA+=(--env "$kv"); done

echo "== building the launcher and the programs"
(cd "$ROOT" && go build -o bin/elasticps ./cmd/elasticps) || exit 1
make -s all BUILDDIR="$BIN_DIR" || exit 1
mkdir -p "$BIN_DIR/logs"

pass=0
fail=0
failed=()

# run NAME S W [launcher options...] -- PROGRAM [ARGS...]
run() {
  local name=$1 s=$2 w=$3
  shift 3
  if [ -n "$FILTER" ] && [[ "$name" != *"$FILTER"* ]]; then
    return
  fi
  local log="$BIN_DIR/logs/$name.log" start=$SECONDS
  if "$LAUNCHER" local -s "$s" -w "$w" --timeout "$TIMEOUT" ${EXTRA[@]+"${EXTRA[@]}"} "$@" >"$log" 2>&1; then
    pass=$((pass + 1))
    printf 'PASS  %-44s %3ds\n' "$name" $((SECONDS - start))
  else
    fail=$((fail + 1))
    failed+=("$name")
    printf 'FAIL  %-44s %3ds  (log: %s)\n' "$name" $((SECONDS - start)) "$HERE/$log"
    tail -n 30 "$log" | sed 's/^/      /'
  fi
}

MATRIX="1x1 2x2 3x2 1x4"
for p in test_connection test_simple_app test_kv_app; do
  for m in $MATRIX; do
    run "$p-${m}" "${m%x*}" "${m#*x}" -- ./$BIN_DIR/$p
  done
done

# Settings that change the node's behaviour, on the KV test.
run "test_kv_app-2x2-DMLC_LOCAL" 2 2 --env DMLC_LOCAL=1 -- ./$BIN_DIR/test_kv_app
run "test_kv_app-2x2-heartbeat" 2 2 --env PS_HEARTBEAT_INTERVAL=1 --env PS_HEARTBEAT_TIMEOUT=30 -- ./$BIN_DIR/test_kv_app
run "test_kv_app-2x2-PS_RESEND" 2 2 --env PS_RESEND=1 -- ./$BIN_DIR/test_kv_app
run "test_kv_app-2x2-PS_VERBOSE" 2 2 --env PS_VERBOSE=2 -- ./$BIN_DIR/test_kv_app

# Two customers in one worker process count as the job's two workers.
run "test_kv_app_multi_workers-1x2" 1 2 --worker-procs 1 -- ./$BIN_DIR/test_kv_app_multi_workers
run "test_kv_app_multi_workers-2x2" 2 2 --worker-procs 1 -- ./$BIN_DIR/test_kv_app_multi_workers

for m in 1x1 2x2 3x2; do
  run "test_mxnet_style-${m}" "${m%x*}" "${m#*x}" -- ./$BIN_DIR/test_mxnet_style
  run "test_byteps_style-${m}" "${m%x*}" "${m#*x}" -- ./$BIN_DIR/test_byteps_style
done

# ps::Customer with a raw receive handle, and Van::Send.
for m in 1x1 2x2 3x2; do
  run "test_customer-${m}" "${m%x*}" "${m#*x}" -- ./$BIN_DIR/test_customer
done

run "test_signals-1x1" 1 1 -- ./$BIN_DIR/test_signals
run "test_signals-2x2" 2 2 -- ./$BIN_DIR/test_signals

run "test_benchmark-1x1" 1 1 --env BENCH_ITERS=20 -- ./$BIN_DIR/test_benchmark
run "test_benchmark-2x2" 2 2 --env BENCH_ITERS=20 -- ./$BIN_DIR/test_benchmark
for f in "$BIN_DIR"/logs/test_benchmark-*.log; do
  [ -f "$f" ] && grep -h "bench " "$f" | sed 's/^/      /'
done

echo "== $pass passed, $fail failed"
if [ "$fail" -ne 0 ]; then
  printf '   failed: %s\n' "${failed[@]}"
  exit 1
fi
