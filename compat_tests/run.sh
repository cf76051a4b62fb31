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
# DMLC_ENABLE_RDMA=fabric; ELASTICPS_TAGS: build tags for the elasticps
# binary (rdma, when its nodes use the RDMA van too).
BIN_DIR=${BIN_DIR:-build}
EXTRA=()
for kv in ${COMPAT_ENV:-}; do EXTRA+=(--env "$kv"); done

echo "== building the launcher and the programs"
(cd "$ROOT" && go build ${ELASTICPS_TAGS:+-tags "$ELASTICPS_TAGS"} -o bin/elasticps ./cmd/elasticps) || exit 1
make -s -j"$(nproc)" all BUILDDIR="$BIN_DIR" || exit 1
mkdir -p "$BIN_DIR/logs"

pass=0
fail=0
failed=()

# The RDMA run (COMPAT_ENV set) is for the transport: the cases that test
# the API more than the van run there at fewer sizes and settings (the
# default run has them all). api_only: true there.
api_only() { [ -n "${COMPAT_ENV:-}" ]; }

# run NAME S W [launcher options...] -- PROGRAM [ARGS...]
# With LOG_CHECK set to a command, a job that passed must also pass
# LOG_CHECK LOG, which prints why when it fails.
run() {
  local name=$1 s=$2 w=$3 why=""
  shift 3
  if [ -n "$FILTER" ] && [[ "$name" != *"$FILTER"* ]]; then
    return
  fi
  local log="$BIN_DIR/logs/$name.log" start=$SECONDS
  if "$LAUNCHER" local -s "$s" -w "$w" --timeout "$TIMEOUT" ${EXTRA[@]+"${EXTRA[@]}"} "$@" >"$log" 2>&1 &&
    { [ -z "${LOG_CHECK:-}" ] || why=$($LOG_CHECK "$log"); }; then
    pass=$((pass + 1))
    printf 'PASS  %-44s %3ds\n' "$name" $((SECONDS - start))
  else
    fail=$((fail + 1))
    failed+=("$name")
    printf 'FAIL  %-44s %3ds  (%slog: %s)\n' "$name" $((SECONDS - start)) "${why:+$why; }" "$HERE/$log"
    tail -n 30 "$log" | sed 's/^/      /'
  fi
}

MATRIX="1x1 2x2 3x2 1x4"
for p in test_connection test_simple_app test_kv_app; do
  for m in $MATRIX; do
    if api_only && [ "$p" != test_kv_app ] && [[ " 3x2 1x4 " == *" $m "* ]]; then continue; fi
    run "$p-${m}" "${m%x*}" "${m#*x}" -- ./$BIN_DIR/$p
  done
done

# Settings that change the node's behaviour, on the KV test.
api_only || run "test_kv_app-2x2-DMLC_LOCAL" 2 2 --env DMLC_LOCAL=1 -- ./$BIN_DIR/test_kv_app
run "test_kv_app-2x2-heartbeat" 2 2 --env PS_HEARTBEAT_INTERVAL=1 --env PS_HEARTBEAT_TIMEOUT=30 -- ./$BIN_DIR/test_kv_app
run "test_kv_app-2x2-PS_RESEND" 2 2 --env PS_RESEND=1 -- ./$BIN_DIR/test_kv_app
api_only || run "test_kv_app-2x2-PS_VERBOSE" 2 2 --env PS_VERBOSE=2 -- ./$BIN_DIR/test_kv_app

# Two customers in one worker process count as the job's two workers.
run "test_kv_app_multi_workers-1x2" 1 2 --worker-procs 1 -- ./$BIN_DIR/test_kv_app_multi_workers
run "test_kv_app_multi_workers-2x2" 2 2 --worker-procs 1 -- ./$BIN_DIR/test_kv_app_multi_workers

# A custom request handler without a state hook is no concern outside an
# elastic job: nothing may warn about it there.
no_state_hook_warning() {
  if grep -q 'the request handler has no state hook' "$1"; then
    echo "a job without PS_ELASTIC logged the elastic state-hook warning"
    return 1
  fi
}
for m in 1x1 2x2 3x2; do
  if api_only && [ "$m" = 3x2 ]; then continue; fi
  LOG_CHECK=no_state_hook_warning run "test_mxnet_style-${m}" "${m%x*}" "${m#*x}" -- ./$BIN_DIR/test_mxnet_style
  run "test_byteps_style-${m}" "${m%x*}" "${m#*x}" -- ./$BIN_DIR/test_byteps_style
