#!/usr/bin/env bash
# Runs every fuzz target of the module (each func FuzzX in a _test.go file)
# for a fixed budget: scripts/fuzz.sh [fuzztime] [name regexp], e.g.
# scripts/fuzz.sh 4s (make fuzz-short) or scripts/fuzz.sh 10m FuzzConnStream.
# Targets in files built only with the rdma tag run with it. A crash
# fails the run; go test writes the input under the package's
# testdata/fuzz/FuzzX/, where `go test` then replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-4s}
only=${2:-.}
GO=${GO:-go}
n=0
while IFS=: read -r file fn; do
  [[ $fn =~ $only ]] || continue
  tags=()
  if head -1 "$file" | grep -q '^//go:build.*rdma'; then tags=(-tags rdma); fi
  echo "fuzz ./$(dirname "$file") $fn for $fuzztime ${tags[*]}"
  $GO test "${tags[@]}" -run '^$' -fuzz "^${fn}\$" -fuzztime "$fuzztime" "./$(dirname "$file")"
  n=$((n + 1))
done < <(git grep --untracked -o -E '^func Fuzz[A-Za-z0-9_]+' -- '*_test.go' | sed 's/func //')
if [ "$n" -eq 0 ]; then echo "fuzz: no target matches $only" >&2; exit 1; fi
echo "fuzz: $n targets, $fuzztime each, no crash"
