// Package driver is the interface between coll and the transports that move its data,
// in the manner of database/sql/driver: a transport implements these interfaces and
// registers itself from its init function; coll finds it by name and never imports
// it. Programs import a transport for its side effect:
//
//	import _ "github.com/ibcoll/ibcoll/tlmlx5"
//
// Division of work: coll validates arguments (from package collective's table), stages
// asymmetric buffers (asym), numbers collectives and runs the cross-rank agreement
// (abort flooding, completion agreement, quiescence) over the transport's control
// messages. The transport wires up the ranks, registers memory, moves data and runs the
// algorithms.
//
// Locking: coll calls every method of Endpoint and Task with the team's lock held,
// except NewEndpoint, Connect and Close of an endpoint (called before the team is
// shared or after it is quiescent) and WaitEvent, which blocks and is called without
// it. The transport calls the Handler only from Poll, so under the same lock.
package driver

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"

	"github.com/ibcoll/ibcoll/collective"
	"github.com/ibcoll/ibcoll/fault"
	"github.com/ibcoll/ibcoll/internal/errs"
	"github.com/ibcoll/ibcoll/mem"
)

// Transport is a transport layer.
type Transport interface {
	// Name is what coll.Config.TLs names.
	Name() string
	// Open opens the transport on a device.
	Open(cfg Config) (Context, error)
}

// Config is what a transport gets from coll.Config.
type Config struct {
	// Device names the device; "" lets the transport choose.
	Device string
	// GIDIndex picks the GID of a RoCE port; 0 lets the transport choose.
	GIDIndex int
	// TrafficClass, ServiceLevel and PKeyIndex set the path of the transport's QPs
	// (coll.Config's fields of those names).
	TrafficClass, ServiceLevel, PKeyIndex int
	// SoftGPUDirect turns on soft0's GPUDirect stand-in (coll.Config.SoftGPUDirect).
	SoftGPUDirect bool
	// SoftDMUncached makes soft0 report its device memory as a real device's
	// (coll.Config.SoftDMUncached).
	SoftDMUncached bool
	// DMCapacity is the most NIC device memory the context takes for its pool
	// (DM buffers, DM staging scratch); 0 lets the transport choose.
	DMCapacity int
}

// DMAllocator is implemented by a Context whose device has memory of its own (NIC
// device memory) that it uses in place: DM buffers allocated here are registered
// already, so the transport moves them without staging. AllocDM fails with an error
// wrapping ErrNotSupported where the context has no device memory.
type DMAllocator interface {
	AllocDM(size int) (*mem.Buffer, error)
}

// AlgChecker is implemented by a Context whose algorithms have names (Config.Algs,
// Args.Alg): CheckAlg says whether alg names one of collective c's, whatever the
// team's size (which Init checks), with an error wrapping ErrInvalid where not, so
// that coll.NewContext refuses a misspelt Config.Algs instead of every later Init.
type AlgChecker interface {
	CheckAlg(c collective.Type, alg string) error
}

// Context is a transport opened on a device; a coll.Context holds one.
type Context interface {
	// Reach says which memory types the transport registers directly and which the
	// node's CPU reaches; anything else is staged through host memory.
	Reach() mem.Reach
	// NewEndpoint makes one rank's local part of a team and returns its address for
	// the others (through the OOB). It does not communicate.
	NewEndpoint(p TeamParams) (Endpoint, []byte, error)
	Close() error
}

// DeviceNamer is implemented by a Context that opened a named device: DeviceName is
// that name (coll.Placement.Opened).
type DeviceNamer interface {
	DeviceName() string
}

// TeamParams is what a transport's endpoint needs from coll.
type TeamParams struct {
	Rank, Size int
	// Faults is the rank's fault counter: the transport counts its scratch
	// allocations (fault.Alloc) and registrations (fault.Reg) on it.
	Faults *fault.Set
	// NextSeq is the sequence number the next Init will take: control messages of a
	// collective below it that has no task are stale and dropped, the others are kept
	// for the task to come.
	NextSeq func() uint64
	// Leaving is what a closing endpoint tells peers it has no link to yet: the first
	// collective this rank did not do its part of (NextSeq, unless the team broke
	// with collectives in flight: the first of those) and, if it broke, why. nil:
	// NextSeq, no cause.
	Leaving func() (from uint64, why string)
	// Algs maps a collective to an algorithm name from coll.Config.Algs.
	Algs map[collective.Type]string
	// Messenger carries point-to-point messages to the other ranks' endpoints
	// outside the transport, when the OOB the team is made over can (coll.Messenger):
	// an endpoint may then connect to a peer on first use, and implements Lazy.
	// nil: the endpoint connects to every peer at Connect.
	Messenger Messenger
}