done

# An MXNet dist_async-style program (push, then pull) whose C++ servers
# synchronize by PS_SYNC_MODE alone; a straggling worker; the bound holds.
run "test_sync_async-2x2-ssp" 2 2 --env PS_SYNC_MODE=ssp --env PS_STALENESS=2 -- ./$BIN_DIR/test_sync_async
run "test_sync_async-2x2-fluent" 2 2 --env PS_SYNC_MODE=fluent --env PS_STALENESS=2 --env PS_PAUSE_PROB=1 -- ./$BIN_DIR/test_sync_async

# The BytePS fork's benchmark API (test_fork_benchmark: modes 0 push then
# pull, 1 push and pull, 2 push only, 3 pull only; 4 KiB values, 2 keys per
# server, 3 rounds; exact sums), with and without registered receive
# buffers; custom slicers (set_slicer); RegisterRecvBuffer[WithRank].
for m in 1x1 2x2; do
  for mode in 0 1 2 3; do
    if api_only && [ "$m" = 1x1 ] && [ "$mode" != 1 ]; then continue; fi
    run "test_fork_benchmark-mode${mode}-${m}" "${m%x*}" "${m#*x}" --env NUM_KEY_PER_SERVER=2 --env TOTAL_DURATION=3 -- ./$BIN_DIR/test_fork_benchmark 4096 3 "$mode"
  done
done
# Instance groups (DMLC_GROUP_SIZE=2): every instance's rank, KVServer and
# KVWorker per instance, exact sums per instance plane.
for m in 1x1 2x2; do
  run "test_instance_groups-${m}" "${m%x*}" "${m#*x}" --env DMLC_GROUP_SIZE=2 -- ./$BIN_DIR/test_instance_groups
done
run "test_fork_benchmark-mode1-2x2-ENABLE_RECV_BUFFER" 2 2 --env ENABLE_RECV_BUFFER=1 -- ./$BIN_DIR/test_fork_benchmark 4096 3 1
for m in 1x1 2x2 3x2; do
  if api_only && [ "$m" = 3x2 ]; then continue; fi
  run "test_slicer-${m}" "${m%x*}" "${m#*x}" -- ./$BIN_DIR/test_slicer
done
for m in 1x1 2x2; do
  run "test_recv_buffer-${m}" "${m%x*}" "${m#*x}" -- ./$BIN_DIR/test_recv_buffer
done

# The fork's IPC benchmark (test_ipc_style): workers push from and pull
# into POSIX shared-memory segments of their own; the program setenv()s
# BYTEPS_ENABLE_IPC=1 before StartPS, which over the TCP van makes every
# node use van/samehost (shm to this host's peers); with
# BYTEPS_ENABLE_IPC=0 they stay on tcp. The servers' logs say which.
# ipc_van_check VAN LOG
ipc_van_check() {
  local want=$1 log=$2
  if ! grep -Eq '^\[server 0( rank [0-9]+)?\].*server up.* van='"$want"'( |$)' "$log"; then
    echo "server 0 did not come up on the $want van"
    return 1
  fi
}
if [ -z "${COMPAT_ENV:-}" ]; then
  for m in 1x2 2x2; do
    LOG_CHECK="ipc_van_check samehost" run "test_ipc_style-${m}" "${m%x*}" "${m#*x}" --env DMLC_PS_VAN_TYPE=tcp --env PS_VERBOSE=1 -- ./$BIN_DIR/test_ipc_style
  done
  LOG_CHECK="ipc_van_check tcp" run "test_ipc_style-2x2-BYTEPS_ENABLE_IPC=0" 2 2 --env DMLC_PS_VAN_TYPE=tcp --env BYTEPS_ENABLE_IPC=0 --env PS_VERBOSE=1 -- ./$BIN_DIR/test_ipc_style
fi
# On the default van (zmq) IPC does not apply, as in the fork (whose IPC
# is part of its RDMA van).
api_only || run "test_ipc_style-2x2-zmq" 2 2 -- ./$BIN_DIR/test_ipc_style

