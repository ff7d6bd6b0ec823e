package coll

import (
	"context"
	"errors"
	"fmt"
)

// Run initializes, posts and waits for one collective, and closes it. It returns the
// first error; a post that failed is still waited for, so that the request can close,
// and a post refused (the team broke after Init) returns the refusal, which names the
// break.
// A nil ctx is refused as Init refuses bad arguments: the collective fails on every
// rank. A request that fails to close (its transport could not release what it
// holds) is returned as that error and stays with the team, which no caller can
// close again: Team.Close then fails with ErrBusy rather than free memory a NIC may
// still write.
func (t *Team) Run(ctx context.Context, a Args) error {
	if ctx == nil {
		return t.refuse(a, invalid("Run", "nil context.Context"))
	}
	r, err := t.Init(a)
	if err != nil {
		return err
	}
	perr := r.Post()
	var werr error
	if perr == nil || r.startedPost() {
		werr = r.Wait(ctx)
	}
	cerr := r.Close()
	if cerr == nil {
		t.recycle(r)
	}
	switch {
	case werr != nil:
		return werr
	case perr != nil:
		return perr
	}
	return cerr
}

// startedPost reports whether r's Post started a post (which its Wait ends, failed or
// not), rather than refusing it (a closed request, a broken team).
func (r *Request) startedPost() bool {
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	return r.state != sInit
}

// recycle keeps r, a request of Run that closed cleanly, for the next Init: it never
// reached Run's caller, so nothing refers to it any more (Close took it out of the
// team's table), and a loop of Run calls allocates no request
// (BenchmarkRepeatedInitAllocs).
func (t *Team) recycle(r *Request) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !r.closed || r.stage != nil || r.task != nil || t.spare != nil {
		return
	}
	reuseRequest(r)
	t.spare = r
}

// Barrier returns when every rank of the team entered it.
func (t *Team) Barrier(ctx context.Context) error { return t.Run(ctx, Args{Type: Barrier}) }

// Bcast copies root's buf into buf on every rank.
func (t *Team) Bcast(ctx context.Context, buf []byte, root int) error {
	return t.Run(ctx, Args{Type: Bcast, Root: root, DType: Uint8, Src: BufferDesc{Slice: buf, Count: len(buf)}})
}

// Gather collects every rank's src into root's dst, in rank order; dst is ignored on
// the other ranks and must be exactly size × len(src) bytes on the root (its length is
// the count; Run with an explicit Count takes a longer slice).
func (t *Team) Gather(ctx context.Context, src, dst []byte, root int) error {
	a := Args{Type: Gather, Root: root, DType: Uint8, Src: BufferDesc{Slice: src, Count: len(src)}}
	if t != nil && t.rank == root {
		a.Dst = BufferDesc{Slice: dst, Count: len(dst)}
	}
	return t.Run(ctx, a)
}

// Scatter sends block i of root's src to rank i's dst; src is ignored on the other
// ranks and must be exactly size × len(dst) bytes on the root (its length is the count).
func (t *Team) Scatter(ctx context.Context, src, dst []byte, root int) error {
	a := Args{Type: Scatter, Root: root, DType: Uint8, Dst: BufferDesc{Slice: dst, Count: len(dst)}}
	if t != nil && t.rank == root {
		a.Src = BufferDesc{Slice: src, Count: len(src)}
	}
	return t.Run(ctx, a)
}

// Allgather collects every rank's src into every rank's dst, in rank order; dst must be
// exactly size × len(src) bytes.
func (t *Team) Allgather(ctx context.Context, src, dst []byte) error {
	return t.Run(ctx, Args{Type: Allgather, DType: Uint8, Src: BufferDesc{Slice: src, Count: len(src)},
		Dst: BufferDesc{Slice: dst, Count: len(dst)}})
}

// Alltoall sends block i of every rank's src to rank i, into block (sender) of its dst;
// src and dst are size blocks each, of one length.
func (t *Team) Alltoall(ctx context.Context, src, dst []byte) error {
	return t.Run(ctx, Args{Type: Alltoall, DType: Uint8, Src: BufferDesc{Slice: src, Count: len(src)},
		Dst: BufferDesc{Slice: dst, Count: len(dst)}})
}

// Reduce combines every rank's src (elements of dt) with op into root's dst. src, and
// dst on the root, must hold whole elements: other lengths are refused (ErrInvalid),
// and the refusal fails the collective on the other ranks too.
func (t *Team) Reduce(ctx context.Context, src, dst []byte, dt DType, op Op, root int) error {
	root0 := t != nil && t.rank == root
	a := Args{Type: Reduce, Root: root, DType: dt, Op: op, Src: BufferDesc{Slice: src, Count: len(src) / max(dt.Size(), 1)}}
	if root0 {
		a.Dst = BufferDesc{Slice: dst, Count: len(dst) / max(dt.Size(), 1)}
	}
	if err := wholeElems("Reduce", src, dst, root0, dt); err != nil {
		return t.refuse(a, err)
	}
	return t.Run(ctx, a)
}

// Allreduce combines every rank's src (elements of dt) with op into every rank's dst.
// Both must hold whole elements, as in Reduce.
func (t *Team) Allreduce(ctx context.Context, src, dst []byte, dt DType, op Op) error {
	sz := max(dt.Size(), 1)
	a := Args{Type: Allreduce, DType: dt, Op: op, Src: BufferDesc{Slice: src, Count: len(src) / sz},
		Dst: BufferDesc{Slice: dst, Count: len(dst) / sz}}
	if err := wholeElems("Allreduce", src, dst, true, dt); err != nil {
		return t.refuse(a, err)
	}
	return t.Run(ctx, a)
}

// wholeElems refuses byte slices that do not hold whole elements of dt: the counts
// the wrappers derive from their lengths would leave the rest untouched (a 7-byte
// float32 vector reduced as one element). An unknown dt is left to Init, which names
// it.
func wholeElems(op string, src, dst []byte, useDst bool, dt DType) error {
	sz := dt.Size()
	if sz <= 0 {
		return nil
	}
	if len(src)%sz != 0 {
		return invalid(op, "src holds %d bytes, not a whole number of %v elements (%d bytes each)", len(src), dt, sz)
	}
	if useDst && len(dst)%sz != 0 {
		return invalid(op, "dst holds %d bytes, not a whole number of %v elements (%d bytes each)", len(dst), dt, sz)
	}
	return nil
}

// refuse fails collective a on this rank as Init fails one whose arguments it
// refuses: the collective takes its number and every rank hears that it failed here,
// so that a wrapper's refusal of its own arguments leaves no peer waiting for this
// rank and the team's numbering in step.
func (t *Team) refuse(a Args, err error) error {
	if t.usable("Run") != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.settle()
	switch {
	case t.closed:
	case t.broken != nil:
		t.refuseInit(a, err)
		return errors.Join(err, fmt.Errorf("coll: Init: %w", t.broken))
	default:
		t.initRefused(a, err)
	}
	return err
}