// Messenger sends an endpoint's out-of-band messages to its peers' endpoints of the
// same team (the bootstrap of a lazy connection: queue pair numbers). What a peer's
// endpoint is sent arrives at its Lazy.Message, in order per sender.
type Messenger interface {
	// Send queues msg for peer's endpoint. It never blocks; msg may be reused when it
	// returns. An error says the message can never arrive (peer's team closed, or
	// the channel failed).
	Send(peer int, msg []byte) error
	// Gone returns an error wrapping ErrClosed once the messenger knows that peer's
	// endpoint will never read what it is sent (its team closed), else nil. It never
	// blocks; a messenger that cannot tell cheaply always returns nil.
	Gone(peer int) error
	// Left passes on what the transport learned from peer's endpoint itself: its team
	// closed (why says so) when its next collective was from, which it never takes part
	// in. The team counts peer gone from there.
	Left(peer int, from uint64, why string)
}

// MaxMessage is the largest message a Messenger must carry.
const MaxMessage = 256

// LinkCounter is implemented by an Endpoint that can say how many peers it holds a
// connection to (tools print it: a lazy endpoint's count shows what its collectives
// used).
type LinkCounter interface {
	Links() int
}

// Answerer is implemented by an Endpoint that may leave a buffer exposed to a peer
// beyond what Task.Writers reports (tlmlx5's ready-to-receives sent ahead, which a
// failed task keeps at Close). coll calls Answered, under the team's lock, when peer's
// abort or acknowledgement naming post of collective seq arrives, where this rank
// closed that collective or holds it failed (it will move no more data for it): peer
// has heard that post failed, so it fails every later post of seq it has not finished
// without writing, and RC ordering puts any write it made before this message. The
// endpoint may then free what it kept for peer's writes of seq's posts from post on.
type Answerer interface {
	Answered(peer int, seq uint64, post uint32)
}

// LocalWorker is implemented by an Endpoint whose Poll may have local work to go on
// with that no completion announces (tlmlx5 copies a staged root's own block a piece
// per Poll). While LocalWork reports true, its WaitEvent returns at once; coll, under
// the team's lock after every Poll, also wakes a goroutine already asleep in
// WaitEvent, which would otherwise sleep through it.
type LocalWorker interface {
	LocalWork() bool
}

// Counter is implemented by an Endpoint that counts the completions its Polls took:
// coll's keeper, which polls a team that no call polls at a slow period, polls again
// soon while they keep coming (a peer's queue drains only as fast as this rank
// re-posts its receives and returns credits).
type Counter interface {
	Completions() uint64
}

// Lazy is implemented by an Endpoint that was given a Messenger and connects to a
// peer only when it first sends to it or hears from it.
type Lazy interface {
	// Message hands the endpoint a message that peer's endpoint sent through the
	// Messenger. coll calls it with the team's lock held, and kicks the waiter
	// after it (what it connected may have work for Poll). An empty msg is the
	// Messenger's news of peer, not a message: an endpoint making a link to peer asks
	// Messenger.Gone(peer) again.
	Message(peer int, msg []byte)
	// Linked reports whether the endpoint has, or is making, a link to peer: a
	// message to an unlinked peer that nothing asks for (a team event flooded to
	// every peer, say) is better not sent, since sending it makes the link.
	Linked(peer int) bool
	// Linking reports whether a link to peer is being made and not yet up both ways:
	// what waits for an answer from peer waits for the link first, within the
	// link's own bound (after which peer is down).
	Linking(peer int) bool
}