# ps::Customer with a raw receive handle, and Van::Send.
for m in 1x1 2x2 3x2; do
  if api_only && [ "$m" = 3x2 ]; then continue; fi
  run "test_customer-${m}" "${m%x*}" "${m#*x}" -- ./$BIN_DIR/test_customer
done

# Every way KVWorker::Wait ends: spinning (PS_WAIT_SPIN_US, one request in
# flight), blocking, a failed request, a node that stops; and the KV
# sequence with Wait never spinning.
api_only || run "test_wait-1x1" 1 1 -- ./$BIN_DIR/test_wait
run "test_wait-2x2" 2 2 -- ./$BIN_DIR/test_wait
run "test_wait-2x2-PS_WAIT_SPIN_US=0" 2 2 --env PS_WAIT_SPIN_US=0 -- ./$BIN_DIR/test_wait
run "test_kv_app-2x2-PS_WAIT_SPIN_US=0" 2 2 --env PS_WAIT_SPIN_US=0 -- ./$BIN_DIR/test_kv_app
# The same through the bridge over the TCP van.
if [ -z "${COMPAT_ENV:-}" ]; then
  run "test_wait-2x2-tcp" 2 2 --env DMLC_PS_VAN_TYPE=tcp -- ./$BIN_DIR/test_wait
  run "test_kv_app-2x2-tcp-PS_WAIT_SPIN_US=0" 2 2 --env DMLC_PS_VAN_TYPE=tcp --env PS_WAIT_SPIN_US=0 -- ./$BIN_DIR/test_kv_app
fi

# A C++ server over the TCP van lowers GOMAXPROCS when its job shares the
# host (three nodes on this one) and gives it back once a thread of the
# program itself calls into Go: test_kv_app answers inside its handler
# (not restored), test_byteps_style from an engine thread of its own
# (restored). Workers never lower it. Needs two CPUs or more.
# cpushare_check RESTORED LOG
cpushare_check() {
  local restored=$1 log=$2
  if ! grep -Eq '^\[server 0( rank [0-9]+)?\].*GOMAXPROCS lowered' "$log"; then
    echo "the server did not lower GOMAXPROCS"
  elif [ "$restored" = yes ] && ! grep -Eq '^\[server 0( rank [0-9]+)?\].*GOMAXPROCS restored: a thread of the program calls KVServer::Response' "$log"; then
    echo "the server did not restore GOMAXPROCS when its engine thread answered"
  elif [ "$restored" = no ] && grep -q 'GOMAXPROCS restored' "$log"; then
    echo "GOMAXPROCS was restored, but only the bridge's threads called into Go"
  elif grep -Eq '^\[worker 0( rank [0-9]+)?\].*GOMAXPROCS lowered' "$log"; then
    echo "a worker lowered GOMAXPROCS"
  else
    return 0
  fi
  return 1
}
# cpushare NAME PROGRAM RESTORED
cpushare() {
  if [ -z "${COMPAT_ENV:-}" ] && [ "$(nproc)" -ge 2 ] && [ -z "${GOMAXPROCS:-}" ]; then
    LOG_CHECK="cpushare_check $3" run "$1" 1 1 --env DMLC_PS_VAN_TYPE=tcp --env PS_VERBOSE=1 -- "./$BIN_DIR/$2"
  fi
}
cpushare "test_kv_app-1x1-tcp-cpushare" test_kv_app no
cpushare "test_byteps_style-1x1-tcp-cpushare" test_byteps_style yes

# BytePS's suspend/resume: every process finalizes and starts again with
# another DMLC_NUM_WORKER (2 workers, then 3; the store outlives it).
for m in 1x3 2x3; do
  rm -f "$BIN_DIR/logs/test_suspend_resume-$m.signal"
  run "test_suspend_resume-$m" "${m%x*}" "${m#*x}" --env "SR_SIGNAL=$HERE/$BIN_DIR/logs/test_suspend_resume-$m.signal" -- ./$BIN_DIR/test_suspend_resume
done

# The BytePS fork's JOINT role: a scheduler and joint processes (each a
# server and a worker, counted in DMLC_NUM_SERVER and DMLC_NUM_WORKER).
for n in 1 2 3; do
  if api_only && [ "$n" = 1 ]; then continue; fi
  run "test_joint-$n" 0 "$n" --env "DMLC_NUM_SERVER=$n" --worker-cmd "env DMLC_ROLE=joint ./$BIN_DIR/test_joint" -- ./$BIN_DIR/test_joint
