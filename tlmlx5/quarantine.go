package tlmlx5

import (
	"errors"
	"slices"

	"github.com/ibcoll/ibcoll/mem"
)

// Quarantine: scratch of a closed task that a peer may still write into.
//
// A receive that arms ahead (ahead.go) hands its peer the ready-to-receive of the next
// post before that post starts. When a post fails, the peer may have finished its own
// part of it and gone idle holding that RTR; in the default mode it may even post the
// next post, and write, before the news reaches it. Waiting for its acknowledgement
// (as for any exposed buffer) would cut such an idle peer off past AbortGrace and
// break the team, over a buffer that nothing reads again: the failed request is never
// posted again, so a write into it can only be late. So Writers leaves these
// exposures out, and Close keeps each such buffer allocated and registered here
// instead of freeing it, until the write it awaits lands (onData routes a closed
// task's data here) or the team closes, after its queue pairs, when nothing can
// write any more. A freed buffer would turn the late write into a remote access error
// that breaks the link.
//
// Bound: one buffer (under two landing pieces, 512 KiB) per such receive of a failed
// persistent request whose peer never posts again; it lives until the team closes.

// quarantined is one kept buffer and the writes it still awaits.
type quarantined struct {
	seq    uint16 // seqKey of the closed task
	own    *mem.Buffer
	reg    *regEntry
	writes []aheadWrite
}

// aheadWrite is a write a peer may still make: its data for post (low postBits bits)
// and tag.
type aheadWrite struct {
	peer, tag int
	post      uint32
}

// quarantineAhead moves the buffers that the failed task's receives exposed ahead, and
// whose data has not landed, from the task to the team's quarantine, so that release
// leaves them alone. Called by Close after dropAhead (an RTR that never left exposes
// nothing).
func (k *task) quarantineAhead() {
	t := k.t
	first := len(t.quarantine)
	for i := range k.ops {
		o := &k.ops[i]
		if !o.armsAhead || !k.exposedAhead(o) {
			continue
		}
		b := o.out.b
		if o.ahead%2 != b.side {
			b = b.alt
		}
		w := aheadWrite{peer: o.peer, tag: o.tag, post: o.ahead % (1 << postBits)}
		if b.own == nil { // a buffer another receive already moved
			for _, q := range t.quarantine[first:] {
				if q.own != nil && uintptr(q.own.Addr()) == b.addr {
					q.writes = append(q.writes, w)
				}
			}
			continue
		}
		t.quarantine = append(t.quarantine, &quarantined{seq: seqKey(k.seq), own: b.own, reg: b.reg, writes: []aheadWrite{w}})
		b.own, b.reg = nil, nil
		t.quarantined++
	}
}

// quarantineLanded takes the data of a closed task: a write a quarantined buffer
// awaited frees it once it awaits no other.
func (t *team) quarantineLanded(from int, seq uint16, post uint32, tag int) {
	for i, q := range t.quarantine {
		if q.seq != seq {
			continue
		}
		j := slices.Index(q.writes, aheadWrite{peer: from, tag: tag, post: post})
		if j < 0 {
			continue
		}
		q.writes = slices.Delete(q.writes, j, j+1)
		if len(q.writes) == 0 && t.unquarantine(q) == nil {
			t.quarantine = slices.Delete(t.quarantine, i, i+1)
		}
		return
	}
}

// unquarantine deregisters and frees q's buffer; a failed step is kept for a retry.
func (t *team) unquarantine(q *quarantined) error {
	if q.reg != nil {
		if err := t.cache.release(q.reg); err != nil {
			return err
		}
		q.reg = nil
	}
	if q.own != nil {
		if err := q.own.Close(); err != nil {
			return err
		}
		q.own = nil
	}
	return nil
}

// dropQuarantine frees every quarantined buffer: the team closes, and its queue pairs
// are gone, so nothing writes into them any more.
func (t *team) dropQuarantine() error {
	var errs []error
	for _, q := range t.quarantine {
		if err := t.unquarantine(q); err != nil {
			errs = append(errs, err)
		}
	}
	t.quarantine = nil
	return errors.Join(errs...)
}
