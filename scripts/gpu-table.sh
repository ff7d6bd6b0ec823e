#!/bin/bash
# The issue-10 staging table, run on the GPU machine from the repository root
# with bin/gpu/ carried (scripts/gpu-build.sh). For each of ROUNDS rounds it
# runs every build of BUILDS (bin/gpu/ibcoll-perf-<build>) over every config,
# the builds' order reversed in every other round so that neither always runs
# first. Each run's table goes to $OUT/table/<round>-<build>-<config>.txt;
# scripts/staging-table.py summarizes them (median over rounds of the p50, and
# of the ratio to host,host of the same build, persistence and round).
set -uo pipefail
: "${OUT:?set OUT}"
ROUNDS=${ROUNDS:-2}
BUILDS=${BUILDS:-new}
NP=${NP:-8}
SIZES=${SIZES:--b 64K -e 64M -f 4}
ITERS=${ITERS:--n 20 -w 3}
# name|collective|flags[|environment]: the optional fourth field holds VAR=value
# assignments for that run (the diagnosis build's knobs, scripts/gpu-knobs.sh)
CONFIGS=${CONFIGS:-"gather-hh|gather|-m host,host
gather-hc|gather|-m host,cuda
gather-cc|gather|-m cuda,cuda
gather-hh-p|gather|-m host,host -p
gather-hc-p|gather|-m host,cuda -p
gather-cc-gd|gather|-m cuda,cuda --soft-gpudirect
scatter-hh|scatter|-m host,host
scatter-hc|scatter|-m host,cuda
scatter-ch|scatter|-m cuda,host
scatter-cc|scatter|-m cuda,cuda
scatter-cc-gd|scatter|-m cuda,cuda --soft-gpudirect"}
mkdir -p "$OUT/table"
read -r -a builds <<<"$BUILDS"
for ((r = 1; r <= ROUNDS; r++)); do
	order=("${builds[@]}")
	if ((r % 2 == 0)); then
		order=()
		for ((i = ${#builds[@]} - 1; i >= 0; i--)); do order+=("${builds[i]}"); done
	fi
	for b in "${order[@]}"; do
		while IFS='|' read -r name coll flags vars; do
			[ -n "$name" ] || continue
			# shellcheck disable=SC2086
			env $vars bin/gpu/ibcoll-perf-"$b" -q -np "$NP" -c "$coll" $SIZES $ITERS $flags \
				>"$OUT/table/$r-$b-$name.txt" 2>&1 || echo "round $r build $b $name: exit $?"
		done <<<"$CONFIGS"
	done
done
