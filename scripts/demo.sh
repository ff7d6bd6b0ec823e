#!/bin/bash
# make demo: the main job. ibcoll-perf with 8 in-process ranks on the default
# device (soft0 where there is no RDMA NIC) sweeps gather and scatter with asymmetric buffers (src host, dst
# simulated device memory; and dst CUDA when a GPU is present), checks
# every iteration, and writes a plot.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p out
go build -o .cache/bin/ibcoll-perf ./cmd/ibcoll-perf
perf=.cache/bin/ibcoll-perf
$perf -np 8 -c gather,scatter -b 1K -e 4M -f 4 -n 20 -w 3 --check -m host,sim --plot out/demo-host-sim.png
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  $perf -np 8 -c gather,scatter -b 1K -e 4M -f 4 -n 20 -w 3 --check -m host,cuda --plot out/demo-host-cuda.png
else
  echo "# (no GPU here: the host,cuda sweep runs where nvidia-smi finds one)"
fi
