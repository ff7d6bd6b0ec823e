package coll_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/mem"
	_ "github.com/ibcoll/ibcoll/tlmlx5" // the transport: a program imports one
)

// exampleRanks runs body on n goroutine ranks of one process, each with its own
// context and team over LocalOOB, and returns once every rank has closed. A program
// under a launcher runs one rank per process instead, with TCPOOB over the
// bootstrap store; the rest is the same.
func exampleRanks(n int, cfg coll.Config, body func(t *coll.Team) error) []error {
	oobs := coll.LocalOOB(n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = exampleRank(cfg, oobs[r], body)
		}()
	}
	wg.Wait()
	return errs
}

func exampleRank(cfg coll.Config, oob coll.OOB, body func(t *coll.Team) error) error {
	c, err := coll.NewContext(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	team, err := c.NewTeam(ctx, oob)
	if err != nil {
		return errors.Join(err, c.Close())
	}
	err = body(team)
	// The team closes before its context: a parent's Close refuses while children
	// are open.
	return errors.Join(err, team.Close(), c.Close())
}

// soft0 is the in-process software device, so that the examples run anywhere; a
// program leaves Device empty (or sets $IBCOLL_DEVICE, see ConfigFromEnv) and gets
// the node's NIC.
var exampleCfg = coll.Config{Device: "soft0"}

// Four ranks gather one byte each to rank 0 with the blocking wrapper.
func Example() {
	var mu sync.Mutex
	var got []byte
	errs := exampleRanks(4, exampleCfg, func(t *coll.Team) error {
		src := []byte{byte(10 * t.Rank())}
		var dst []byte
		if t.Rank() == 0 {
			dst = make([]byte, t.Size()) // only the root's dst is used
		}
		if err := t.Gather(context.Background(), src, dst, 0); err != nil {
			return err
		}
		if t.Rank() == 0 {
			mu.Lock()
			got = dst
			mu.Unlock()
		}
		return nil
	})
	fmt.Println(got, errors.Join(errs...))
	// Output: [0 10 20 30] <nil>
}

// A loop of non-blocking collectives: Init, Post, Wait, Close, with every Init after
// the first into the request that the last one closed, so that the loop allocates
// nothing per collective.
func ExampleTeam_InitInto() {
	sums := make([]int32, 3)
	errs := exampleRanks(3, exampleCfg, func(t *coll.Team) error {
		src, dst := make([]byte, 4), make([]byte, 4)
		var req *coll.Request
		for i := range 5 {
			src[0] = byte(t.Rank() + i) // little-endian int32: rank + i
			a := coll.Args{
				Type:  coll.Allreduce,
				DType: coll.Int32,
				Op:    coll.OpSum,
				Src:   coll.BufferDesc{Slice: src, Count: 1},
				Dst:   coll.BufferDesc{Slice: dst, Count: 1},
			}
			var err error
			if req == nil {
				req, err = t.Init(a)
			} else {
				err = t.InitInto(req, a)
			}
			if err != nil {
				return err
			}
			err = req.Post()
			if err == nil {
				err = req.Wait(context.Background())
			}
			if err := errors.Join(err, req.Close()); err != nil {
				return err
			}
		}
		sums[t.Rank()] = int32(dst[0]) // (0+4) + (1+4) + (2+4) on every rank
		return nil
	})
	fmt.Println(sums, errors.Join(errs...))
	// Output: [15 15 15] <nil>
}

// Asymmetric memory: the root gathers host memory into simulated device memory
// (mem.Sim, which the CPU must not touch, as CUDA memory on a GPU machine), so
// its destination is staged through registered host scratch and copied out when
// the collective completes. The request says what it staged.
func ExampleRequest_Staging() {
	const n = 4
	var report string
	got := make([]byte, n)
	errs := exampleRanks(n, exampleCfg, func(t *coll.Team) error {
		a := coll.Args{
			Type:  coll.Gather,
			DType: coll.Uint8,
			Src:   coll.BufferDesc{Slice: []byte{byte(t.Rank() + 1)}, Count: 1},
		}
		if t.Rank() == 0 {
			dst, err := mem.Alloc(mem.Sim, n)
			if err != nil {
				return err
			}
			defer dst.Close() // after the request's Close: buffers outlive their requests
			a.Dst = coll.BufferDesc{Buf: dst, Count: n}
		}
		req, err := t.Init(a)
		if err != nil {
			return err
		}
		err = req.Post()
		if err == nil {
			err = req.Wait(context.Background())
		}
		if t.Rank() == 0 && err == nil {
			report = req.Staging().Dst.String()
			host, herr := mem.Alloc(mem.Host, n)
			if herr != nil {
				return errors.Join(herr, req.Close())
			}
			err = mem.Copy(host, 0, a.Dst.Buf, 0, n)
			copy(got, host.Bytes())
			err = errors.Join(err, host.Close())
		}
		return errors.Join(err, req.Close())
	})
	fmt.Println(report)
	fmt.Println(got, errors.Join(errs...))
	// Output:
	// sim via host scratch (4 B, copy-out at completion)
	// [1 2 3 4] <nil>
}

// No rank is left waiting: an Init that fails on rank 2 (an injected fault) fails
// the collective on every rank, the others naming rank 2, and the team stays usable
// for the next collective. AllOrNothing makes the outcome the same everywhere; without
// it a rank whose part was done before the news came (here a leaf whose block went
// out eagerly) keeps its success, with its output right.
func ExamplePeerError() {
	cfg := exampleCfg
	cfg.AllOrNothing = true
	cfg.Faults = []coll.Fault{{Kind: coll.FaultInit, Rank: 2}}
	lines := make([]string, 4)
	errs := exampleRanks(4, cfg, func(t *coll.Team) error {
		src, dst := []byte{byte(t.Rank())}, make([]byte, t.Size())
		err := t.Gather(context.Background(), src, dst, 0)
		var pe *coll.PeerError
		switch {
		case errors.As(err, &pe):
			lines[t.Rank()] = fmt.Sprintf("rank %d: rank %d failed", t.Rank(), pe.Rank)
		case err != nil:
			lines[t.Rank()] = fmt.Sprintf("rank %d: failed here, injected: %v", t.Rank(), errors.Is(err, coll.ErrInjected))
		default:
			lines[t.Rank()] = fmt.Sprintf("rank %d: succeeded", t.Rank())
		}
		return t.Gather(context.Background(), src, dst, 0) // the next one works
	})
	for _, l := range lines {
		fmt.Println(l)
	}
	fmt.Println(errors.Join(errs...))
	// Output:
	// rank 0: rank 2 failed
	// rank 1: rank 2 failed
	// rank 2: failed here, injected: true
	// rank 3: rank 2 failed
	// <nil>
}
