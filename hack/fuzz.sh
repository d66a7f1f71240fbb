#!/usr/bin/env bash
# hack/fuzz.sh: runs every fuzz target of the module (each `func FuzzX(f *testing.F)` in the test
# files `go list` gives for the build tags FUZZTAGS, default "invariants" as the unit stage) with Go's
# fuzzing engine for FUZZTIME each (default 60s), one after the other, and stops at the first
# failure. An input the engine found failing is written under the package's testdata/fuzz/FuzzX/
# (keep it with the fix: it then runs in every `go test`). `make test` runs each target's seed
# corpus only. FUZZ=regex picks targets by name.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
FUZZTIME=${FUZZTIME:-60s}
TAGS=${FUZZTAGS-invariants}
targets=()
while read -r pkg dir files; do
	for f in $files; do
		while read -r name; do
			[[ -n $name ]] && targets+=("$pkg $name")
		done < <(sed -nE 's/^func (Fuzz[A-Za-z0-9_]+)\([A-Za-z_][A-Za-z0-9_]* \*testing\.F\).*/\1/p' "$dir/$f")
	done
done < <(go list -tags "$TAGS" -f '{{.ImportPath}} {{.Dir}}{{range .TestGoFiles}} {{.}}{{end}}{{range .XTestGoFiles}} {{.}}{{end}}' ./...)
[[ ${#targets[@]} -gt 0 ]] || { echo "fuzz: no fuzz targets found" >&2; exit 1; }
n=0
for t in "${targets[@]}"; do
	read -r pkg name <<<"$t"
	[[ $name =~ ${FUZZ:-.} ]] || continue
	n=$((n + 1))
	echo "==> $name in $pkg for $FUZZTIME (tags: ${TAGS:-none})" >&2
	if ! go test -tags "$TAGS" -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "$pkg"; then
		echo "fuzz: $name in $pkg failed (an input the engine found is kept under the package's testdata/fuzz/$name/)" >&2
		exit 1
	fi
done
[[ $n -gt 0 ]] || { echo "fuzz: no target matches FUZZ=$FUZZ" >&2; exit 1; }
echo "fuzz: $n target(s) ran for $FUZZTIME each, no failure" >&2
