// Package tlmlx5 is ibcoll's RDMA transport layer, in the manner of UCC's tl/mlx5: RC
// queue pairs, RDMA writes straight into the destination's registered buffer, and the
// collective algorithms. It registers itself with package coll/driver under the name
// "mlx5"; programs import it for that side effect. Files follow its concerns:
// transport.go (open, reach), dmpool.go (the context's device memory), wireup.go
// (endpoints, QPs), connect.go (the lazy connect), ctlblock.go (receive slots),
// sendq.go (ordered sends), progress.go (completions), wire.go (encodings), task.go
// (the operation graph), eager.go (small messages without a ready-to-receive),
// ahead.go (a persistent collective's ready-to-receives sent a post ahead, into
// reduction scratch or a staged output held in two buffers),
// quarantine.go (scratch a peer may still write into after a failed task closed),
// events.go (the device's asynchronous events), loopback.go (copies out of device
// memory through the NIC),
// taskcache.go (tasks kept for a repeated Init), builder.go, algs.go (the algorithm
// table) and one file per collective. It uses package verbs only, so it runs on
// any provider: real NICs, the kernel's rxe, and the in-process soft0.
//
// # Wire-up
//
// A team endpoint has one RC QP per peer it talks to. Given a Messenger (coll's mailbox
// over an OOB that carries messages), the endpoint's address is one byte and the QP
// to a peer is made on first use, through a symmetric handshake over the Messenger
// (connect.go); otherwise every peer's QP is made and connected at Connect, from
// addresses that hold a QP's info per peer. Each QP has a control block: a ring of
// receive slots for the peer's control messages (ready-to-receive with an address and
// rkey, and coll's aborts and completion agreement), in registered host memory even
// where the context's pool is NIC device memory (ctlblock.go says why). Each slot always has a receive
// posted and is re-posted when read; the slot count is the peer's credit, and RNR
// retry (infinite on these QPs) holds a sender back beyond it. The team's CQs take
// cqGroup peers each.
//
// # Data path
//
// A collective is a graph of operations built at Init: receives, sends, local copies
// and reductions. A message of at most eagerMaxFor(team size) bytes (8 KiB up to 64
// ranks) takes the eager path (eager.go): the sender RDMA-writes it into a slot of the
// receiver's eager ring for it (per peer, registered host memory, announced to the
// peer ahead of the first message this rank sends it) behind its header (sequence
// number, post, tag, size, signature, root, slot), in one write with an immediate that
// names the slot (or, where the segments leave no room for the header's, in writes
// and then the header in a control slot). A host source is copied with its header
// into this rank's mirror of the peer's ring and written from there, and the send is
// done when queued: its Wait does not wait for the peer's acknowledgement. Every such
// write holds a control send slot until it completes, the flow control of every work
// request that consumes a receive at the peer. The
// receiver copies the slot into the destination when its receive runs, keeps a header
// that comes before its post or task (team.early, with its slot) and drops one of a
// post that is over; freed slots go back as credits, half a ring at a time. A sender
// without a credit sends the header alone as a rendezvous request and the message goes
// the rendezvous way below. So nothing is written into a user buffer before this
// rank's Post. The receiver checks each header (peer, tag, size, signature, root) and
// answers a mismatch with a ready-to-receive that fails the sender too.
//
// Larger messages take the rendezvous path. A receive sends the peer a
// ready-to-receive for its tag; the sender
// answers with RDMA WRITE WITH IMMEDIATE (the low bits of the sequence number and of
// the post, and the tag, in the immediate)
// straight into that buffer, so no host copy is added on the way (zero bytes go
// eager, a header alone in a slot, or without a credit as a rendezvous request that a
// SEND WITH IMMEDIATE without data answers). The receive completion tells the receiver its data is there.
// Sizes, the root and a signature of the collective travel with every
// ready-to-receive, so ranks that disagree fail instead of corrupting memory, with an
// error wrapping driver.ErrMismatch (naming both roots when they differ). A
// ready-to-receive for a tag this rank does not send is evidence too: one that comes
// before its post is kept until that post starts, and fails it then. In a persistent
// collective, a receive into the transport's own scratch that only folds read has two
// buffers and sends the ready-to-receive of the next post, into the other one, when a
// post starts (ahead.go), so that its sender writes as soon as it posts; so does a
// receive into a staged output (coll's scratch, copied out as blocks land), which the
// task then holds in two buffers of its own (driver.OutputOwner). After a failed
// post, every buffer of the transport's own that a peer holds a ready-to-receive of
// (such a next post's, or the failed post's own receives, in any reduction or into
// such an output) is kept until its write lands, its peer answers the abort or the team
// closes (quarantine.go), rather than waiting for a peer that may be idle or not
// there yet. Persistent collectives build their
// graph, work requests and SGE lists once; a post allocates nothing in steady state.
// A non-persistent collective initialized again with the same shape and buffers
// (coll's staging scratch included, which coll's scratch cache hands out again)
// reuses the task the last one closed (taskcache.go), so a repeated Init allocates
// nothing here either.
//
// User buffers are registered through a cache (see regCache): Go slices and
// mem.Buffers stay registered between collectives; raw addresses only while used.
//
// # Algorithms
//
// One row per algorithm in algs.go's table, selected by name through Args.Alg or
// Config.Algs ("knomial:4" sets a radix; Fits says whether a name runs on a team),
// else by size and team size: gather and scatter linear or k-nomial, gatherv linear,
// scatterv linear with a bounded number of writes in flight, bcast k-nomial or
// scatter + ring allgather (sag; a pipelined chain runs only by name), reduce k-nomial or
// reduce-scatter + gather (srg), allgather ring or recursive doubling, allgatherv
// ring, allreduce recursive doubling or reduce-scatter + allgather ring,
// reduce_scatter ring (recursive halving, rh, for power-of-two teams, runs only by
// name), alltoall and
// alltoallv pairwise, barrier (the completion agreement alone). Algorithms lists them.
//
// # Concurrency and blocking
//
// coll calls the TL under its team lock; nothing here blocks except WaitEvent, which
// waits on the CQ's completion channel.
//
// # Device events
//
// A team reads its device's asynchronous events as it polls (events.go): every 1024
// polls, and after a wait that ended without a completion (coll wakes a waiting rank
// at least every 100 ms). A DEVICE_FATAL (or a read of the events failing with EIO:
// the device went away) fails every link, every later one and every later team on
// the context, naming it; a QP's error event fails that QP's link; a port that went
// down (PORT_ERR, until PORT_ACTIVE) is named in the error of any link that fails
// meanwhile, whose RETRY_EXC would otherwise blame the peer.
//
// # What the hardware must provide
//
// RC QPs with RDMA WRITE WITH IMMEDIATE and SEND WITH IMMEDIATE, and registration of
// host memory. Device memory is optional. Reach reports what the transport uses in
// place, probed on the device: host memory, managed memory where registering it works
// (GPUDirect RDMA; on soft0 always), and DM buffers of the context's own pool where the
// pool is device memory (through the pool's MR; never in reductions, which run on the
// CPU), and CUDA device memory where registering it works (a peer-memory module, a
// dma-buf export, or soft0's GPUDirect stand-in; never in reductions); coll stages the
// rest through host memory. Local copies that touch device memory go through mem; a
// copy out of NIC device memory goes through the NIC (an RDMA write on a QP connected
// to itself) where the device says that the CPU reads its memory with uncached loads.
package tlmlx5
