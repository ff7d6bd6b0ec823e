package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/trace"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/mem"
)

// rankRunner runs the sweep on one rank.
type rankRunner struct {
	o    *options
	rank int
	size int
	cctx *coll.Context // dm buffers come from its pool
	team *coll.Team
	ref  *reference
	rep  *reporter // rank 0 only
	mem  memPair
	// lineUpLinks is how many connections the rank had once its first line-up
	// barrier was done: the barrier's own, made before any measured collective's.
	lineUpLinks int
	linedUp     bool
}

// sizeResult is what each rank contributes to a row; rank 0 merges them.
type sizeResult struct {
	Times    []int64 `json:"t"` // ns per timed iteration
	Alg      string  `json:"a,omitempty"`
	Mismatch string  `json:"m,omitempty"`
	Err      string  `json:"e,omitempty"`
	Peer     bool    `json:"p,omitempty"` // Err is a peer's failure seen here
	Staged   int64   `json:"s,omitempty"` // bytes staging copied per timed iteration
	Staging  string  `json:"g,omitempty"` // how this rank's buffers are staged
	Compared int64   `json:"c,omitempty"` // output bytes --check compared on this rank, over the iterations
}

// stagingDesc says how a rank's buffers go through the collective, staged sides only.
func stagingDesc(r coll.StagingReport) string {
	var parts []string
	if r.Src.Staged {
		parts = append(parts, "src "+r.Src.String())
	}
	if r.Dst.Staged {
		parts = append(parts, "dst "+r.Dst.String())
	}
	if len(parts) == 0 {
		return "nothing staged"
	}
	return strings.Join(parts, "; ")
}

// buffers are one size's user buffers, plus a host bounce buffer through
// which inputs are written and outputs read, whatever their memory type.
type buffers struct {
	src, dst, host *mem.Buffer
}

func (b *buffers) close() error {
	return errors.Join(b.src.Close(), b.dst.Close(), b.host.Close())
}

// allocBuf allocates n bytes of t; dm comes from the rank's context, whose
// teams use it in place.
func (rr *rankRunner) allocBuf(t mem.Type, n int) (*mem.Buffer, error) {
	if n == 0 {
		return nil, nil
	}
	if t == mem.DM {
		return rr.cctx.AllocDM(n)
	}
	return mem.Alloc(t, n)
}

func (rr *rankRunner) alloc(s shape) (*buffers, error) {
	es := rr.o.dtype.Size()
	b := &buffers{}
	var err error
	if b.src, err = rr.allocBuf(rr.mem.src, s.srcCount*es); err != nil {
		return b, fmt.Errorf("rank %d: allocating %d bytes of %v for src: %w", rr.rank, s.srcCount*es, rr.mem.src, err)
	}
	if b.dst, err = rr.allocBuf(rr.mem.dst, s.dstCount*es); err != nil {
		return b, fmt.Errorf("rank %d: allocating %d bytes of %v for dst: %w", rr.rank, s.dstCount*es, rr.mem.dst, err)
	}
	if b.host, err = rr.allocBuf(mem.Host, max(s.srcCount, s.dstCount)*es); err != nil {
		return b, err
	}
	return b, nil
}

// input and output are the buffers that carry this rank's input and its
// result (nil: none).
func (b *buffers) input(s shape) *mem.Buffer {
	if s.inputIsDst() {
		return b.dst
	}
	return b.src
}

func (b *buffers) output(s shape) *mem.Buffer {
	if s.c == coll.Bcast {
		if s.rank == s.root {
			return nil
		}
		return b.src
	}
	return b.dst
}

func (b *buffers) write(dst *mem.Buffer, data []byte) error {
	if dst == nil || len(data) == 0 {
		return nil
	}
	copy(b.host.Bytes(), data)
	return mem.Copy(dst, 0, b.host, 0, len(data))
}

func (b *buffers) read(src *mem.Buffer) ([]byte, error) {
	if err := mem.Copy(b.host, 0, src, 0, src.Len()); err != nil {
		return nil, err
	}
	return b.host.Bytes()[:src.Len()], nil
}

