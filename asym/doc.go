// Package asym stages a rank's collective buffers through scratch buffers when their
// memory types differ (asymmetric memory) or when the transport cannot reach them.
//
// It has two halves. Plan is a pure function: from one rank's Args and its node's Reach
// it decides, for the source and the destination, whether a scratch buffer replaces the
// user's, of which memory type and how many bytes, and whether the scratch is copied in
// at every post, copied out after every successful completion, or both (PlanInto writes
// the same plan into a Staging the caller keeps, reusing its spans). Stage carries a
// plan out for one persistent collective; Stage.Init makes a closed Stage again in
// place, keeping its lists, so a caller that reuses both allocates nothing.
//
// # Baseline (the seed's table)
//
// For a rooted collective only the root holds both buffers. When the root's source and
// destination types differ, and both types are reachable:
//
//	collective      buffer replaced  scratch memory type  scratch size (bytes)                            copy
//	gather, reduce  dst              src's type           dst count × dtype size                          copy-out into the user's dst after completion
//	gatherv         dst (v layout)   src's type           max over ranks of (displ + count) × dtype size  copy-out after completion
//	scatter         src              dst's type           src count × dtype size                          copy-in from the user's src at every post
//	scatterv        src (v layout)   dst's type           max over ranks of (displ + count) × dtype size  copy-in at every post
//
// Sizes are always bytes; a rank whose count is 0 does not count in the maximum (its
// displacement is not part of the buffer, as in package collective's Layout). Non-roots hold one buffer (gather, gatherv and reduce: src;
// scatter and scatterv: dst) and are never asymmetric. Bcast uses Src on every rank, as
// UCC does: the root reads it (a staged one copies in), the others write it (a staged one
// copies out; forwarding reads what was received, so no copy-in); its Dst is ignored.
//
// # Beyond the baseline
//
// Non-rooted collectives (allgather, allgatherv, allreduce, alltoall, alltoallv,
// reduce_scatter): a rank whose source and destination types differ stages its
// destination in the source's type, with copy-out, like gather.
//
// Mixed types: a transport that takes a source and a destination of different
// reachable types in one collective says so (Reach.Mixed); then each buffer is staged on
// its own merits (reachability) and the baseline's "replaced buffer" rule does not
// apply. The shipped transport, tlmlx5, sets it; the baseline stays for transports that
// do not.
//
// Strong asymmetry: a rank decides from its own buffers and its own Reach alone; nothing
// that Plan decides goes on the wire, so ranks need no agreement.
//
// Reachability: a buffer is reachable when the NIC registers its type (Reach.NIC) and,
// for reductions (reduce, allreduce, reduce_scatter), the CPU also loads and stores it
// (Reach.CPU), because the reduction runs on the CPU over every buffer of the rank, or,
// for a reduction's read-only source on a transport that takes mixed types, the
// transport copies it into its own host memory itself (Reach.ReduceSrc). Host
// memory is always reachable. A used buffer of an unreachable type is staged through host
// scratch even when both types match: a source copies in, a destination copies out.
// When the baseline would pick an unreachable scratch type, host is picked instead: a
// buffer is staged at most once, and a replaced buffer that already is host memory is
// not staged.
//
// In place: the rank's in-place buffer is its only buffer, so there is no asymmetry,
// only reachability. The in-place buffer is Dst (gather, gatherv, reduce on the root,
// and every non-rooted collective; it is both read and written, so a staged one copies
// in and out) or Src (scatter and scatterv on the root; read only, so it copies in).
// InPlace is ignored on non-roots and in bcast.
//
// A buffer with no element to move (Count 0, or all Counts 0) is never staged.
// A scratch has the user buffer's layout; copies move only the spans that ranks read or
// write (merged per-rank blocks of a v-layout), so the gaps of a user's v-layout are never
// written.
//
// Plan validates what it reads: the collective, Size ≥ 1, Rank and (rooted) Root in
// [0, Size), DtypeSize in {1, 2, 4, 8, 16} (not for barrier), the memory types, Count ≥ 0,
// v-layouts with Size counts and displacements, none negative, and byte sizes that fit an
// int. Its errors name the argument and wrap ErrInvalid and mem.ErrInvalid.
//
// # Stage: ownership and order
//
// NewStage allocates each scratch (mem.Alloc unless WithAlloc; DM scratch needs an
// allocator from a dm pool) and registers it through a Registrar, so that asym does not
// import the transport. The Stage owns both until Close, which deregisters then frees each
// scratch, the destination's first (reverse order of creation), and joins the errors. A
// scratch whose deregistration failed is not freed, since the NIC may still reach it:
// Close reports it, and may be called again to retry what is left. A NewStage that fails
// releases what it made in the same order and returns no Stage. Close is idempotent and
// nil-safe.
// The user's buffers stay the caller's; they must stay valid while the Stage lives.
//
// A post runs CopyIn (after the request layer found the request re-postable), the
// transport on Src and Dst, then Complete with the transport's result. Two overlaps
// keep the copies off the critical path: Landed queues the copy-out of destination
// blocks the transport reports final while later ones still arrive (scratch of 256 KiB
// or more), by runs of adjacent bytes or, where the output is one block per rank
// (SetRows), by rectangles of blocks, one 2D copy each; and a source of DefaultPipelineMin bytes or more in memory other than host
// is copied in by a goroutine in chunks while the transport sends what Ready reports in
// place; Complete waits for both. A host scratch beside CUDA memory is pinned
// (mem.Buffer.Pin) so that the copy engine moves it by DMA. Report says what was
// decided and how many bytes the copies moved. CopyIn marks a post
// in flight and refuses (ErrBusy) while one is; Complete copies out only after success,
// and a failed copy-out is returned, failing the request. Close refuses with ErrBusy while
// a post is in flight: it waits for nothing. Steady-state posts allocate nothing.
//
// A user buffer is an address, a type and a length (the address may be a device
// pointer). Copies between a DM buffer and anything go through mem.Copy, so a DM user
// buffer, and a user buffer paired with a DM scratch, need UserBuf.Buf.
//
// # Blocking and concurrency
//
// Plan never blocks. NewStage, CopyIn and Complete block for their allocations,
// registrations and copies only. Every Stage method is safe for concurrent use (one
// mutex; Close waits for a copy in progress, never for a post). A fault.Set is safe
// for concurrent use and may be shared by many stages.
//
// # Fault injection
//
// WithFaults(*fault.Set) makes a Stage fail the n-th allocation, registration, copy-in
// or copy-out (counted over all stages sharing the set); fault.Parse reads the --fault
// flag's KIND@RANK[:N] syntax. Injected errors wrap ErrInjected and name the step and
// buffer.
package asym
