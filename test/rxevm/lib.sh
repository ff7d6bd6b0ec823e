# Shared by test/rxevm/run and test/rxevm/setup (sourced, bash).  No side effects.

# RXEVM_HERE: this folder; RXEVM_ROOT: the repository root (two levels up).
RXEVM_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
RXEVM_ROOT=$(cd "$RXEVM_HERE/../.." && pwd -P)
# Cache of everything setup builds (kernel, vmlinux, base initramfs).
export RXEVM_DIR=${RXEVM_DIR:-$RXEVM_ROOT/.cache/rxevm}

# The base initramfs for the current settings (Open MPI makes a separate one).
rxevm_base() {
  if [ "${RXEVM_WITH_MPI:-0}" = 1 ]; then echo "$RXEVM_DIR/base-mpi.cpio"; else echo "$RXEVM_DIR/base.cpio"; fi
}

# What the base initramfs depends on: the setup script (package and module
# lists), the kernel pin, the Open MPI switch and the host's rdma-core and
# busybox (they are copied into the VM, and a host-built cgo binary must find
# the libibverbs and providers it was built against).  A change rebuilds it.
rxevm_base_key() {
  {
    cat "$RXEVM_HERE/setup" "$RXEVM_HERE/lib.sh"
    echo "kernel=${RXEVM_KERNEL_PKG:-} mpi=${RXEVM_WITH_MPI:-0}"
    stat -L -c '%n %s %Y' /usr/lib/x86_64-linux-gnu/libibverbs.so.1 \
      /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so /bin/busybox 2>&1
  } | sha256sum | cut -c1-16
}

# Is the cache ready for a run?  (cheap: a few stats and one sha256)
rxevm_ready() {
  local base; base=$(rxevm_base)
  [ -s "$base" ] && [ -s "$base.list" ] || return 1
  [ -s "$RXEVM_DIR/vmlinux" ] || [ -s "$RXEVM_DIR/vmlinuz" ] || return 1
  [ "$(cat "$base.key" 2>/dev/null)" = "$(rxevm_base_key)" ]
}

# Debian is usr-merged: /bin, /sbin, /lib, /lib64 are links into /usr.  Files
# go into the VM under their /usr path (a real /lib directory in an appended
# cpio would replace the /lib -> usr/lib link).
rxevm_norm() {
  case "$1" in
    /bin/*|/sbin/*|/lib/*|/lib64/*) echo "/usr$1" ;;
    *) echo "$1" ;;
  esac
}

# rxevm_skeleton DIR: the usr-merged top level of a VM root.
rxevm_skeleton() {
  mkdir -p "$1"/usr/{bin,sbin,lib/x86_64-linux-gnu,lib64}
  local d; for d in bin sbin lib lib64; do ln -sfn usr/$d "$1/$d"; done
}

# rxevm_copy DIR FILE...: copy host files (links followed) to the same paths
# under DIR, with their shared-library closure (ldd).  Files already there
# are kept.  Prints nothing; returns non-zero if a library was not found.
rxevm_copy() {
  local dest=$1 f lib rc=0; shift
  for f in "$@"; do
    _rxevm_put "$dest" "$f"
    # static binaries, scripts and data files have no libraries: ldd fails
    while read -r lib; do
      case "$lib" in
        *"not found"*) echo "rxevm: $f: library ${lib%% *} not found" >&2; rc=1 ;;
        /*) _rxevm_put "$dest" "$lib" ;;
      esac
    done < <(ldd "$f" 2>/dev/null | sed -n -e 's/^.*=> \(\/[^ ]*\) .*/\1/p' \
                                         -e 's/^[[:space:]]*\(\/[^ ]*\) (0x.*/\1/p' \
                                         -e 's/^[[:space:]]*\([^ ]*\) => not found.*/\1 not found/p')
  done
  return $rc
}
_rxevm_put() {
  local to; to=$1$(rxevm_norm "$2")
  [ -e "$to" ] && return 0
  mkdir -p "$(dirname "$to")"
  cp -L "$2" "$to"
}
