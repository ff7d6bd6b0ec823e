#!/bin/bash
# Builds, on the development machine, what the GPU machine runs (it has no Go):
# stripped test binaries of the packages with CUDA tests and ibcoll-perf, into
# bin/gpu/ (ignored by git; carry it). BUILD names the ibcoll-perf binary
# (bin/gpu/ibcoll-perf-$BUILD, default "new"), so that builds of other commits
# can sit beside it for scripts/gpu-table.sh; TESTS=0 builds ibcoll-perf alone;
# TAGS are go build tags for every binary (test binaries get the suffix -$BUILD
# when BUILD is set). The test binaries include reduce's, whose kernels then run on the
# GPU machine's CPU. bin/gpu.txz packs the folder (about 13 MB against 63 MB of files:
# a carry may hold 64 MiB in all); on the GPU machine, `tar xJf bin/gpu.txz -C bin`.
set -euo pipefail
cd "$(dirname "$0")/.."
out=bin/gpu
mkdir -p "$out"
flags=(-trimpath -ldflags '-s -w' -tags "${TAGS:-}")
go build "${flags[@]}" -o "$out/ibcoll-perf-${BUILD:-new}" ./cmd/ibcoll-perf
if [ "${TESTS:-1}" = 1 ]; then
	for p in mem asym coll tlmlx5 verbs cmd/ibcoll-perf reduce; do
		go test -c "${flags[@]}" -o "$out/$(basename "$p")${BUILD:+-$BUILD}.test" "./$p"
	done
fi
du -sh "$out"
tar cJf bin/gpu.txz -C bin gpu
ls -l bin/gpu.txz
