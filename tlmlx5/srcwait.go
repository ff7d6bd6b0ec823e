package tlmlx5

import "fmt"

// Waiting for the source: when staging copies a large source in beside the wire
// (driver.TaskSpec.Ready), an operation that reads a range of the source not yet in
// place waits on its task's waitSrc list, and the team retries the waiting tasks at
// every Poll. A send first queues the work requests whose bytes are in place (so it
// may wait with some on the wire), and a local copy in pieces copies the pieces whose
// bytes are; other operations wait for all they read before starting. coll keeps
// polling while a copy-in runs, since its end is no completion the transport could
// wait for.

// reads are the source ranges an operation reads.
func (o *op) reads() []seg {
	switch o.kind {
	case opSend:
		return o.segs
	case opCopy:
		return []seg{o.a}
	case opReduce:
		return o.ins
	}
	return nil
}

// srcReady reports whether what o reads from the task's source is in place; if not,
// o waits. A failed copy-in fails the task.
func (k *task) srcReady(o *op) bool {
	if k.ready == nil {
		return true
	}
	for _, s := range o.reads() {
		if s.b != k.src || s.n == 0 {
			continue
		}
		ok, err := k.ready(s.off, s.n)
		if err != nil {
			k.srcFailed(err)
			return false
		}
		if !ok {
			k.waitForSrc(o)
			return false
		}
	}
	return true
}

// srcFailed fails the task with the copy-in's error, which Ready returned.
func (k *task) srcFailed(err error) {
	k.fail(fmt.Errorf("tlmlx5: %v #%d: staging its source: %w", k.spec.Type, k.seq, err))
}

// waitForSrc parks o until more of the source is in place (retrySrc).
func (k *task) waitForSrc(o *op) {
	o.state = opWaitSrc
	k.waitSrc = append(k.waitSrc, o.idx)
	k.t.srcWait[k] = struct{}{}
}

// readyWRs returns j such that send o's work requests [o.early, j) read only source
// bytes in place, so that they may go on the wire while the copy-in brings the rest:
// a large block copied in chunks leaves piece by piece (a send of at least two landing
// pieces is split at each, so the receiver learns of each as it lands). ok is false
// when the copy-in failed, which fails the task.
func (k *task) readyWRs(o *op) (j int, ok bool) {
	for j = o.early; j < len(o.wrs); j++ {
		hi := o.n
		if j+1 < len(o.wrs) {
			hi = int(o.offs[j+1])
		}
		in, err := k.dataReady(o, int(o.offs[j]), hi)
		if err != nil {
			k.srcFailed(err)
			return j, false
		}
		if !in {
			break
		}
	}
	return j, true
}

// dataReady reports whether bytes [lo, hi) of send o's data are in place where they
// come from the task's source.
func (k *task) dataReady(o *op, lo, hi int) (bool, error) {
	at := 0
	for _, s := range o.segs {
		a, b := max(lo, at), min(hi, at+s.n)
		if a < b && s.b == k.src {
			if in, err := k.ready(s.off+a-at, b-a); !in || err != nil {
				return false, err
			}
		}
		if at += s.n; at >= hi {
			break
		}
	}
	return true, nil
}

// retrySrc starts the operations whose source may have arrived, and those they
// release. It reports whether some still wait.
func (k *task) retrySrc() bool {
	if k.aborted || k.err != nil {
		k.waitSrc = k.waitSrc[:0]
		return false
	}
	w := append(k.srcSpare[:0], k.waitSrc...)
	k.waitSrc = k.waitSrc[:0]
	for _, i := range w {
		o := &k.ops[i]
		if o.state != opWaitSrc && o.state != opCopying {
			continue
		}
		if o.kind == opSend {
			k.issue(o)
		} else {
			k.start(o)
		}
	}
	k.srcSpare = w
	k.run()
	return len(k.waitSrc) > 0
}

// retrySources gives every task waiting for its source another try, and continues
// the local copies in pieces (pieces.go).
func (t *team) retrySources() {
	for k := range t.srcWait {
		if !k.retrySrc() {
			delete(t.srcWait, k)
		}
	}
	t.notePieces()
}
