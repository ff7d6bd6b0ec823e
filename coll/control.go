package coll

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ibcoll/ibcoll/internal/topo"
)

// The control messages of coll's protocols (abort flooding with acknowledgements, the
// completion agreement, team-wide breakage and departure), carried by the transport's
// SendCtl. They come from peers, so decoding trusts nothing: a message that does not
// decode is dropped.

type ctlKind uint8

const (
	// ctlAbort: collective seq, post failed on rank origin (cause says why); with
	// flagAck it acknowledges an abort: nothing more of that post will come from the
	// sender; with flagLate it is a no-vote of a rank that had reported done.
	ctlAbort ctlKind = iota + 1
	// ctlDone: the sender's subtree finished post of seq (agreement, up the tree); sig
	// is the sender's signature of the collective, to catch ranks that initialized
	// different ones.
	ctlDone
	// ctlFin: every rank finished post of seq (agreement, down the tree).
	ctlFin
	// ctlBroken: origin's team broke; so does the receiver's.
	ctlBroken
	// ctlLeft: origin closed its team; seq is the first collective it never takes part
	// in.
	ctlLeft
	// ctlSig: origin initialized collective seq with signature sig; the cause holds
	// its root and description (sigPayload). A rank whose first post still runs
	// after sigDelay sends it to the children of the agreement tree it waits for,
	// which compare (Request.sendSig): a disagreement anywhere shows on some edge,
	// whatever the data does (a root mismatch can leave every rank waiting for data
	// that never comes).
	ctlSig
	// ctlSigUp: origin, a child in the overlay tree, initialized collective seq with
	// signature sig (the cause: sigPayload); default mode only (sigCheck).
	ctlSigUp
	// ctlSigOK: origin, the parent in the overlay tree, initialized collective seq
	// with signature sig (the cause: sigPayload); default mode only (sigCheck).
	ctlSigOK
	numCtlKinds
)

type ctlFlags uint8

const (
	flagBroken ctlFlags = 1 << iota // the failure broke the failing rank's team
	flagAck                         // an acknowledgement, never answered
	// flagLate: a no-vote, sent up the agreement tree by a rank that had already
	// reported the post done and failed since (its deadline passed). It fails the
	// post only where the rank receiving it has not voted yet; the root decides.
	flagLate
	// flagMismatch: the failure is a disagreement between the ranks' arguments; the
	// receivers' errors wrap ErrMismatch.
	flagMismatch
	knownFlags = flagBroken | flagAck | flagLate | flagMismatch
)

// ctlMsg is one control message. The wire form is kind, flags, two zero bytes, then
// little-endian seq (8), post (4), origin (4), sig (4), then the cause's bytes; a
// done carries the sender's root (4 bytes, noRoot for an unrooted collective) there
// instead, read without allocating, since every post sends one.
type ctlMsg struct {
	kind   ctlKind
	flags  ctlFlags
	seq    uint64
	post   uint32
	origin uint32
	sig    uint32
	root   int // ctlDone only
	cause  string
}

const ctlHeader = 24

var errBadCtl = errors.New("malformed control message")

// encode writes m into buf (which must hold ctlHeader bytes) and returns the message,
// its cause cut to what fits, marked "...".
func (m *ctlMsg) encode(buf []byte) []byte {
	buf[0], buf[1], buf[2], buf[3] = byte(m.kind), byte(m.flags), 0, 0
	binary.LittleEndian.PutUint64(buf[4:], m.seq)
	binary.LittleEndian.PutUint32(buf[12:], m.post)
	binary.LittleEndian.PutUint32(buf[16:], m.origin)
	binary.LittleEndian.PutUint32(buf[20:], m.sig)
	if m.kind == ctlDone {
		binary.LittleEndian.PutUint32(buf[ctlHeader:], uint32(m.root))
		return buf[:ctlHeader+4]
	}
	room := len(buf) - ctlHeader
	if len(m.cause) <= room {
		return buf[:ctlHeader+copy(buf[ctlHeader:], m.cause)]
	}
	n := copy(buf[ctlHeader:], m.cause[:max(room-3, 0)])
	n += copy(buf[ctlHeader+n:], "...")
	return buf[:ctlHeader+n]
}

