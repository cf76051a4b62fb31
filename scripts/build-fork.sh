#!/usr/bin/env bash
# Builds the BytePS fork of ps-lite (bytedance/ps-lite) and its test programs
# against the system libzmq, for e2e/fork_interop_test.go. It downloads
# nothing: give it a checkout (or `git archive` tree) of the fork.
#
#   scripts/build-fork.sh /path/to/bytedance-ps-lite [out-dir]
#   ELASTICPS_FORK_PSLITE=<out-dir> go test ./e2e/ -run TestInteropWithForkPsLite
#
# out-dir (default <src>/build-elasticps) receives libps.a and the test
# programs test_benchmark, test_benchmark_stress, test_ipc_benchmark, and
# fork_kv (this repository's e2e/testdata/fork_kv.cc, the fork-side node of
# the mixed jobs). Needs
# g++ and libzmq's headers (Debian: libzmq3-dev); the fork needs no protobuf.
set -euo pipefail

src=${1:?usage: scripts/build-fork.sh <bytedance/ps-lite source dir> [out-dir]}
src=$(cd "$src" && pwd)
out=${2:-$src/build-elasticps}
for f in src/van.cc src/zmq_van.h src/meta.h tests/test_benchmark.cc; do
	[[ -f $src/$f ]] || { echo "build-fork.sh: $src/$f is missing: is $src a bytedance/ps-lite source tree?" >&2; exit 1; }
done
if ! echo '#include <zmq.h>' | ${CXX:-g++} -x c++ -E - >/dev/null 2>&1; then
	echo "build-fork.sh: zmq.h not found: install libzmq's headers (Debian: apt-get install libzmq3-dev)" >&2
	exit 1
fi
mkdir -p "$out/obj"
cxx=${CXX:-g++}
flags=(-std=c++14 -msse2 -fPIC -O2 -g -Wno-all -I"$src/src" -I"$src/include" -pthread)
jobs=${JOBS:-2}

for f in customer postoffice van; do
	echo "$cxx -c src/$f.cc" >&2
	"$cxx" "${flags[@]}" -c "$src/src/$f.cc" -o "$out/obj/$f.o" &
	while (($(jobs -r | wc -l) >= jobs)); do wait -n; done
done
wait
rm -f "$out/libps.a"
ar crs "$out/libps.a" "$out"/obj/*.o

for t in "$src"/tests/test_*.cc; do
	name=$(basename "$t" .cc)
	echo "$cxx tests/$name.cc" >&2
	"$cxx" "${flags[@]}" -o "$out/$name" "$t" "$out/libps.a" -lzmq -lrt &
	while (($(jobs -r | wc -l) >= jobs)); do wait -n; done
done
prog=$(dirname "$0")/../e2e/testdata/fork_kv.cc
if [[ -f $prog ]]; then
	echo "$cxx e2e/testdata/fork_kv.cc" >&2
	"$cxx" "${flags[@]}" -o "$out/fork_kv" "$prog" "$out/libps.a" -lzmq -lrt &
fi
wait
for p in test_benchmark fork_kv; do
	[[ -x $out/$p ]] || { echo "build-fork.sh: $out/$p was not built (see the compiler's errors above)" >&2; exit 1; }
done
git_rev=${FORK_COMMIT:-$(git -C "$src" rev-parse HEAD 2>/dev/null || echo "unknown (not a git checkout; set FORK_COMMIT)")}
echo "$git_rev" >"$out/SOURCE_COMMIT"
echo "built the fork ($git_rev) into $out" >&2