func (rr *rankRunner) args(s shape, b *buffers) coll.Args {
	a := coll.Args{Type: s.c, Root: s.root, DType: rr.o.dtype, Op: rr.o.op, Alg: rr.o.algs[s.c]}
	if rr.o.persistent {
		a.Flags |= coll.Persistent
	}
	if s.inPlace {
		a.Flags |= coll.InPlace
	}
	a.Src = coll.BufferDesc{Buf: b.src, Type: rr.mem.src, Count: s.srcCount}
	a.Dst = coll.BufferDesc{Buf: b.dst, Type: rr.mem.dst, Count: s.dstCount}
	if b.src == nil {
		a.Src = coll.BufferDesc{Type: rr.mem.src}
	}
	if b.dst == nil {
		a.Dst = coll.BufferDesc{Type: rr.mem.dst}
	}
	switch s.c {
	case coll.Gatherv:
		a.Dst.Counts, a.Dst.Displs = s.counts, s.displs
		if s.rank != s.root {
			a.Dst.Counts, a.Dst.Displs = nil, nil
		}
	case coll.Scatterv:
		a.Src.Counts, a.Src.Displs = s.counts, s.displs
		if s.rank != s.root {
			a.Src.Counts, a.Src.Displs = nil, nil
		}
	case coll.Allgatherv:
		a.Dst.Counts, a.Dst.Displs = s.counts, s.displs
	case coll.Alltoallv:
		a.Dst.Counts, a.Dst.Displs = s.counts, s.displs
		if !s.inPlace {
			a.Src.Counts, a.Src.Displs = s.sendCounts, s.sendDispls
		}
	}
	return a
}

// prepare writes iteration it's input and the output canary.
func (rr *rankRunner) prepare(s shape, b *buffers, it int) error {
	in := b.input(s)
	if err := b.write(in, rr.ref.inputOf(s, it)); err != nil {
		return err
	}
	if out := b.output(s); out != nil && out != in {
		c := make([]byte, out.Len())
		canary(rr.ref.seed, it, rr.rank, c)
		if err := b.write(out, c); err != nil {
			return err
		}
	}
	return nil
}

// verify compares this rank's output of iteration it with the reference, and says how
// many bytes it compared (0 where the rank has no output, so that a row whose ranks
// compared nothing is not called checked).
func (rr *rankRunner) verify(s shape, b *buffers, it int) (string, int64, error) {
	out := b.output(s)
	if out == nil {
		return "", 0, nil
	}
	want, err := rr.ref.expected(s, it)
	if err != nil || want == nil {
		return "", 0, err
	}
	got, err := b.read(out)
	if err != nil {
		return "", 0, err
	}
	if corruptOutput != nil {
		corruptOutput(s, it, got)
	}
	got = got[:min(len(got), len(want))]
	compared := int64(len(want))
	if bytes.Equal(want, got) {
		return "", compared, nil
	}
	es := rr.o.dtype.Size()
	for i := range want {
		if i >= len(got) || want[i] != got[i] {
			e := i / es
			where := fmt.Sprintf("element %d", e)
			if part := s.locate(e); part != "" {
				where += ", in " + part
			}
			return fmt.Sprintf("rank %d iteration %d: byte offset %d (%s): want %x, got %x", rr.rank, it, i, where,
				want[e*es:min(len(want), (e+1)*es)], got[e*es:min(len(got), (e+1)*es)]), compared, nil
		}
	}
	return "", compared, nil
}

// corruptOutput, set only by tests, changes what a rank read back from its
// output buffer before the check, as a faulty collective would have left
// it: the tests prove with it that --check is not vacuous.
var corruptOutput func(s shape, it int, got []byte)

// lineUps, set only by tests, counts the lineUp calls of every rank: the tests prove
// with it that --sync lines the ranks up before every iteration.
var lineUps *atomic.Int64