// decodeCtl reads a message from a peer of a team of size ranks.
// A cause equal to known is known itself, not a new string: the signature text of the
// collective this rank made last, which a peer's signature message usually carries.
func decodeCtl(b []byte, size int, known string) (ctlMsg, error) {
	if len(b) < ctlHeader {
		return ctlMsg{}, fmt.Errorf("%w: %d bytes", errBadCtl, len(b))
	}
	m := ctlMsg{kind: ctlKind(b[0]), flags: ctlFlags(b[1]),
		seq:    binary.LittleEndian.Uint64(b[4:]),
		post:   binary.LittleEndian.Uint32(b[12:]),
		origin: binary.LittleEndian.Uint32(b[16:]),
		sig:    binary.LittleEndian.Uint32(b[20:])}
	switch {
	case m.kind == 0 || m.kind >= numCtlKinds:
		return ctlMsg{}, fmt.Errorf("%w: kind %d", errBadCtl, m.kind)
	case m.flags&^knownFlags != 0 || b[2] != 0 || b[3] != 0:
		return ctlMsg{}, fmt.Errorf("%w: flags %#x", errBadCtl, m.flags)
	case uint64(m.origin) >= uint64(size):
		return ctlMsg{}, fmt.Errorf("%w: origin %d of %d ranks", errBadCtl, m.origin, size)
	}
	if m.kind == ctlDone {
		m.root = noRoot
		switch len(b) {
		case ctlHeader:
		case ctlHeader + 4:
			m.root = int(int32(binary.LittleEndian.Uint32(b[ctlHeader:])))
			if m.root != noRoot && (m.root < 0 || m.root >= size) {
				return ctlMsg{}, fmt.Errorf("%w: done with root %d of %d ranks", errBadCtl, m.root, size)
			}
		default:
			return ctlMsg{}, fmt.Errorf("%w: done of %d bytes", errBadCtl, len(b))
		}
		return m, nil
	}
	if c := b[ctlHeader:]; len(c) > 0 {
		if string(c) == known {
			m.cause = known
		} else {
			m.cause = string(c)
		}
	}
	return m, nil
}

// sigPayload is a ctlSig's cause: the sender's root (little-endian, noRoot for an
// unrooted collective), then its description of the collective.
func sigPayload(root int, desc string) string {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], uint32(root))
	return string(b[:]) + desc
}

const noRoot = -1

// decodeSigPayload reads a ctlSig's cause, which a peer wrote: a root outside the team
// is refused.
func decodeSigPayload(cause string, size int) (root int, desc string, err error) {
	if len(cause) < 4 {
		return 0, "", fmt.Errorf("%w: signature payload of %d bytes", errBadCtl, len(cause))
	}
	root = int(int32(binary.LittleEndian.Uint32([]byte(cause[:4]))))
	if root != noRoot && (root < 0 || root >= size) {
		return 0, "", fmt.Errorf("%w: root %d of %d ranks", errBadCtl, root, size)
	}
	return root, cause[4:], nil
}

// send encodes m and queues it for peer. A peer that is down no longer listens: the
// transport's error is not this rank's failure.
func (t *Team) send(peer int, m ctlMsg) {
	if m.kind < numCtlKinds {
		t.sentKinds[m.kind].Add(1)
	}
	_ = t.tl.SendCtl(peer, m.encode(t.msg))
}

// overlay is this rank's place in the sparse graph of coll's team-wide news: the
// k-nomial tree of radix overlayRadix over the team, rooted at rank 0. Every rank
// builds the same tree whatever the collective, so it serves to check that the
// ranks initialized a collective alike (sigCheck) and to flood aborts.
type overlay struct {
	parent   int    // -1 at rank 0
	children []int  // nearest first; at most 63 (sigCheck's mask)
	leaf     []bool // leaf[i]: children[i] has no children of its own
}

// overlay returns this rank's place in the overlay tree, made at first use.
func (t *Team) overlay() *overlay {
	if t.ovl == nil {
		p, c := topo.KNomialPeers(t.size, 0, t.rank, overlayRadix)
		leaf := make([]bool, len(c))
		for i, ch := range c {
			_, cc := topo.KNomialPeers(t.size, 0, ch, overlayRadix)
			leaf[i] = len(cc) == 0
		}
		t.ovl = &overlay{parent: p, children: c, leaf: leaf}
	}
	return t.ovl
}

