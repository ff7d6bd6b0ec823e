package coll_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/internal/topo"
)

// peerSet adds rank r's parent and children in the k-nomial tree to set.
func peerSet(set map[int]bool, n, root, r, radix int) {
	parent, children := topo.KNomialPeers(n, root, r, radix)
	if parent >= 0 {
		set[parent] = true
	}
	for _, c := range children {
		set[c] = true
	}
}

// TestLazyLinks: over LocalOOB (a Messenger) a team of 64 connects at first use only:
// no links after NewTeam; after a k-nomial gather (the default for small blocks on
// this many ranks) each rank holds exactly the links of the gather's tree (radix 4)
// and of the completion agreement's (radix 8), both from internal/topo; recursive
// doubling allreduce then adds its partners.
func TestLazyLinks(t *testing.T) {
	const n = 64
	w := newWorld(t, n, coll.Config{Timeout: time.Minute})
	for _, r := range w.ranks {
		require.Zero(t, r.team.Links(), "rank %d linked at NewTeam", r.r)
	}
	algs := make([]string, n)
	w.mustRun(func(r *rank) error {
		req, err := r.team.Init(coll.Args{Type: coll.Gather, Root: 0, DType: coll.Int32,
			Src: coll.BufferDesc{Slice: make([]byte, 8), Count: 2}, Dst: coll.BufferDesc{Slice: make([]byte, 8*n), Count: 2 * n}})
		if err != nil {
			return err
		}
		algs[r.r] = req.Alg()
		if err := req.Post(); err != nil {
			return errors.Join(err, req.Close())
		}
		return errors.Join(req.Wait(context.Background()), req.Close())
	})
	require.Equal(t, "knomial:4", algs[0])
	want := make([]map[int]bool, n)
	for r := range want {
		want[r] = map[int]bool{}
		peerSet(want[r], n, 0, r, 4)
		peerSet(want[r], n, 0, r, 8)
	}
	for _, r := range w.ranks {
		require.Equal(t, len(want[r.r]), r.team.Links(), "rank %d after the gather", r.r)
	}
	w.mustRun(func(r *rank) error {
		return r.team.Run(context.Background(), coll.Args{Type: coll.Allreduce, DType: coll.Int32, Op: coll.OpSum, Alg: "rd",
			Src: coll.BufferDesc{Slice: make([]byte, 16), Count: 4}, Dst: coll.BufferDesc{Slice: make([]byte, 16), Count: 4}})
	})
	for _, r := range w.ranks {
		for b := 1; b < n; b <<= 1 {
			want[r.r][r.r^b] = true
		}
		require.Equal(t, len(want[r.r]), r.team.Links(), "rank %d after the allreduce", r.r)
		require.Less(t, r.team.Links(), 24, "O(log n) links")
	}
}

// deafMessenger is a LocalOOB rank whose mailbox never delivers: a peer that never
// answers a connect.
type deafMessenger struct{ coll.Messenger }

func (d deafMessenger) Mailbox() (coll.Mailbox, error) {
	m, err := d.Messenger.Mailbox()
	return deafMailbox{m}, err
}

type deafMailbox struct{ coll.Mailbox }

func (deafMailbox) Listen(func(int, []byte)) {}

// TestLazyConnectUnanswered: a rank that never answers a connect leaves nobody
// hanging: every rank's collective fails by its deadline at the latest.
func TestLazyConnectUnanswered(t *testing.T) {
	const n, deaf = 4, 2
	oobs := coll.LocalOOB(n)
	oobs[deaf] = deafMessenger{oobs[deaf].(coll.Messenger)}
	w := newWorldOOB(t, coll.Config{Timeout: time.Second}, oobs)
	start := time.Now()
	errs := w.run(func(r *rank) error {
		return runColl(context.Background(), r.team, coll.Args{Type: coll.Allgather, DType: coll.Uint8,
			Src: coll.BufferDesc{Slice: make([]byte, 4), Count: 4}, Dst: coll.BufferDesc{Slice: make([]byte, 4*n), Count: 4 * n}})
	})
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
	}
	t.Logf("every rank failed within %v: %v", time.Since(start).Round(time.Millisecond), errs[0])
}

// TestLazyConnectFault: an injected connect fault (FaultConnect) fails the collective
// on every rank, naming the injected cause on the rank where it fired, and the rank
// made a connection (the step the fault counts).
func TestLazyConnectFault(t *testing.T) {
	const n, at = 4, 1
	w := newWorld(t, n, coll.Config{Timeout: 10 * time.Second,
		Faults: []coll.Fault{{Kind: coll.FaultConnect, Rank: at, N: 1}}})
	start := time.Now()
	errs := w.run(func(r *rank) error {
		return runColl(context.Background(), r.team, coll.Args{Type: coll.Allreduce, DType: coll.Int32, Op: coll.OpSum,
			Src: coll.BufferDesc{Slice: make([]byte, 16), Count: 4}, Dst: coll.BufferDesc{Slice: make([]byte, 16), Count: 4}})
	})
	require.GreaterOrEqual(t, w.ranks[at].team.FaultSteps(coll.FaultConnect), int64(1), "rank %d made no connection: the fault cannot have fired", at)
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		require.False(t, errors.Is(err, context.DeadlineExceeded), "rank %d waited for its deadline: %v", r, err)
	}
	// The rank where it fired may hear of the failure from a peer first: the cause
	// is named either way.
	require.ErrorContains(t, errs[at], "injected fault: connect #1")
	t.Logf("every rank failed within %v", time.Since(start).Round(time.Millisecond))
}
