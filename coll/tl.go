package coll

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/ibcoll/ibcoll/asym"
	"github.com/ibcoll/ibcoll/mem"
)

// The TL (transport layer) interface. A TL registers itself with RegisterTL from its
// init function, like a database/sql driver; coll never imports a TL. Programs import
// the TL for its side effect: import _ "github.com/ibcoll/ibcoll/tlmlx5".
//
// Division of work: coll validates arguments, stages asymmetric buffers (asym), numbers
// collectives, and runs the cross-rank agreement (abort flooding, completion agreement,
// quiescence) over the TL's control messages. The TL wires up the ranks, registers
// memory, moves data and runs the algorithms.
//
// Locking: coll calls every method of TLTeam and TLTask with the team's lock held,
// except NewEndpoint, Connect and Close of a team (called before the team is shared or
// after it is quiescent) and WaitEvent, which blocks and is called without it. The TL
// calls back into CtlHandler only from Poll, so under the same lock.

// TL is a transport layer.
type TL interface {
	// Name is what Config.TLs names.
	Name() string
	// NewContext opens the TL on a device.
	NewContext(cfg TLConfig) (TLContext, error)
}

// TLConfig is what a TL context gets from Config.
type TLConfig struct {
	Device string
}

// TLContext is a TL opened on a device; coll.Context holds one per TL.
type TLContext interface {
	// Reach says which memory types the TL's NIC and the node's CPU reach directly;
	// anything else is staged through host memory.
	Reach() asym.Reach
	// NewEndpoint makes one rank's local part of a team and returns its address for
	// the others (through the OOB). It does not communicate.
	NewEndpoint(p TeamParams) (TLTeam, []byte, error)
	Close() error
}

// TeamParams is what a TL team needs from coll.
type TeamParams struct {
	Rank, Size int
	// Fault counts one step of a kind (FaultAlloc, FaultReg) and returns the injected
	// error when that step must fail.
	Fault func(FaultKind) error
	// NextSeq is the sequence number the next Init will take: control messages of a
	// collective below it that has no task are stale and dropped, the others are kept
	// for the task to come.
	NextSeq func() uint64
	// Algs maps a collective to an algorithm name from Config.Algs.
	Algs map[CollType]string
}

// TLTeam is one rank's endpoint of a team.
type TLTeam interface {
	// Connect wires the endpoint to the others, given every rank's address.
	Connect(addrs [][]byte) error
	// Register registers a staging scratch buffer (asym.Registrar).
	Register(buf *mem.Buffer) (asym.Registration, error)
	// NewTask prepares a collective. It is local: it does not communicate.
	NewTask(spec *TaskSpec) (TLTask, error)
	// SendCtl queues a control message for peer, after everything this rank already
	// queued for it: an abort never overtakes the data it stops. Never blocks.
	SendCtl(peer int, msg []byte) error
	// MaxCtl is the largest control message SendCtl takes.
	MaxCtl() int
	// Poll processes what completed, calling h for coll's control messages. Never
	// blocks.
	Poll(h CtlHandler) error
	// WaitEvent blocks until Poll may find something, or ctx ends. It may return
	// early. Called without the team lock.
	WaitEvent(ctx context.Context) error
	// Broken returns non-nil once a queue pair failed: the team cannot be trusted.
	Broken() error
	// PeerDown reports whether nothing can come from peer any more (its queue pair
	// failed or was fenced).
	PeerDown(peer int) bool
	// Fence moves the queue pair to peer to the error state, so that it can no longer
	// write into this rank's memory. The team is broken after it.
	Fence(peer int, why string)
	Close() error
}

// CtlHandler receives coll's control messages from Poll. msg is valid only during the
// call.
type CtlHandler interface {
	OnCtl(peer int, msg []byte)
}

// TLBuf is a buffer as the TL sees it, after staging: reachable memory.
type TLBuf struct {
	Addr   uintptr
	Slice  []byte
	Buf    *mem.Buffer
	Type   mem.Type
	Bytes  int // the extent in bytes (0: no element)
	Count  int
	Counts []int
	Displs []int
}

// TaskSpec describes one collective to a TL.
type TaskSpec struct {
	Seq        uint64
	Type       CollType
	Root       int
	DType      DType
	Op         Op
	InPlace    bool
	Persistent bool
	Src, Dst   TLBuf
	Alg        string
}

// TLTask is one collective of one rank in a TL.
type TLTask interface {
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
	// Quiesced reports whether no work of the task is outstanding in the NIC.
	Quiesced() bool
	// Waiting describes what an unfinished post waits for, for timeout messages.
	Waiting() string
	// InjectQPError moves a queue pair that the task uses to the error state.
	InjectQPError() error
	Close() error
}

var registry struct {
	sync.RWMutex
	tls map[string]TL
}

// RegisterTL makes a TL available under tl.Name(). It panics if the name is taken or
// tl is nil, like sql.Register: both are programming errors found at init.
func RegisterTL(tl TL) {
	if tl == nil {
		panic("coll: RegisterTL: tl is nil")
	}
	registry.Lock()
	defer registry.Unlock()
	if registry.tls == nil {
		registry.tls = map[string]TL{}
	}
	if _, dup := registry.tls[tl.Name()]; dup {
		panic(fmt.Sprintf("coll: RegisterTL: %q registered twice", tl.Name()))
	}
	registry.tls[tl.Name()] = tl
}

// TLs returns the names of the registered TLs, sorted.
func TLs() []string {
	registry.RLock()
	defer registry.RUnlock()
	var out []string
	for n := range registry.tls {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func lookupTLs(names []string) ([]TL, error) {
	registry.RLock()
	defer registry.RUnlock()
	if len(names) == 0 {
		for n := range registry.tls {
			names = append(names, n)
		}
		slices.Sort(names)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("coll: NewContext: no TL registered (import _ \"github.com/ibcoll/ibcoll/tlmlx5\"): %w", ErrNotSupported)
	}
	var out []TL
	for i, n := range names {
		tl, ok := registry.tls[n]
		if !ok {
			var have []string
			for h := range registry.tls {
				have = append(have, h)
			}
			slices.Sort(have)
			return nil, invalid("NewContext", "Config.TLs[%d] %q is not registered (registered: %v)", i, n, have)
		}
		out = append(out, tl)
	}
	return out, nil
}
