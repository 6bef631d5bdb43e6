#!/usr/bin/env bash
# bench-instructions.sh BINARY BENCH N: the instructions per operation of a
# Go benchmark, counted by valgrind's cachegrind with GOMAXPROCS=1: the
# benchmark is run for N and for 3N operations, and the difference divided
# by 2N, so that the process's start and the benchmark's set-up cancel out.
# BINARY is a test binary (go test -c -o BINARY ./PKG); BENCH its -test.bench
# pattern, which should match one benchmark. A CPU figure that other work on
# the machine does not move: use it to compare two builds.
#
#   go test -c -o /tmp/lambda.test ./lambda
#   scripts/bench-instructions.sh /tmp/lambda.test 'AdapterBatch10/^heartbeat' 2000
set -euo pipefail
if [[ $# -ne 3 || ! -x $1 || ! $3 =~ ^[1-9][0-9]*$ ]]; then
	echo "usage: $0 TEST-BINARY BENCH-PATTERN N (a test binary from go test -c, N operations > 0)" >&2
	exit 2
fi
bin=$1 bench=$2 n=$3
command -v valgrind >/dev/null || { echo "$0: valgrind is missing: make valgrind installs it" >&2; exit 1; }
refs() {
	GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1 valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
		"$bin" -test.run '^$' -test.bench "$bench" -test.benchtime "${1}x" -test.count 1 2>&1 |
		awk '/I +refs:/ { gsub(",", "", $NF); print $NF }'
}
a=$(refs "$n")
b=$(refs $((3 * n)))
[[ -n $a && -n $b ]] || { echo "$0: cachegrind reported no instruction count (does $bench match a benchmark?)" >&2; exit 1; }
echo "$bench: $(( (b - a) / (2 * n) )) instructions per operation ($(basename "$bin"), cachegrind, GOMAXPROCS=1)"