done
# The fork's request fields (KVMeta key/addr/val_len/option) in the job of
# its test_benchmark_stress: joint processes, two threads on one KVWorker.
for n in 2 3; do
  if api_only && [ "$n" = 2 ]; then continue; fi
  run "test_fork_stress-$n" 0 "$n" --env "DMLC_NUM_SERVER=$n" --worker-cmd "env DMLC_ROLE=joint ./$BIN_DIR/test_fork_stress" -- ./$BIN_DIR/test_fork_stress
done

api_only || run "test_signals-1x1" 1 1 -- ./$BIN_DIR/test_signals
run "test_signals-2x2" 2 2 -- ./$BIN_DIR/test_signals

# The transport benchmark's matrix through the bridge, next to Go-native
# nodes (a short run: this checks that it works and that pulled bytes are
# right; speed is measured with longer runs, see cbridge/README.md).
bench_van=zmq
case " ${COMPAT_ENV:-} " in *" DMLC_ENABLE_RDMA=fabric "*) bench_van=fabric ;; esac
if [ -z "$FILTER" ] || [[ "test_benchmark" == *"$FILTER"* ]]; then
  log="$BIN_DIR/logs/test_benchmark.log" start=$SECONDS
  if timeout "$TIMEOUT" "$LAUNCHER" bench --van "$bench_van" --topo 1x1,2x2 --ops 20 --go-thread --cxx "c++=./$BIN_DIR/test_benchmark" >"$log" 2>&1; then
    pass=$((pass + 1))
    printf 'PASS  %-44s %3ds\n' "test_benchmark-1x1,2x2" $((SECONDS - start))
    grep -E "c\+\+|go-thread" "$log" | sed 's/^/      /'
  else
    fail=$((fail + 1))
    failed+=("test_benchmark")
    printf 'FAIL  %-44s %3ds  (log: %s)\n' "test_benchmark-1x1,2x2" $((SECONDS - start)) "$HERE/$log"
    tail -n 30 "$log" | sed 's/^/      /'
  fi
fi

