package coll

import (
	"context"
	"errors"
)

// Run initializes, posts and waits for one collective, and closes it. It returns the
// first error; a post that failed is still waited for, so that the request can close.
func (t *Team) Run(ctx context.Context, a Args) error {
	if ctx == nil {
		return invalid("Run", "nil context.Context")
	}
	r, err := t.Init(a)
	if err != nil {
		return err
	}
	perr := r.Post()
	var werr error
	if perr == nil || !errors.Is(perr, ErrInvalid) && !errors.Is(perr, ErrBusy) {
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
	*r = Request{}
	t.spare = r
}

// Barrier returns when every rank of the team entered it.
func (t *Team) Barrier(ctx context.Context) error { return t.Run(ctx, Args{Type: Barrier}) }

// Bcast copies root's buf into buf on every rank.
func (t *Team) Bcast(ctx context.Context, buf []byte, root int) error {
	return t.Run(ctx, Args{Type: Bcast, Root: root, DType: Uint8, Src: BufferDesc{Slice: buf, Count: len(buf)}})
}

// Gather collects every rank's src into root's dst, in rank order; dst is ignored on
// the other ranks and must hold size × len(src) bytes on the root.
func (t *Team) Gather(ctx context.Context, src, dst []byte, root int) error {
	a := Args{Type: Gather, Root: root, DType: Uint8, Src: BufferDesc{Slice: src, Count: len(src)}}
	if t != nil && t.rank == root {
		a.Dst = BufferDesc{Slice: dst, Count: len(dst)}
	}
	return t.Run(ctx, a)
}

// Scatter sends block i of root's src to rank i's dst; src is ignored on the other
// ranks and must hold size × len(dst) bytes on the root.
func (t *Team) Scatter(ctx context.Context, src, dst []byte, root int) error {
	a := Args{Type: Scatter, Root: root, DType: Uint8, Dst: BufferDesc{Slice: dst, Count: len(dst)}}
	if t != nil && t.rank == root {
		a.Src = BufferDesc{Slice: src, Count: len(src)}
	}
	return t.Run(ctx, a)
}

// Allgather collects every rank's src into every rank's dst, in rank order.
func (t *Team) Allgather(ctx context.Context, src, dst []byte) error {
	return t.Run(ctx, Args{Type: Allgather, DType: Uint8, Src: BufferDesc{Slice: src, Count: len(src)},
		Dst: BufferDesc{Slice: dst, Count: len(dst)}})
}

// Alltoall sends block i of every rank's src to rank i, into block (sender) of its dst.
func (t *Team) Alltoall(ctx context.Context, src, dst []byte) error {
	return t.Run(ctx, Args{Type: Alltoall, DType: Uint8, Src: BufferDesc{Slice: src, Count: len(src)},
		Dst: BufferDesc{Slice: dst, Count: len(dst)}})
}

// Reduce combines every rank's src (elements of dt) with op into root's dst.
func (t *Team) Reduce(ctx context.Context, src, dst []byte, dt DType, op Op, root int) error {
	a := Args{Type: Reduce, Root: root, DType: dt, Op: op, Src: BufferDesc{Slice: src, Count: len(src) / max(dt.Size(), 1)}}
	if t != nil && t.rank == root {
		a.Dst = BufferDesc{Slice: dst, Count: len(dst) / max(dt.Size(), 1)}
	}
	return t.Run(ctx, a)
}

// Allreduce combines every rank's src (elements of dt) with op into every rank's dst.
func (t *Team) Allreduce(ctx context.Context, src, dst []byte, dt DType, op Op) error {
	sz := max(dt.Size(), 1)
	return t.Run(ctx, Args{Type: Allreduce, DType: dt, Op: op, Src: BufferDesc{Slice: src, Count: len(src) / sz},
		Dst: BufferDesc{Slice: dst, Count: len(dst) / sz}})
}
