package tlmlx5

import "fmt"

// Waiting for the source: when staging copies a large source in beside the wire
// (driver.TaskSpec.Ready), an operation that reads a range of the source not yet in
// place waits on its task's waitSrc list instead of starting, and the team retries
// the waiting tasks at every Poll. coll keeps polling while a copy-in runs, since its
// end is no completion the transport could wait for.

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
			k.fail(fmt.Errorf("tlmlx5: %v #%d: staging its source: %w", k.spec.Type, k.seq, err))
			return false
		}
		if !ok {
			o.state = opWaitSrc
			k.waitSrc = append(k.waitSrc, o.idx)
			k.t.srcWait[k] = struct{}{}
			return false
		}
	}
	return true
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