# Elastic mode: C++ workers through the bridge, an elasticps scheduler,
# key ranges moved by `elasticps ctl move` while the workers push.
# elastic NAME ATTEMPT [launcher options]: the elastic case, with the
# servers given by the options (elasticps by default, the C++ program
# otherwise, ELASTIC_SERVER choosing its handler). The scheduler is
# 'elasticps scheduler', or with ELASTIC_CXX_SCHEDULER=1 the C++ program
# itself (the library runs the coordinator and control API), and then
# 'elasticps ctl status' must reach it too.
elastic() {
  local name=$1 attempt=$2
  shift 2
  if [ -n "$FILTER" ] && [[ "$name" != *"$FILTER"* ]]; then
    return
  fi
  local port=$((20000 + RANDOM % 20000)) log="$BIN_DIR/logs/$name.log" start=$SECONDS
  local ctl=("$LAUNCHER" ctl --addr "127.0.0.1:$((port + 1))") sched=(--scheduler-cmd "$LAUNCHER scheduler")
  local cxxsched=${ELASTIC_CXX_SCHEDULER:-0} status=1
  if [ "$cxxsched" = 1 ]; then
    sched=()
    status=0
  fi
  "$LAUNCHER" local -s 2 -w 2 --port "$port" --timeout "$TIMEOUT" ${EXTRA[@]+"${EXTRA[@]}"} \
    --env PS_ELASTIC=1 --env "PS_CTL_ADDR=127.0.0.1:$((port + 1))" --env PS_BALANCE_INTERVAL=600000 --env ELASTIC_ROUNDS=1500 \
    ${sched[@]+"${sched[@]}"} "$@" -- "./$BIN_DIR/test_elastic" >"$log" 2>&1 &
  local job=$!
  local moved=0 tries=0
  # ctl status reaches the scheduler (its output has a file of its own, as
  # the launcher's later writes would overwrite it in the job's log)
  while [ "$status" -eq 0 ] && [ "$tries" -lt 300 ] && kill -0 "$job" 2>/dev/null; do
    tries=$((tries + 1))
    "${ctl[@]}" status >"$log.status" 2>&1 && grep -q "^routing epoch" "$log.status" && status=1 || sleep 0.05
  done
  # once the job is up, move server 8's and server 10's first keys back and
  # forth (8 moves, keys coming back to servers that held them) while the
  # workers push; the second range starts at 2^63-1, which bash arithmetic
  # would overflow, hence the literals.
  # The generic hand-over (fallback) cannot bring a key back to a server
  # that held it: there, every move is a new key to the other server.
  local forward=(
    "0 1 10" "9223372036854775807 9223372036854775808 8"
    "1 2 10" "9223372036854775808 9223372036854775809 8"
    "2 3 10" "9223372036854775809 9223372036854775810 8"
    "3 4 10" "9223372036854775810 9223372036854775811 8")
  while [ "$moved" -lt 8 ] && [ "$tries" -lt 300 ] && kill -0 "$job" 2>/dev/null; do
    tries=$((tries + 1))
    if [[ "$name" == *fallback* ]]; then
      # shellcheck disable=SC2086
      "${ctl[@]}" move ${forward[$moved]} >>"$log" 2>&1 && moved=$((moved + 1)) || sleep 0.05
      continue
    fi
    local to=10 to1=8
    if [ $((moved % 4)) -ge 2 ]; then to=8 to1=10; fi
    if [ $((moved % 2)) -eq 0 ]; then
      "${ctl[@]}" move 0 3 "$to" >>"$log" 2>&1 && moved=$((moved + 1)) || sleep 0.05
    else
      "${ctl[@]}" move 9223372036854775807 9223372036854775810 "$to1" >>"$log" 2>&1 && moved=$((moved + 1)) || sleep 0.05
    fi
  done
  local ok=0
  wait "$job" && ok=1
  if [ "$attempt" -eq 1 ] && ! grep -q "COMPAT FAIL" "$log" &&
    { [ "$ok" -eq 0 ] && grep -qi "address already in use" "$log" || [ "$moved" -lt 8 ]; }; then
    # the random port was taken, or the job ended before the moves were
    # done (no wrong value seen): once more, on another port
    echo "      ($name: port $port in use or only $moved moves before the job ended; running it again)"
    elastic "$name" 2 "$@"
    return
  fi
  if [ "$ok" -eq 1 ] && [ "$moved" -ge 8 ] && [ "$status" -eq 1 ] && [ "$(grep -c 'exact sums' "$log")" -eq 2 ] &&
    { [ "$cxxsched" != 1 ] || ! grep -q "ERROR" "$log"; }; then
    pass=$((pass + 1))
    printf 'PASS  %-44s %3ds  (%d moves)\n' "$name" $((SECONDS - start)) "$moved"
  else
    fail=$((fail + 1))
    failed+=("$name")
    printf 'FAIL  %-44s %3ds  (%d moves, ctl status %d; log: %s)\n' "$name" $((SECONDS - start)) "$moved" "$status" "$HERE/$log"
    tail -n 30 "$log" | sed 's/^/      /'
  fi
}

