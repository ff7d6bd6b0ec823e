#!/bin/bash
# make test-rxe: build the test binaries of the packages given (those with
# provider-generic tests) and run each inside the rxe VM, where the real
# libibverbs drives rxe0/rxe1 and IBCOLL_REQUIRE=rdma makes a skip for want
# of a device a failure. When the VM cannot be set up or booted this skips,
# unless IBCOLL_REQUIRE names rxevm (as .ci/run does): then it fails.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
required() { [[ ",${IBCOLL_REQUIRE:-}," == *",rxevm,"* ]]; }
no_vm() {
  if required; then echo "test-rxe: FAIL: $* (IBCOLL_REQUIRE=rxevm)"; exit 1; fi
  echo "test-rxe: SKIP: $* (set IBCOLL_REQUIRE=rxevm to make this a failure)"; exit 0
}
t0=$(date +%s)
"$root/test/rxevm/setup" || no_vm "the rxe VM could not be set up"
# Provider-generic tests of the upper layers open $IBCOLL_DEVICE.
export IBCOLL_DEVICE=${IBCOLL_DEVICE:-rxe0}
bindir=$root/.cache/rxe-bin
mkdir -p "$bindir"
status=0
summary=()
# Each argument is a package path, optionally followed by =REGEX to run only
# the tests it matches (the VM runs under emulation: heavy soft0-only tests
# stay on the host).
for spec in "$@"; do
  pkg=${spec%%=*}
  filter=
  [[ $spec == *=* ]] && filter=${spec#*=}
  rel=${pkg#./}
  name=${rel//\//_}
  if ! go test -c -o "$bindir/$name.test" "./$rel"; then
    status=1; summary+=("$rel: build failed"); continue
  fi
  log=$bindir/$name.log
  echo "test-rxe: running $rel in the rxe VM"
  extra=()
  [ -n "$filter" ] && extra=(-test.run "$filter")
  # The tool's tests also run under Open MPI's mpirun: that image is made
  # only for them, and "mpi" must then be present.
  vmenv=()
  if [ "$rel" = cmd/ibcoll-perf ]; then
    vmenv=(RXEVM_WITH_MPI=1 IBCOLL_REQUIRE="${IBCOLL_REQUIRE:+$IBCOLL_REQUIRE,}mpi")
  fi
  (cd "$root/$rel" && env "${vmenv[@]}" "$root/test/rxevm/run" "$bindir/$name.test" -test.v -test.count=1 -test.short -test.timeout=15m "${extra[@]}") 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 125 ] && no_vm "the rxe VM did not boot for $rel"
  pass=$(grep -c -- '--- PASS' "$log")
  fails=$(grep -c -- '--- FAIL' "$log")
  skips=$(grep -c -- '--- SKIP' "$log")
  summary+=("$rel: exit $rc, $pass passed, $fails failed, $skips skipped")
  [ "$rc" = 0 ] || status=1
done
echo "test-rxe summary ($(( $(date +%s) - t0 )) s):"
printf '  %s\n' "${summary[@]}"
exit $status
