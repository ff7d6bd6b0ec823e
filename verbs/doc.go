// Package verbs is ibcoll's only door to RDMA hardware: idiomatic Go types
// over libibverbs, with two providers behind the same API.
//
//   - ibv: real libibverbs through cgo (mlx5, rxe, any rdma-core provider).
//     C shims for what cgo cannot call directly live in ../cgo/verbs_shim.h.
//   - soft: soft0, a pure-Go RDMA device inside the process. Every Context
//     on soft0 shares one device, so goroutine ranks connect to each other;
//     it does not cross processes. A goroutine per QP plays the NIC, and a
//     request posted to an idle QP runs on the posting goroutine, which
//     saves a hand-off per request on oversubscribed cores.
//
// # Ownership
//
// Every object has an idempotent, nil-safe Close. A child holds its
// parent, and a parent's Close fails with an error wrapping ErrBusy while
// a child lives: a Context with any PD, CQ or DM; a PD with MRs or QPs; a
// DM with a DM MR; a CQ used by a QP. This is where the kernel answers
// EBUSY too, and it is what keeps misuse (an MR deregistered after its DM,
// PD or context) from reaching libibverbs as a dangling pointer: such
// calls come back as Go errors. A failed creation returns a nil object and
// leaves nothing behind. Finalizers never release NIC resources;
// LiveObjects and CheckLeaks let tests prove nothing leaked, and a leak
// report names the file and line that created each object still open.
//
// RegMR pins its Go slice (runtime.Pinner) while registered. Long-lived
// buffers should come from mmap or C allocation and use RegMRAddr.
//
// # How soft0 writes
//
// soft0's writes are CPU stores by the poster. Into host memory that the
// CUDA driver pinned, and into memory registered with HintOwnerReads (from
// 32 KiB a write), it uses non-temporal stores, so that no line is left in
// the writer's cache for the copy engine or the owner's core to fetch, as a
// NIC's DMA leaves none; elsewhere plain copies. A write with immediate of
// 32-256 KiB into memory registered with HintOwnerReads, posted on its
// own, is offered to the owner for 10 µs first: a Poll of the owner's
// receive CQ in that time copies it, into the owner's cache, as a
// shared-memory transport's reader does, and completes its receive.
// MR.Via says which. ibv ignores the hint.
//
// # Blocking and concurrency
//
// All objects are safe for concurrent use. PostSend, PostRecv and Poll
// never wait for a peer, except that soft0's PostSend offers such a write
// to its owner for up to 10 µs (above), and, where the owner took it in that
// time, waits for the owner's copy of it (at most 256 KiB); a posting queue
// that is full
// answers ENOMEM. CQ.Wait blocks
// on the completion channel (ibv) or a notification (soft) until a
// completion may be ready or its context ends; it may return early, so the
// pattern is poll, wait, poll. Close waits for concurrent calls on the same
// object to return.
//
// # Asynchronous events
//
// Context.Events reads the device's asynchronous events (a port going down
// or up, a QP's fatal error, a fatal device error) without blocking, and
// acknowledges each one as it is read, so that no destroy waits for one.
// Nothing reads them otherwise: a caller asks from time to time. A context
// keeps its newest EventLogLen events, numbered, and every caller reads
// from its own place, so that the users of one context each see every
// event. soft0 raises events only when a test asks (Soft.RaiseEvent).
//
// # Test control
//
// Fault injection, completion delays and soft0's device-memory capacity
// are reached only through SoftControl, which refuses contexts of real
// devices: production types carry no test hook. The one way to move a QP
// to the error state in production is QP.MoveToError, the fence a
// transport puts between itself and a failed peer.
//
// # Errors
//
// Errors are *Error values wrapping a sentinel (ErrBusy, ErrClosed,
// ErrNotSupported, ErrNoDevice, ErrInvalid) and the provider's errno, so
// errors.Is(err, unix.ENOMEM) works. Failed work completions carry their
// status by name (WC.Err, *CompletionError). A PostSend or PostRecv that
// the provider refuses midway has posted the requests before the refused
// one, as ibv_post_send(3) does; PostedBefore says how many, so the caller
// counts those as posted (they complete, or flush).
//
// # Provider differences
//
// soft0 follows mlx5 where providers differ. Known differences with rxe
// (kernel 6.1, rdma-core 44), tested on both sides by the contract suite:
//   - a bad local key completes with LOC_PROT_ERR on mlx5 and soft0, and
//     with LOC_QP_OP_ERR on rxe;
//   - a receive posted to a QP already in the error state is flushed at
//     once by mlx5 and soft0, while rxe never completes it (its post_recv
//     does not enter the kernel); receives posted before the error are
//     flushed in order everywhere;
//   - rxe has no device memory: AllocDM answers ErrNotSupported, as soft0
//     does after Soft.SetDMCapacity(0);
//   - a requester whose responder QP was moved to the error state gets
//     RETRY_EXC_ERR on soft0 at once (and on mlx5 after its transport
//     retries), while on rxe the request stayed pending for over a minute
//     in our tests. Layers above must never rely on a transport error to
//     learn that a peer failed: they use their own deadlines.
//
// # Hardware
//
// RC queue pairs, RDMA write/read and atomics are required of a real
// device. On RoCE the GID index is chosen per port: a RoCE v2 IPv4-mapped
// GID first, then any RoCE v2 GID, then index 0; OpenWith's
// Options.GIDIndex overrides it. Building with CGO_ENABLED=0 gives a
// soft-only package.
//
// # Configuration
//
// verbs reads no environment variable: Open("") means the first real
// device with an active port, else soft0, whatever the environment says.
// DeviceEnv and GIDIndexEnv name the variables a program's configuration
// layer conventionally reads and hands to OpenWith.
package verbs