// lineUp is an untimed barrier of the team, bounded by --timeout.
// A failure there is named as the tool's own: a --fault's count takes in these
// barriers, and a fault that fires in one (qperr, stall or init at :1, which is the
// first line-up) must not pass for one of the measured collective's.
func (rr *rankRunner) lineUp(ctx context.Context, where string, it int) error {
	if lineUps != nil {
		lineUps.Add(1)
	}
	bctx, cancel := context.WithTimeout(ctx, rr.o.timeout)
	defer cancel()
	err := rr.team.Barrier(bctx)
	if err == nil && !rr.linedUp {
		rr.linedUp, rr.lineUpLinks = true, rr.team.Links()
	}
	if err != nil {
		return fmt.Errorf("ibcoll-perf's untimed line-up barrier %s iteration %d (of %d, warm-up included) failed, not the measured collective: %w",
			where, it+1, rr.o.warmup+rr.o.iters, err)
	}
	return nil
}

// runSize runs warm-up and timed iterations of one collective at one size.
func (rr *rankRunner) runSize(ctx context.Context, oob coll.OOB, c coll.CollType, count int) sizeResult {
	var res sizeResult
	s := newShape(c, rr.rank, rr.size, count, rr.o.root, rr.o.inPlace)
	var req *coll.Request // open while not nil: it may hold registrations of b
	b, err := rr.alloc(s)
	defer func() {
		if req != nil {
			// The request did not close: its registrations may cover b, whose memory
			// is never freed under them. Kept until the process ends.
			return
		}
		if cerr := b.close(); cerr != nil && res.Err == "" {
			res.Err = cerr.Error()
		}
	}()
	err = rr.allReady(ctx, oob, err)
	if err != nil {
		res.Err = err.Error()
		res.Peer = errors.Is(err, errPeerBuffers) || errors.Is(err, coll.ErrPeerFailed)
		return res
	}
	fail := func(err error) sizeResult {
		res.Err = err.Error()
		res.Peer = errors.Is(err, coll.ErrPeerFailed)
		return res
	}
	// Every non-persistent iteration initializes into the same Request, so that the
	// timed loop allocates none (Team.InitInto).
	held := new(coll.Request)
	closeReq := func() error {
		if req == nil {
			return nil
		}
		if err := req.Close(); err != nil {
			return err // req stays open, and b with it
		}
		req = nil
		return nil
	}
	defer func() {
		if err := closeReq(); err != nil && res.Err == "" {
			res.Err = err.Error()
		}
	}()
	total := rr.o.warmup + rr.o.iters
	tracing := trace.IsEnabled()
	var prevCopied, staged int64 // the open request's copies so far; timed iterations' sum
	for it := 0; it < total; it++ {
		if rr.o.check || it == 0 {
			if err := rr.prepare(s, b, it); err != nil {
				return fail(fmt.Errorf("rank %d: writing input: %w", rr.rank, err))
			}
		}
		if rr.o.check || rr.o.sync || it == 0 {
			// Fresh data takes the ranks different times to write (and --sync
			// asks for it): line them up again, so that the timing is the
			// collective's alone.
			if err := rr.lineUp(ctx, "before", it); err != nil {
				return fail(err)
			}
		}
		// No context of its own per iteration: Config.Timeout (--timeout) bounds each
		// post already, and a timer context per iteration allocated about 400 bytes
		// (a garbage collection every 150 ms at 64 KiB, with pauses of up to 3.5 ms in
		// the timed loop), which the collective itself does not.
		if req == nil && rr.o.persistent {
			// Initialized once, untimed: a persistent iteration times post+wait, as
			// the header says, even the first one with -w 0. After the line-up, as
			// a non-persistent Init is: a rank whose Init fails then fails this
			// collective's number on every rank at once, where the others would
			// otherwise wait in the line-up for it.
			if err := rr.team.InitInto(held, rr.args(s, b)); err != nil {
				return fail(err)
			}
			req = held
			res.Alg = req.Alg()
		}
		var region *trace.Region
		if tracing {
			region = trace.StartRegion(context.Background(), "iteration")
		}
		start := time.Now()
		if req == nil {
			if err := rr.team.InitInto(held, rr.args(s, b)); err != nil {
				return fail(err)
			}
			req = held
			res.Alg = req.Alg()
		}
		if err := req.Post(); err != nil {
			// A failed post settles in Wait: it returns once no peer can
			// still write into this rank's buffers, and then Close works.
			_ = req.Wait(ctx)
			return fail(err)
		}
		err := req.Wait(ctx)
		elapsed := time.Since(start)
		if region != nil {
			region.End()
		}
		if err != nil {
			return fail(err)
		}
		sr := req.Staging()
		if it >= rr.o.warmup {
			staged += sr.Copied - prevCopied
		}
		prevCopied = sr.Copied
		if res.Staging == "" {
			res.Staging = stagingDesc(sr)
		}
		if !rr.o.persistent {
			prevCopied = 0
			if err := closeReq(); err != nil {
				return fail(err)
			}
		}
		if it >= rr.o.warmup {
			res.Times = append(res.Times, int64(elapsed))
			res.Staged = staged / int64(len(res.Times))
		}
		if rr.o.check {
			// Let every rank finish the collective before any starts the
			// CPU-heavy check: with more ranks than cores, a rank still
			// completing would otherwise wait for the cores, and its time
			// would include others' checking.
			if err := rr.lineUp(ctx, "after", it); err != nil {
				return fail(err)
			}
			if res.Mismatch != "" {
				// Reported already; the iterations go on only to keep
				// this rank in step with its peers (below).
				continue
			}
			m, n, err := rr.verify(s, b, it)
			res.Compared += n
			if err != nil {
				return fail(fmt.Errorf("rank %d: reading output: %w", rr.rank, err))
			}
			// A mismatch may be this rank's alone: leaving now would
			// leave the others waiting for it in the next lineUp until
			// --timeout, and turn a failed check into a failed
			// collective. So keep the first and finish the size.
			res.Mismatch = m
		}
	}
	if err := closeReq(); err != nil {
		return fail(err)
	}
	return res
}

