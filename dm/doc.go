// Package dm manages NIC device memory (mlx5 MEMIC): a Pool takes one
// block of it with ibv_alloc_dm(3), registers the block once as a
// zero-based MR (ibv_reg_dm_mr(3)), and carves aligned Chunks out of it
// that collectives use as staging buffers close to the wire. Where the
// device has no device memory, the same API runs over registered host
// memory, so callers never need a second code path.
//
// # Ownership
//
// NewPool returns a Pool that the caller owns and must Close. The pool
// holds a DM (or a host mapping) and one MR in the caller's PD, so the PD
// and its Context must outlive the pool: close the pool first, then the
// PD, then the Context (verbs refuses the other orders with ErrBusy).
// Every Chunk must be closed before its pool: Pool.Close fails with an
// error wrapping verbs.ErrBusy while chunks are open, then deregisters
// the MR before freeing the DM, because ibv_free_dm(3) refuses while a DM
// MR lives. A failed step leaves the pool open, so Close may be retried.
// Pool.Close and Chunk.Close are idempotent and nil-safe; closing a chunk
// twice frees it once. NewPool leaves nothing allocated when it fails.
// The MR returned by Pool.MR belongs to the pool; callers only use its
// keys.
//
// # Addresses
//
// Chunk.Offset is the chunk's offset in the pool. Chunk.Addr is its
// address in the pool's MR, which is what SGEs and peers' RDMA requests
// take: the same offset for a DM pool (the MR is zero-based), a virtual
// address for a host pool. Addr always equals MR().Addr() + Offset().
// LKey and RKey are the pool MR's keys.
//
// # Blocking and concurrency
//
// NewPool and the copies block until done; nothing in this package waits
// for the network. Pool and Chunk methods are safe for concurrent use.
// Chunk.Close waits for copies of that chunk in flight. Copies into the
// same bytes at the same time give unspecified contents, as with memcpy;
// on device memory that extends to concurrent unaligned copies that touch
// the same 4-byte word of one chunk, since both rewrite the whole word.
//
// # What the hardware provides, and why read-modify-write
//
// Device memory is on the NIC and the CPU cannot address it: bytes move
// with ibv_memcpy_to_dm(3) and ibv_memcpy_from_dm(3), or with RDMA through
// the DM MR. mlx5 writes it in whole 4-byte words, so the verbs copies
// take only 4-byte aligned offsets and lengths. Chunk.CopyTo and CopyFrom
// take any offset and length: the aligned middle goes straight through,
// and a partial word at either end is read, patched and written back.
// Chunks start on Align boundaries (Align ≥ 4) and reserve whole multiples
// of Align, so a patched word never belongs to another chunk.
//
// A device has little of this memory (a typical mlx5 MEMIC window is 256
// KiB), and every process on the host shares it, so NewPool takes the
// largest block it can get, up to Config.Capacity: it halves the size
// until one fits, then bisects between the sizes that fit and failed.
//
// Devices without device memory (rxe, or soft0 with capacity 0) answer
// verbs.ErrNotSupported; the pool then uses mmap'd host memory with
// MADV_DONTFORK, registered with ibv_reg_mr(3), and Kind reports KindHost.
// Config.NoHostFallback turns that into an error instead. A device whose
// memory is all taken (by other contexts or processes) answers ENOMEM down
// to the smallest size; Config.HostWhenFull makes the pool fall back to
// host memory then too (tlmlx5's per-context pool does). Any other
// failure, including an injected fault, fails NewPool; Config.HostOnly
// then gives a host pool without trying the device again.
package dm