// floodReaches reports whether a flood of collective seq from this rank goes to peer;
// all: it was a mismatch's, which goes to every rank.
func (t *Team) floodReaches(peer int, seq uint64, all bool) bool {
	if !t.listens(peer, seq) {
		return false
	}
	if all || t.overlay().neighbour(peer) {
		return true
	}
	if r := t.reqs[seq]; r != nil {
		for _, p := range r.taskPeers() {
			if p == peer {
				return true
			}
		}
	}
	return false
}

// tellUnreached sends m to those of peers that the flood of m.seq's news from here
// does not reach (floodReaches): the agreement's children of a collective that fails
// here wait for a decision that passes only through this rank, and they need not be
// its overlay neighbours or its task's peers.
func (t *Team) tellUnreached(peers []int, m ctlMsg) {
	for _, p := range peers {
		if t.listens(p, m.seq) && !t.floodReaches(p, m.seq, false) {
			t.send(p, m)
		}
	}
}

func (o *overlay) neighbour(peer int) bool {
	if peer == o.parent {
		return true
	}
	for _, c := range o.children {
		if c == peer {
			return true
		}
	}
	return false
}

// listens reports whether peer can still hear about collective seq: it has not closed
// its team and its link is up.
func (t *Team) listens(peer int, seq uint64) bool {
	if _, closed := t.left[peer]; closed || peer < 0 || peer == t.rank {
		return false
	}
	return !t.gone(peer, seq)
}

// handler routes the transport's control messages to the team; it keeps the routing
// out of the Team's method set.
type handler struct{ t *Team }

// Control handles a control message of coll; the transport calls it from Poll, under
// the team lock.
func (h handler) Control(peer int, b []byte) {
	t := h.t
	if peer < 0 || peer >= t.size {
		return
	}
	m, err := decodeCtl(b, t.size, t.lastSig.cause)
	if err != nil {
		return
	}
	t.route(peer, m, b)
}

// route acts on a decoded message; raw is its wire form, kept for a collective this
// rank has not initialized yet.
func (t *Team) route(peer int, m ctlMsg, raw []byte) {
	if m.kind == ctlAbort && m.flags&flagMismatch != 0 {
		t.sigForget() // nothing is assumed until every edge declared again
	}
	switch m.kind {
	case ctlBroken:
		t.setBroken(&PeerError{Rank: int(m.origin), Cause: m.cause, Broken: true})
		return
	case ctlLeft:
		// A rank says only of itself that it closed (it is never relayed), and the
		// news silences this rank towards it: one that names another rank is
		// malformed, and believing it would leave that rank waiting for its deadline.
		if int(m.origin) == peer {
			t.peerLeft(peer, m.seq, true, m.cause)
		}
		return
	}
	if (m.kind == ctlSig || m.kind == ctlSigUp || m.kind == ctlSigOK) && int(m.origin) != peer {
		return // a signature is never relayed: one from elsewhere is malformed
	}
	if r := t.reqs[m.seq]; r != nil {
		r.onCtl(peer, m)
		return
	}
	if m.seq >= t.nextSeq.Load() {
		if m.post > 1 {
			return // no peer gets past post 1 of a collective this rank never posted
		}
		t.stash(peer, m, raw)
		return
	}
	if m.kind == ctlSigUp || m.kind == ctlSigOK {
		t.sigLate(peer, m) // a collective this rank finished
		return
	}
	if m.kind == ctlAbort && m.flags&flagLate == 0 {
		t.answered(peer, m.seq, m.post) // what the transport kept for peer's writes of seq
	}
	if m.kind == ctlAbort && m.flags&(flagAck|flagLate) == 0 {
		// A collective this rank finished or never had: say that nothing more will
		// come from here, so that the sender need not wait for it, and pass the
		// news on once: the ranks below this one in the overlay may still run it.
		if t.remember(m.seq, m.post) {
			t.flood(m.seq, m.post, int(m.origin), m.cause, m.flags)
			if t.floodReaches(peer, m.seq, m.flags&flagMismatch != 0) {
				return // the relay answers the sender too
			}
		}
		t.ack(peer, m)
	}
}

// remember notes that this rank told its peers that post of collective seq, which it
// no longer holds, failed; it reports whether that is news (no earlier post of seq
// was told).
func (t *Team) remember(seq uint64, post uint32) bool {
	if t.relayed == nil || len(t.relayed) > maxRelayed {
		t.relayed = map[uint64]uint32{}
	}
	if old, ok := t.relayed[seq]; ok && old <= post {
		return false
	}
	t.relayed[seq] = post
	return true
}