// sweep runs every collective and size, agreeing on each row through the
// OOB so that all ranks stop together after a failure.
func (rr *rankRunner) sweep(ctx context.Context, oob coll.OOB) int {
	es := int64(rr.o.dtype.Size())
	status := exitOK
	for _, c := range rr.o.colls {
		sizes := rr.o.sizes()
		if c == coll.Barrier {
			sizes = []int64{0}
		}
		if rr.rep != nil {
			rr.rep.begin(c)
		}
		for i, sz := range sizes {
			count := int(sz / es)
			if rr.rep != nil {
				rr.rep.progress(c, sz, i, len(sizes))
			}
			res := rr.runSize(ctx, oob, c, count)
			enc := encodeResult(res)
			// After a failure a peer may be gone for good (killed): wait
			// only briefly for the others' reports, then stop anyway.
			wait := rr.o.timeout + time.Minute
			if res.Err != "" {
				wait = min(wait, 5*time.Second)
			}
			all, err := rr.exchange(ctx, oob, enc, wait, res.Err != "")
			if err != nil {
				if res.Err != "" {
					if rr.rep == nil {
						// Rank 0 may be the rank that is gone: say it here.
						fmt.Fprintf(os.Stderr, "ibcoll-perf: rank %d: %v, %d elements: %s (the results could not be exchanged: %v)\n",
							rr.rank, c, count, res.Err, err)
					}
					all = make([][]byte, rr.size)
					all[rr.rank] = enc
					for r := range all {
						if r != rr.rank {
							all[r] = encodeResult(sizeResult{Err: "no report (" + err.Error() + ")"})
						}
					}
				} else {
					if rr.rep != nil {
						rr.rep.fatal(fmt.Errorf("exchanging results: %w", err))
					}
					return exitCollective
				}
			}
			st := rowStatus(all)
			if rr.rep != nil {
				rr.rep.row(c, count, sz, decodeResults(all))
			}
			if st != exitOK {
				status = max(status, st)
				if st == exitCollective {
					return status
				}
				break // a check failure ends this collective's sweep
			}
		}
		if rr.rep != nil {
			rr.rep.end(c)
		}
	}
	return status
}