// Endpoint is one rank's endpoint of a team.
type Endpoint interface {
	// Connect wires the endpoint to the others, given every rank's address.
	Connect(addrs [][]byte) error
	// Register registers a staging scratch buffer; closing the result deregisters it.
	Register(buf *mem.Buffer) (io.Closer, error)
	// NewTask prepares a collective. It is local: it does not communicate. It
	// refuses, with an error wrapping ErrBusy, a sequence number that the transport
	// cannot tell apart from an open task's on the wire.
	NewTask(spec *TaskSpec) (Task, error)
	// SendCtl queues a control message for peer, after everything this rank already
	// queued for it: an abort never overtakes the data it stops. Never blocks.
	SendCtl(peer int, msg []byte) error
	// MaxCtl is the largest control message SendCtl takes.
	MaxCtl() int
	// Poll processes what completed, handing coll's control messages to h. Never
	// blocks.
	Poll(h Handler) error
	// WaitEvent blocks until Poll may find something, or ctx ends. It may return
	// early. Called without the team lock.
	WaitEvent(ctx context.Context) error
	// Broken returns non-nil once a link to a peer failed: the team cannot be
	// trusted.
	Broken() error
	// PeerDown reports whether nothing can come from peer any more (its link failed or
	// was cut).
	PeerDown(peer int) bool
	// Unsent counts the sends to live peers that closing the endpoint would drop:
	// queued behind a peer's receive credits, or still in a send queue. Close waits
	// (polling) for it to reach 0 before it closes the endpoint.
	Unsent() int
	// CutOff makes sure that peer can no longer write into this rank's memory (an RC
	// transport moves the queue pair to the error state). The team is broken after it.
	CutOff(peer int, why string)
	Close() error
}

// Handler receives coll's control messages from Poll. msg is valid only during the
// call.
type Handler interface {
	Control(peer int, msg []byte)
}

// Buf is a buffer as the transport sees it, after staging: memory it reaches.
type Buf struct {
	Addr   uintptr
	Slice  []byte
	Buf    *mem.Buffer
	Type   mem.Type
	Bytes  int // the extent in bytes (0: no element)
	Count  int
	Counts []int
	Displs []int
}

// TaskSpec describes one collective to a transport.
type TaskSpec struct {
	Seq        uint64
	Type       collective.Type
	Root       int
	DType      collective.DType
	Op         collective.Op
	InPlace    bool
	Persistent bool
	// Block is the element count every rank agrees on, -1 for v-collectives.
	Block    int
	Src, Dst Buf
	Alg      string
	// Landed, when set, is told of output bytes (Dst; Src in bcast, whose non-roots
	// receive into it) [off, off+n) that the current post has
	// written for good (a block received, or copied locally, that nothing later
	// changes), so that a staged destination copies them out while later blocks are
	// still arriving. The transport calls it from its progress, never for
	// reductions, whose output is final only at the end. coll sets it only where the
	// output is its staging scratch, copied out: what it reports, and the rest at the
	// post's end, is read from the scratch (or from the task's own buffer of the post:
	// OutputOwner), and nothing else reads it.
	Landed func(off, n int)
	// Ready, when set, says whether Src bytes [off, off+n) of the current post are in
	// place: a staged source may be copied in beside the wire. The transport must not
	// read a range before Ready says so, must retry at every Poll (coll keeps polling
	// while a copy-in runs), and must fail the post with Ready's error.
	Ready func(off, n int) (bool, error)
	// Sig is coll's signature of the collective without the algorithm, the same on
	// every rank that initialized it alike. The transport puts it, mixed with its
	// algorithm, in the signature its messages carry, so that a message whose
	// signature equals this rank's shows that its sender initialized the collective
	// as this rank did.
	Sig uint32
	// Witness, when set, is told of each such message (Seen): an eager header or a
	// ready-to-receive of a peer whose signature equals this rank's. It may hear of a
	// peer more than once, and before Init returns (messages that came first).
	Witness Witness
}

// OutputOwner is implemented by a Task that may write a persistent collective's staged
// output (TaskSpec.Landed is set: Dst, or Src in bcast, is coll's staging scratch, which
// nothing but its copy-out reads) into buffers of its own instead, one per post parity,
// so that peers can write a post's data before that post starts while the last one's
// is still copied out (tlmlx5's ready-to-receives sent ahead). The ranges given to
// Landed are then offsets in that buffer.
type OutputOwner interface {
	// Output returns the buffer that holds post's output, or nil where it is the
	// spec's own. It is the same for every post of one parity, host memory of at least
	// the output's bytes, and lives until the task closes.
	Output(post uint32) *mem.Buffer
}

// A Witness hears that a peer's message carried this rank's signature of the
// collective (TaskSpec.Witness).
type Witness interface {
	Seen(peer int)
}