// ack acknowledges the abort m from peer.
func (t *Team) ack(peer int, m ctlMsg) {
	t.send(peer, ctlMsg{kind: ctlAbort, flags: flagAck, seq: m.seq, post: m.post, origin: m.origin, cause: m.cause})
}

// stash keeps a message of a collective this rank has not initialized yet; an abort is
// flooded at once, as the request would, and answered: the sender may have exposed a
// buffer to this rank (a ring allgather's ready-to-receive), and it waits for this
// rank's word before it returns, cutting off past AbortGrace a rank that says nothing.
// The answer is true already: the kept abort fails this rank's first post of the
// collective at once, before it writes anything (Init replays it; an Init that fails
// posts nothing). The flood answers the peers it reaches; the others get an
// acknowledgement. Without it, a rank whose program computed before it initialized
// the collective, for longer than the grace, was cut off unless the sender was its
// overlay neighbour (the hour soak's late ranks).
func (t *Team) stash(peer int, m ctlMsg, raw []byte) {
	ps := t.pending[m.seq]
	if ps == nil {
		ps = t.newPending()
		t.pending[m.seq] = ps
	}
	ps.keep(peer, raw)
	if m.kind != ctlAbort || m.flags&(flagAck|flagLate) != 0 {
		return
	}
	if m.post > ps.flooded {
		ps.flooded, ps.floodedAll = m.post, m.flags&flagMismatch != 0
		t.flood(m.seq, m.post, int(m.origin), m.cause, m.flags&(flagBroken|flagMismatch))
	}
	// What went out decides, not what this message says: a mismatch's abort that
	// comes after a plain one's flood is not flooded again, and it waits for every
	// rank (found in review).
	if t.listens(peer, m.seq) && !t.floodReaches(peer, m.seq, ps.floodedAll) {
		t.ack(peer, m)
	}
}

// flood tells this rank's neighbours in the overlay tree and the peers of its task for
// collective seq (if it has one) that (seq, post) failed on origin; flags may carry
// flagBroken and flagMismatch. Each rank floods a post's news once (abortState.tell),
// so the news crosses every edge of the tree and of every task's graph at most
// twice. A mismatch's news goes to every rank: the ranks' graphs differ, so a rank's
// task peers need not be those that wait for it (see abortState).
func (t *Team) flood(seq uint64, post uint32, origin int, cause string, flags ctlFlags) {
	flags &= flagBroken | flagMismatch
	m := ctlMsg{kind: ctlAbort, flags: flags, seq: seq, post: post, origin: uint32(origin), cause: cause}
	b := m.encode(t.msg)
	if flags&flagMismatch != 0 {
		t.sendEvery(seq, b)
		return
	}
	ov := t.overlay()
	send := func(p int) {
		if t.listens(p, seq) {
			_ = t.tl.SendCtl(p, b)
		}
	}
	send(ov.parent)
	for _, c := range ov.children {
		send(c)
	}
	if r := t.reqs[seq]; r != nil {
		for _, p := range r.taskPeers() {
			if !ov.neighbour(p) {
				send(p)
			}
		}
	}
}

// floodEvery tells every rank that (seq, post) failed on origin: for a rank that has
// no task for seq (its Init failed), whose peers are unknown.
func (t *Team) floodEvery(seq uint64, post uint32, origin int, cause string, flags ctlFlags) {
	flags &= flagBroken | flagMismatch
	m := ctlMsg{kind: ctlAbort, flags: flags, seq: seq, post: post, origin: uint32(origin), cause: cause}
	t.sendEvery(seq, m.encode(t.msg))
}

// sendEvery sends the encoded message b to every rank that can still hear about seq.
func (t *Team) sendEvery(seq uint64, b []byte) {
	for p := 0; p < t.size; p++ {
		if t.listens(p, seq) {
			_ = t.tl.SendCtl(p, b)
		}
	}
}

// failFlags are the abort flags that describe err.
func failFlags(err error) ctlFlags {
	var f ctlFlags
	if errors.Is(err, ErrTeamBroken) {
		f |= flagBroken
	}
	if errors.Is(err, ErrMismatch) {
		f |= flagMismatch
	}
	return f
}
