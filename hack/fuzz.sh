#!/usr/bin/env bash
# hack/fuzz.sh: runs every fuzz target of the module (each `func FuzzX(f *testing.F)` in a _test.go
# file) with Go's fuzzing engine for FUZZTIME each (default 60s), one after the other, and stops at
# the first failure; the input that failed is written under the package's testdata/fuzz/FuzzX/ (add
# it to the change that fixes it: it then runs in every `go test`). `make test` runs each target's
# seed corpus only. FUZZ=regex picks targets by name.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
FUZZTIME=${FUZZTIME:-60s}
mapfile -t targets < <(grep -rE --include='*_test.go' -o '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' . |
	sed -E 's#^\./(.*)/[^/]+_test\.go:func (Fuzz[A-Za-z0-9_]+).*#\1 \2#' | sort -u)
[[ ${#targets[@]} -gt 0 ]] || { echo "fuzz: no fuzz targets found" >&2; exit 1; }
n=0
for t in "${targets[@]}"; do
	read -r dir name <<<"$t"
	[[ $name =~ ${FUZZ:-.} ]] || continue
	n=$((n + 1))
	echo "==> $name in ./$dir for $FUZZTIME" >&2
	if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "./$dir/"; then
		echo "fuzz: $name in ./$dir failed; the failing input is under $dir/testdata/fuzz/$name/" >&2
		exit 1
	fi
done
echo "fuzz: $n target(s) ran for $FUZZTIME each, no failure" >&2