// Task is one collective of one rank in a transport.
type Task interface {
	// Alg is the algorithm chosen, with its parameters ("knomial:4"); it must be the
	// same on every rank, and coll checks that it is.
	Alg() string
	// Post starts post number post (1, 2, ...).
	Post(post uint32) error
	// State reports whether the post's data movement is done on this rank, and its
	// error if it failed.
	State() (done bool, err error)
	// Abort stops issuing work for the post. Work already posted still completes.
	Abort()
	// Quiesced reports whether no work this rank posted for the task is outstanding.
	// Writes that peers made into this rank's buffers may still wait in the
	// completion queue: the transport must not take them for a later post's data.
	Quiesced() bool
	// Waiting describes what an unfinished post waits for, for timeout messages.
	Waiting() string
	// Peers lists, in increasing order and without this rank, the ranks that the
	// task sends to or receives from: the only ones that can write into this rank's
	// buffers for it. It must be the same on every post, and symmetric across ranks
	// that initialized the same collective (p lists q exactly when q lists p). coll
	// sends a failure's news to them directly: they may wait for this rank.
	Peers() []int
	// Writers appends to buf (and returns) the peers that can still write into this
	// rank's memory for the post in flight: those to which this rank exposed a
	// buffer (a ready-to-receive, for this post or an earlier-armed later one, sent
	// or queued) whose data has not landed. After Abort no buffer is exposed any
	// more, so the list only shrinks. A failed post waits for the abort's
	// acknowledgement of these peers only: a peer whose writes all landed, say one
	// that finished its part and went idle, owes nothing. A transport may leave out
	// a buffer that nothing reads again if it keeps it allocated and registered
	// until the write lands, the peer answers (Answerer) or the team closes
	// (tlmlx5's receives into its own scratch, of the post and sent ahead, kept at
	// Close after an Abort).
	Writers(buf []int) []int
	// BreakLink breaks a link that the task uses, as a failing NIC would (fault.QPErr).
	BreakLink() error
	// Tells reports whether every first post of the task sends peer a message that
	// carries the signature (TaskSpec.Sig), whatever the data, and that peer's
	// transport checks on arrival: so it either tells its Witness that it saw it, or
	// fails the collective as a mismatch on both sides, unless this post fails
	// first.
	Tells(peer int) bool
	Close() error
}

var registry struct {
	sync.RWMutex
	byName map[string]Transport
}

// Register makes a transport available under t.Name(). It panics if the name is taken
// or t is nil, like sql.Register: both are programming errors found at init.
func Register(t Transport) {
	if t == nil {
		panic("driver: Register: transport is nil")
	}
	registry.Lock()
	defer registry.Unlock()
	if registry.byName == nil {
		registry.byName = map[string]Transport{}
	}
	if _, dup := registry.byName[t.Name()]; dup {
		panic(fmt.Sprintf("driver: Register: %q registered twice", t.Name()))
	}
	registry.byName[t.Name()] = t
}

// Names returns the names of the registered transports, sorted.
func Names() []string {
	registry.RLock()
	defer registry.RUnlock()
	return slices.Sorted(maps.Keys(registry.byName))
}

// Lookup returns the transports named, in order; no names means every registered one,
// sorted by name. An unknown name is an error wrapping ErrInvalid that names
// field[i]; none registered at all wraps ErrNotSupported.
func Lookup(field string, names []string) ([]Transport, error) {
	if len(names) == 0 {
		names = Names()
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no transport registered (import _ \"github.com/ibcoll/ibcoll/tlmlx5\"): %w", errs.ErrNotSupported)
	}
	registry.RLock()
	defer registry.RUnlock()
	out := make([]Transport, 0, len(names))
	for i, n := range names {
		t, ok := registry.byName[n]
		if !ok {
			have := slices.Sorted(maps.Keys(registry.byName))
			return nil, fmt.Errorf("%s[%d] %q is not registered (registered: %v): %w", field, i, n, have, errs.ErrInvalid)
		}
		out = append(out, t)
	}
	return out, nil
}

// The sentinel errors a transport wraps, shared with coll and every other package
// (coll.ErrBusy is the same value as ErrBusy, and so on).
var (
	ErrInvalid      = errs.ErrInvalid
	ErrBusy         = errs.ErrBusy
	ErrClosed       = errs.ErrClosed
	ErrNotSupported = errs.ErrNotSupported
	// ErrMismatch is wrapped by a task's error when what a peer sent shows that it
	// runs a different collective, root, size or algorithm for the same sequence
	// number.
	ErrMismatch = errs.ErrMismatch
)

// LinkError is what an Endpoint's Broken wraps when its link to one peer failed (an
// RC queue pair in the error state): coll tells the team that this peer is lost, so
// that every rank's error names it rather than the rank that happened to see it.
type LinkError struct {
	Peer int
	Err  error
}

func (e *LinkError) Error() string {
	return fmt.Sprintf("queue pair to rank %d failed: %v", e.Peer, e.Err)
}

func (e *LinkError) Unwrap() error { return e.Err }