# elastic_scale NAME ATTEMPT SYNC: scale-out and scale-in of
# C++ servers mid-run. A job of two C++ servers (stateful handler) and two
# C++ workers; a third C++ server, started here with PS_STANDBY=1, joins,
# takes key ranges (one of them twice: it comes back), then server 10 is
# drained and leaves; the workers check exact sums and push counts, the
# drained server and the standby (released at the end) exit with status 0.
elastic_scale() {
  local name=$1 attempt=$2 sync=$3
  if [ -n "$FILTER" ] && [[ "$name" != *"$FILTER"* ]]; then
    return
  fi
  local port=$((20000 + RANDOM % 20000)) log="$BIN_DIR/logs/$name.log" start=$SECONDS
  # ctl's output has a file of its own: appended to the job's log, it
  # would be overwritten by the launcher's later writes
  local sblog="$BIN_DIR/logs/$name.standby.log" ctllog="$BIN_DIR/logs/$name.ctl.log"
  : >"$ctllog"
  local ctl=("$LAUNCHER" ctl --addr "127.0.0.1:$((port + 1))")
  "$LAUNCHER" local -s 2 -w 2 --port "$port" --timeout "$TIMEOUT" \
    --env PS_ELASTIC=1 --env "PS_CTL_ADDR=127.0.0.1:$((port + 1))" --env PS_BALANCE_INTERVAL=600000 \
    --env ELASTIC_ROUNDS=3000 --env ELASTIC_SERVER=stateful --env "ELASTIC_SYNC=$sync" \
    --scheduler-cmd "$LAUNCHER scheduler" -- "./$BIN_DIR/test_elastic" >"$log" 2>&1 &
  local job=$! standby=0 step=0
  # step: 0 job up, 1 standby joined, 2..5 moves, 6 drained
  local steps=(
    "move 0 3 12" "move 9223372036854775807 9223372036854775810 12"
    "move 0 3 8" "move 0 3 12" "drain 10")
  local tries=0
  while [ "$step" -lt 7 ] && [ "$tries" -lt 600 ] && kill -0 "$job" 2>/dev/null; do
    tries=$((tries + 1))
    case $step in
    0)
      "${ctl[@]}" status >/dev/null 2>&1 && step=1 || sleep 0.05
      if [ "$step" -eq 1 ]; then
        env DMLC_ROLE=server PS_STANDBY=1 PS_ELASTIC=1 DMLC_NUM_SERVER=2 DMLC_NUM_WORKER=2 \
          DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT="$port" ELASTIC_SERVER=stateful ELASTIC_SYNC="$sync" \
          "./$BIN_DIR/test_elastic" >"$sblog" 2>&1 &
        standby=$!
      fi
      ;;
    1)
      "${ctl[@]}" status 2>/dev/null | grep -q "servers \[8 10 12\]" && step=2 || sleep 0.05
      ;;
    *)
      # shellcheck disable=SC2086
      if "${ctl[@]}" ${steps[$((step - 2))]} >>"$ctllog" 2>&1; then
        echo "== step done: ${steps[$((step - 2))]}" >>"$ctllog"
        step=$((step + 1))
      else
        sleep 0.05
      fi
      ;;
    esac
  done
  local ok=0 sbok=0
  wait "$job" && ok=1
  if [ "$standby" -ne 0 ]; then
    # The standby leaves with the job; if the job died, it may wait for a
    # scheduler that is gone (heartbeats are off, as in ps-lite), so give
    # it 30 s and then end it (a failure: sbok stays 0).
    local waited=0
    while kill -0 "$standby" 2>/dev/null && [ "$waited" -lt 300 ]; do
      sleep 0.1
      waited=$((waited + 1))
    done
    kill "$standby" 2>/dev/null
    wait "$standby" && sbok=1
  fi
  if [ "$attempt" -eq 1 ] && ! grep -q "COMPAT FAIL" "$log" "$sblog" 2>/dev/null &&
    { [ "$ok" -eq 0 ] && grep -qi "address already in use" "$log" || [ "$step" -lt 7 ]; }; then
    echo "      ($name: port $port in use or only $step of 7 steps before the job ended; running it again)"
    elastic_scale "$name" 2 "$sync"
    return
  fi
  if [ "$ok" -eq 1 ] && [ "$sbok" -eq 1 ] && [ "$step" -ge 7 ] &&
    [ "$(grep -c 'exact sums and push counts' "$log")" -eq 2 ] &&
    grep -q 'drained (.*) and left the job' "$ctllog" && grep -q "rank 2 done" "$sblog"; then
    pass=$((pass + 1))
    printf 'PASS  %-44s %3ds  (standby joined, 4 moves, 1 drain)\n' "$name" $((SECONDS - start))
  else
    fail=$((fail + 1))
    failed+=("$name")
    printf 'FAIL  %-44s %3ds  (%d of 7 steps, job ok %d, standby ok %d; logs: %s %s %s)\n' "$name" \
      $((SECONDS - start)) "$step" "$ok" "$sbok" "$HERE/$log" "$HERE/$sblog" "$HERE/$ctllog"
    tail -n 30 "$log" | sed 's/^/      /'
    tail -n 10 "$ctllog" | sed 's/^/      ctl: /'
    tail -n 10 "$sblog" 2>/dev/null | sed 's/^/      standby: /'
  fi
}

