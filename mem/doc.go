// Package mem owns the memory types that ibcoll moves data between: host
// memory, CUDA device and managed memory, NIC device memory (DM), and sim,
// a simulated device memory for machines with no GPU. It allocates them,
// copies between any two of them, and tells the type of an address. It is
// the only package that calls libcuda.
//
// # Ownership
//
// Alloc and AllocFrom return a *Buffer that the caller owns and must Close;
// Close is idempotent and nil-safe, and Live counts open Buffers so tests can
// prove that nothing leaks. No finalizer frees memory. Host and sim memory
// are mapped with mmap, never taken from the Go heap, so a Buffer may be
// registered with a NIC for as long as it is open. A DM Buffer owns its
// Region and closes it; if the region refuses (an MR still uses it), the
// Buffer stays open and Close may be retried. While an Acquire is not
// released (a collective request holds the Buffers of its arguments until
// its Close), Close refuses with ErrBusy and the Buffer stays open. Bytes and
// addresses taken from a Buffer are valid only until its Close. A Stream is
// owned likewise.
//
// # Blocking
//
// Alloc, Close, Copy and CopyPtr block until done. CopyAsync (and Copy2DAsync,
// rows at a pitch, one cuMemcpy2DAsync where a side is CUDA memory) queues and
// returns, except that it makes small host-side copies (64 KiB or less, with
// nothing queued ahead) itself, the driver finishes a copy from CUDA
// memory into pageable host memory before cuMemcpyAsync returns, and a copy
// from pageable host memory into CUDA memory goes through pinned bounce
// buffers and returns once done (with the Stream's lock held meanwhile).
// Stream.Synchronize and Stream.Close block until the queued copies are
// done: they poll for about as long as the copies should take (20 µs plus
// 1 µs per 20 KB, at most 500 µs), then sleep in the driver rather than
// spin, since ranks share few cores. The first call that needs CUDA
// (an Alloc of a CUDA type, a CUDA copy, CUDAAvailable, or TypeOf) loads
// libcuda.so.1, initialises the driver and retains the device's primary
// context, which can take a second on a machine with a GPU.
//
// # Concurrency
//
// All functions are safe for concurrent use, and so are Buffer methods other
// than Close, which must not race with copies of the same Buffer. Copies into
// the same bytes at the same time give unspecified contents, as with memcpy.
// Stream methods are safe for concurrent use.
//
// # What the hardware and libraries must provide
//
// Host and sim need Linux (memfd_create, MADV_DONTFORK). CUDA and
// CUDAManaged need cgo, libcuda.so.1 at run time (no CUDA is needed to
// build), a device with unified addressing (any 64-bit Linux system since
// CUDA 4.0), and for CUDAManaged, concurrent managed access if the CPU
// touches Bytes while the GPU runs. The device is ordinal 0, or the one
// UseCUDADevice names before the first CUDA use. Without them CUDA calls return errors wrapping
// ErrNotSupported; nothing crashes. DM memory comes from an Allocator, which
// package dm implements over the NIC.
package mem