// errPeerBuffers: another rank could not allocate its buffers for the row.
var errPeerBuffers = errors.New("could not allocate its buffers")

// allReady tells every rank whether this one has its buffers (failed: why not) and
// returns failed, else an error naming a rank that has not, before any rank starts
// the row. A rank
// that could not allocate would otherwise leave the others in the row's first
// collective until --timeout, and its own report would wait for theirs. It goes
// through the OOB, not the team, so that no collective (and no --fault count)
// changes.
func (rr *rankRunner) allReady(ctx context.Context, oob coll.OOB, failed error) error {
	var mine []byte
	if failed != nil {
		mine = []byte(failed.Error())
	}
	// A peer's process may die meanwhile (it would never answer): exchange gives up
	// as soon as the team learns it, whichever way this rank fared.
	all, err := rr.exchange(ctx, oob, mine, rr.o.timeout+time.Minute, true)
	switch {
	case failed != nil:
		return failed
	case err != nil:
		if dead := rr.team.Dead(); len(dead) > 0 {
			return fmt.Errorf("rank %d: before the row: rank %d's process died: %w", rr.rank, dead[0], coll.ErrPeerFailed)
		}
		return fmt.Errorf("rank %d: learning whether every rank has its buffers: %w", rr.rank, err)
	}
	for r, why := range all {
		if r != rr.rank && len(why) > 0 {
			return fmt.Errorf("rank %d %w: %s", r, errPeerBuffers, why)
		}
	}
	return nil
}

// exchange gathers every rank's result of a row. After a failure it gives up as soon as
// the team learns that a rank's process died (coll.Team.Dead), which would never
// report: the news may come just after this rank's own failure.
func (rr *rankRunner) exchange(ctx context.Context, oob coll.OOB, enc []byte, wait time.Duration, failed bool) ([][]byte, error) {
	octx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if failed {
		dctx, died := context.WithCancelCause(octx)
		defer died(nil)
		octx = dctx
		go func() {
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				if dead := rr.team.Dead(); len(dead) > 0 {
					died(fmt.Errorf("the process of rank(s) %v died", dead))
					return
				}
				select {
				case <-dctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	all, err := oob.Allgather(octx, enc)
	if err != nil {
		if cause := context.Cause(octx); cause != nil && !errors.Is(cause, context.DeadlineExceeded) && !errors.Is(cause, context.Canceled) {
			err = cause
		}
	}
	return all, err
}

func rowStatus(all [][]byte) int {
	st := exitOK
	for _, b := range all {
		switch {
		case len(b) == 0 || b[0] == resultErr:
			return exitCollective
		case b[0] == resultMismatch:
			st = exitCheck
		}
	}
	return st
}

// A rank's result as the ranks exchange it: a status byte, then its JSON. Every rank
// needs the row's status (to stop together), but only the reporting rank needs the
// rows: with the status up front the others decode nothing, where decoding every
// rank's JSON on every rank cost n² decodes per row (at -np 1024 a third of the run's
// CPU, at -np 4096 most of its 77 s).
const (
	resultOK       = '.'
	resultMismatch = 'm'
	resultErr      = 'e'
)

func encodeResult(res sizeResult) []byte {
	status := byte(resultOK)
	switch {
	case res.Err != "":
		status = resultErr
	case res.Mismatch != "":
		status = resultMismatch
	}
	enc, _ := json.Marshal(res)
	return append([]byte{status}, enc...)
}

// decodeResults is the rows of every rank's encodeResult; one that does not decode
// reads as that rank's error.
func decodeResults(all [][]byte) []sizeResult {
	rows := make([]sizeResult, len(all))
	for r, b := range all {
		if len(b) == 0 || json.Unmarshal(b[1:], &rows[r]) != nil {
			rows[r] = sizeResult{Err: fmt.Sprintf("rank %d's report did not decode (%d bytes)", r, len(b))}
		}
	}
	return rows
}