# replicated NAME ATTEMPT KIND MODE: a job of three C++ servers
# (test_replicated's REPL_SERVER=KIND) with PS_ELASTIC=1. The launcher runs
# the elasticps scheduler and two C++ workers; the servers are started
# here, so that one can die without the launcher stopping the job. Once
# the workers push, MODE
#   kill   (PS_REPLICAS=1) SIGKILLs one server: a backup takes its ranges
#          over, the failover must report lost=0, and the workers go on;
#   move   (no replicas: moves of replicated ranges are not supported yet)
#          moves server range 1's shared keys to server 12 and back to
#          server 10, which held them (only a state hook can do that);
#   none   (PS_REPLICAS=1) does nothing: with KIND nohook every server
#          must log its missing state hook exactly once.
# Then the workers stop and check exact sums (and push counts, unless
# KIND is default).
replicated() {
  local name=$1 attempt=$2 kind=$3 mode=$4
  if [ -n "$FILTER" ] && [[ "$name" != *"$FILTER"* ]]; then
    return
  fi
  local port=$((20000 + RANDOM % 20000)) log="$BIN_DIR/logs/$name.log" start=$SECONDS
  local signal="$BIN_DIR/logs/$name.signal" ctllog="$BIN_DIR/logs/$name.ctl.log"
  rm -f "$signal"
  : >"$ctllog"
  local ctl=("$LAUNCHER" ctl --addr "127.0.0.1:$((port + 1))")
  local common=(DMLC_NUM_SERVER=3 DMLC_NUM_WORKER=2 PS_ELASTIC=1 PS_HEARTBEAT_INTERVAL=1
    PS_HEARTBEAT_TIMEOUT=2 PS_VERBOSE=1 "REPL_SERVER=$kind" "REPL_SIGNAL=$HERE/$signal")
  if [ "$mode" != move ]; then common+=(PS_REPLICAS=1); fi
  local envs=()
  for kv in "${common[@]}"; do envs+=(--env "$kv"); done
  "$LAUNCHER" local -s 0 -w 2 --port "$port" --timeout "$TIMEOUT" "${envs[@]}" \
    --env "PS_CTL_ADDR=127.0.0.1:$((port + 1))" --env PS_BALANCE_INTERVAL=600000 \
    --scheduler-cmd "$LAUNCHER scheduler" -- "./$BIN_DIR/test_replicated" >"$log" 2>&1 &
  local job=$! servers=() i
  for i in 0 1 2; do
    env DMLC_ROLE=server DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT="$port" DMLC_NODE_HOST=127.0.0.1 \
      "${common[@]}" "./$BIN_DIR/test_replicated" >"$BIN_DIR/logs/$name.server$i.log" 2>&1 &
    servers+=($!)
  done
  # pushed_more N: waits (up to 30 s) until the workers logged N more
  # "pushed" lines (one per 100 rounds)
  local re='test_replicated: worker rank . pushed'
  pushed_more() {
    local n=0 want=$(($(grep -c "$re" "$log") + $1))
    while [ "$(grep -c "$re" "$log")" -lt "$want" ] && [ "$n" -lt 300 ] && kill -0 "$job" 2>/dev/null; do
      sleep 0.1
      n=$((n + 1))
    done
    [ "$n" -lt 300 ] && kill -0 "$job" 2>/dev/null
  }
  # ctl_move BEGIN END TO: one move, retried while the job starts
  ctl_move() {
    local n=0
    until "${ctl[@]}" move "$@" >>"$ctllog" 2>&1; do
      n=$((n + 1))
      if [ "$n" -ge 50 ]; then return 1; fi
      sleep 0.1
    done
    echo "== moved $*" >>"$ctllog"
  }
  local steps=0 want=1 live=("${servers[@]}")
  pushed_more 6 && steps=1
  case $mode in
  kill)
    want=2
    if [ "$steps" -eq 1 ]; then
      kill -9 "${servers[0]}"
      wait "${servers[0]}" 2>/dev/null
      live=("${servers[@]:1}")
      local n=0
      while ! grep -q "coord: failover" "$log" && [ "$n" -lt 300 ]; do
        sleep 0.1
        n=$((n + 1))
      done
      grep "coord: failover" "$log" | grep -q "lost=0 " && pushed_more 6 && steps=2
    fi
    ;;
  move)
    # server range 1 starts at MaxKey/3; its owner is server 10 (rank 1)
    want=3
    if [ "$steps" -eq 1 ] && ctl_move 6148914691236517205 6148914691236517207 12 && pushed_more 2; then
      steps=2
      ctl_move 6148914691236517205 6148914691236517207 10 && pushed_more 2 && steps=3
    fi
    ;;
  esac
  touch "$signal"
  local ok=0
  wait "$job" && ok=1
  # The servers leave with the job; a survivor that outlives it (the job
  # died) is ended after 30 s: a failure, as the job's is.
  local waited=0
  while [ "$waited" -lt 300 ] && kill -0 "${live[@]}" 2>/dev/null; do
    sleep 0.1
    waited=$((waited + 1))
  done
  kill "${live[@]}" 2>/dev/null
  wait "${live[@]}" 2>/dev/null
  local warned=0
  for i in 0 1 2; do
    if [ "$(grep -c 'the request handler has no state hook' "$BIN_DIR/logs/$name.server$i.log")" -eq 1 ]; then
      warned=$((warned + 1))
    fi
  done
  local wantwarn=0
  if [ "$kind" = nohook ]; then wantwarn=3; fi
  if [ "$attempt" -eq 1 ] && [ "$ok" -eq 0 ] && ! grep -q "COMPAT FAIL" "$log" && grep -qi "address already in use" "$log"; then
    echo "      ($name: port $port in use; running it again)"
    replicated "$name" 2 "$kind" "$mode"
    return
  fi
  if [ "$ok" -eq 1 ] && [ "$steps" -eq "$want" ] && [ "$waited" -lt 300 ] && [ "$warned" -eq "$wantwarn" ] &&
    [ "$(grep -c 'test_replicated: worker rank . OK' "$log")" -eq 2 ]; then
    pass=$((pass + 1))
    printf 'PASS  %-44s %3ds  (%d of %d steps)\n' "$name" $((SECONDS - start)) "$steps" "$want"
  else
    fail=$((fail + 1))
    failed+=("$name")
    printf 'FAIL  %-44s %3ds  (%d of %d steps, job ok %d, %d of %d servers warned once; logs: %s %s)\n' "$name" \
      $((SECONDS - start)) "$steps" "$want" "$ok" "$warned" "$wantwarn" "$HERE/$log" "$HERE/$BIN_DIR/logs/$name.server*.log"
    tail -n 30 "$log" | sed 's/^/      /'
    tail -n 10 "$ctllog" | sed 's/^/      ctl: /'
  fi
}

