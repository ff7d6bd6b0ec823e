package tlmlx5

import "github.com/ibcoll/ibcoll/coll/driver"

// Local copies in pieces: a root whose destination is staged (a gather root whose dst
// is CUDA memory, copied out as blocks land) copies its own block into the scratch on
// the thread that polls. Done in one go, a 1 MiB copy kept that thread from polling
// for its whole length, so the blocks its children wrote meanwhile were reported
// landed only after it, and their copy-outs started late: traced on the H200 (8 ranks,
// gather host,cuda, 1 MiB), the root's own copy was reported at 80-110 µs after the
// post and every child's pieces in the 40 µs after it. Such a copy now moves one
// piece per step, and the team's Poll continues it after it has polled the CQs, so
// that what landed meanwhile is reported between pieces.

// copyPiece is the step of a local copy in pieces: a landing piece's size. A
// variable for tests.
var copyPiece = 256 << 10

// pollPieces bounds the pieces one Poll moves while its CQs give nothing.
var pollPieces = 1

// inPieces reports whether local copy o goes in pieces: a copy into an output that
// reports landed ranges, between CPU memory, of at least two pieces. A copy that does
// not runs in one go (copySeg).
func (k *task) inPieces(o *op) bool {
	return k.landed != nil && o.out.b == k.out && o.out.n >= 2*copyPiece && o.out.b.dm == nil && o.a.b.dm == nil &&
		cpu(o.out.b.typ) && cpu(o.a.b.typ)
}

// copyInPieces copies the next piece of o (inPieces): it reports the piece landed, and
// parks o on the task's waitSrc list until the team's next Poll, or ends it with the
// last piece. A piece of a source still being copied in (srcwait.go) waits for its
// own bytes only, so a root's own block follows its copy-in chunk by chunk.
func (k *task) copyInPieces(o *op) {
	n := min(copyPiece, o.out.n-o.landed)
	if o.a.b == k.src && k.ready != nil {
		in, err := k.ready(o.a.off+o.landed, n)
		if err != nil {
			k.srcFailed(err)
			return
		}
		if !in {
			if o.landed > 0 {
				k.copyWaited++
			}
			k.waitForSrc(o)
			return
		}
	}
	if err := k.copySeg(o.out.sub(o.landed, o.landed+n), o.a.sub(o.landed, o.landed+n)); err != nil {
		// copySeg between CPU memory does not fail; the check keeps it honest.
		k.fail(err)
		return
	}
	k.landed(o.out.off+o.landed, n)
	o.landed += n
	k.copyPieces++
	if o.landed < o.out.n {
		o.state = opCopying
		k.waitSrc = append(k.waitSrc, o.idx)
		k.t.srcWait[k] = struct{}{}
		return
	}
	k.opDoneLocal(o)
}

// notePieces records, for WaitEvent (which runs without the caller's lock), whether
// some task has a local copy in pieces to continue: the waiter must then poll again
// at once instead of sleeping on a CQ that may have nothing more to say.
func (t *team) notePieces() {
	pending := false
	for k := range t.srcWait {
		if k.aborted || k.err != nil {
			continue
		}
		for _, i := range k.waitSrc {
			if k.ops[i].state == opCopying {
				pending = true
				break
			}
		}
		if pending {
			break
		}
	}
	t.piecesPending.Store(pending)
}

// LocalWork reports whether a local copy in pieces goes on at the next Poll
// (driver.LocalWorker).
func (t *team) LocalWork() bool { return t.piecesPending.Load() }

var _ driver.LocalWorker = (*team)(nil)
