package tlmlx5

import "time"

// The numbers that shape this transport, in one place.

// Sizes of the wire-up. Every peer has one RC QP. Its control block is a ring of
// receive slots that the peer's control messages (ready-to-receive with an rkey,
// coll's messages) land in, and that data writes with immediate consume; each slot
// has a receive posted at all times, and is posted again as soon as it is read. The
// number of slots is the peer's credit: past it, RNR retry (infinite on this
// transport's QPs) holds the sender back until the receiver reposts.
const (
	slotSize = 256
	// eagerHdrRoom is the head of every eager ring slot: the header that arrives with
	// the data in one write (eager.go), padded so that the data stays 64-byte aligned.
	eagerHdrRoom = 64
	sqDepth      = 64
	maxSGE       = 4
	maxWRBytes   = 1 << 30
	wcBatch      = 64
)

// Landing pieces: a send of at least two pieces is written in pieces, each but the
// last with a partial immediate, so that the receiver learns of every piece as it
// lands: a staged destination copies it out, and a reduction folds it (stream.go),
// while the rest arrives. A piece is landPiece bytes, or larger for a send of more
// than maxLandPieces of them, so that no send takes more than maxLandPieces of the
// peer's receive slots (slotsFor: at least 16). Both sides compute it from the
// message's size (pieceOf), so every rank must use the same values; landPiece is a
// variable only so that tests can make pieces small. Measured (docs/design.md,
// "Reductions on the wire"): 256 KiB pieces let a 2-rank 1 MiB reduce fold as it
// lands; 4 MiB pieces left a 16 MiB reduce mostly serial.
var landPiece = 256 << 10

const maxLandPieces = 16

// aheadOutMax bounds the staged output of a persistent collective that takes two
// buffers of the transport's own, so that its ready-to-receives go out a post ahead
// (ahead.go, doubleOutput): each buffer is host memory as large as the output,
// pinned beside CUDA memory, and the staging scratch stays allocated beside them, so
// such an output costs three times its size. Above it the ready-to-receive's flight
// is a small part of a post. A variable only for the diagnosis build's knob
// (knobs_trace.go).
var aheadOutMax = 64 << 20

// pieceOf is the landing piece of a send of n bytes: a multiple of landPiece, so of
// every element size.
func pieceOf(n int) int {
	q := (n + maxLandPieces - 1) / maxLandPieces
	if q <= landPiece {
		return landPiece
	}
	return (q + landPiece - 1) / landPiece * landPiece
}

// The lazy connect (connect.go) and the memory a link takes. A link's handshake that
// has not ended within connectBound fails the link (the collective's deadline, if
// sooner, ends the wait first). A team's CQs hold cqGroup peers' completions each
// (sqDepth + slots entries per peer); a team that links more peers makes another CQ,
// and its WaitEvent then returns every multiCQWait to poll them all.
const (
	cqGroup     = 32
	multiCQWait = time.Millisecond
)

// connectBound is a variable only so that tests can shorten it.
var connectBound = 30 * time.Second

// goneAsk is how often checkLinks asks the Messenger whether the peer of a link still
// being made closed its team, after the first poll (the Messenger's news, an empty
// message, asks at once).
const goneAsk = 20 * time.Millisecond

func slotsFor(n int) int {
	if n > 16 {
		return 16
	}
	return 32
}

// deferLocal: a local copy or fold of at least this many bytes starts after the
// messages that were ready with it are posted (task.run). Below it, the copy is
// shorter than a message's flight, and posting first would only split a chain.
const deferLocal = 32 << 10

const (
	defaultRadix = 4
	// sendWindow bounds the writes a linear or pairwise algorithm keeps in flight, so
	// that a large team does not flood one send queue.
	sendWindow = 8
)

// The chain's pipeline: chunks of at least chainChunk bytes, at most maxChunks of
// them, and at most chainWindow asked for ahead.
const (
	chainChunk  = 128 << 10
	maxChunks   = 1024
	chainWindow = 16
)

// Crossovers of the default choice, measured with ibcoll-perf on soft0 at 8 ranks
// (2026-12-01, two alternated rounds; the tables are in docs/design.md): bcast's
// k-nomial beats the chain at every size there and scatter + allgather from between 4
// and 16 MiB; reduce's reduce-scatter + gather beats the k-nomial tree from between 1
// and 4 MiB. The others are the seed's.
const (
	largeBcast    = 8 << 20
	largeReduce   = 2 << 20
	largeAllred   = 64 << 10
	largeGatherNB = 32 << 10
)

// linearMax is the largest team for which the default choice takes an algorithm
// whose root talks to every rank (linear gather and scatter, and bcast's sag and
// reduce's srg, which scatter from or gather to the root): every such link is a
// queue pair made on first use (connect.go), so beyond it the k-nomial trees, with
// O(log n) peers per rank, are the default at every size. Named algorithms run at
// any size. (gatherv, scatterv and alltoall(v) have no other algorithm.)
const linearMax = 64

// maxIdleRegs bounds the registrations kept while no collective uses them.
const maxIdleRegs = 64

// The eager path (eager.go): a message of at most eagerMaxFor(n) bytes goes into a
// ring slot of the receiver's without a ready-to-receive; each rank keeps
// eagerSlotsFor(n) slots per peer, so a peer's ring is slots × (max + eagerHdrRoom)
// bytes of registered host memory: 129 KiB up to 16 ranks, 64.5 KiB up to 64,
// 16.25 KiB up to 256, 4.25 KiB beyond. Every rank of a team computes the same values from the team size
// (both sides of a message must agree on its path). The maximum was chosen on soft0
// (see docs/design.md): an eager copy out of the ring costs less than the
// ready-to-receive round trip up to there.
func eagerMaxFor(n int) int {
	switch {
	case n <= 64:
		return 8 << 10
	case n <= 256:
		return 4 << 10
	}
	return 1 << 10
}

func eagerSlotsFor(n int) int {
	switch {
	case n <= 16:
		return 16
	case n <= 64:
		return 8
	}
	return 4
}

const (
	// maxEagerSlots bounds the ring a peer may announce.
	maxEagerSlots = 1 << 12
	// maxEarlyHeaders bounds the slotless eager headers (rendezvous requests) a team
	// keeps for receives not started yet, beyond one per slot of its peers' rings.
	maxEarlyHeaders = 4096
)

// maxCachedTasks bounds the closed tasks a team keeps for a repeated Init of the same
// shape (taskcache.go): each holds its scratch and registrations.
const maxCachedTasks = 16