# Over the ZeroMQ van only: with DMLC_ENABLE_RDMA=fabric the first move
# once waited 30 s for an answer the fabric van delivered as from an
# anonymous peer (noted in docs/rdma.md, not yet fixed).
if [ -z "${COMPAT_ENV:-}" ]; then
  elastic elastic-2x2 1 --server-cmd "$LAUNCHER server"
  # C++ servers: KVServerDefaultHandle (its own migration handle), the same
  # store behind a lambda (the generic hand-over), and a handler with
  # per-key push counts and a migration handle of its own, asynchronous
  # and synchronous
  elastic elastic-cxx-default-2x2 1 --env ELASTIC_SERVER=default
  elastic elastic-cxx-fallback-2x2 1 --env ELASTIC_SERVER=fallback
  elastic elastic-cxx-stateful-async-2x2 1 --env ELASTIC_SERVER=stateful
  elastic elastic-cxx-stateful-sync-2x2 1 --env ELASTIC_SERVER=stateful --env ELASTIC_SYNC=1
  # the C++ program in every role, launched as any ps-lite job
  ELASTIC_CXX_SCHEDULER=1 elastic elastic-cxx-scheduler-2x2 1 --env ELASTIC_SERVER=stateful
  elastic_scale elastic-cxx-scale-async 1 0
  elastic_scale elastic-cxx-scale-sync 1 1
  # replicated C++ servers (a server SIGKILLed): the default handle and an
  # MXNet-style handler with its own state hook; that handler's keys moved
  # and brought back; and the handler without its hook (unreplicated, with
  # a warning)
  replicated replicated-cxx-default 1 default kill
  replicated replicated-cxx-custom 1 custom kill
  replicated replicated-cxx-custom-move 1 custom move
  replicated replicated-cxx-nohook 1 nohook none
fi

echo "== $pass passed, $fail failed"
if [ "$fail" -ne 0 ]; then
  printf '   failed: %s\n' "${failed[@]}"
  exit 1
fi
