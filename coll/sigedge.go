package coll

import "fmt"

// The signature check's memory across collectives (default mode, sigCheck). A rank
// declares its signature of a collective to an overlay neighbour only when the edge
// needs it: when the signature differs from the one it last declared there, or from
// the one the neighbour last declared. A loop of collectives of one shape so sends no
// check messages after its first, and a rank assumes that a neighbour that declared
// nothing new still runs what it last declared. See sigCheck for why that is sound.

// sigEdge is one overlay edge as this rank knows it.
type sigEdge struct {
	knownSeq uint64 // the collective of the neighbour's latest declaration that came
	known    uint32 // its signature
	hasKnown bool
	told     uint32 // the signature this rank last declared to the neighbour
	toldSeq  uint64 // the collective of that declaration
	hasTold  bool
}

// learn records the neighbour's signature of collective seq (a declaration, or its
// data witnessed), unless a later one came already.
func (e *sigEdge) learn(seq uint64, sig uint32) {
	if !e.hasKnown || seq >= e.knownSeq {
		e.knownSeq, e.known, e.hasKnown = seq, sig, true
	}
}

// assumes reports whether the neighbour's last declaration equals sig and is no older
// than this rank's own last declaration on the edge: with nothing newer from it, it
// runs a collective of signature sig too. A declaration older than this rank's own
// may predate the neighbour's view of it: then this rank declares and waits for the
// answer (TestRegressionSigStaleAssume).
func (e *sigEdge) assumes(sig uint32) bool {
	return e.hasKnown && e.known == sig && (!e.hasTold || e.knownSeq >= e.toldSeq)
}

// mustDeclare reports whether this rank must declare sig to the neighbour: the
// neighbour cannot assume it (this rank last declared something else), or this rank
// cannot assume the neighbour's and waits for it, which the declaration asks for.
func (e *sigEdge) mustDeclare(sig uint32) bool {
	return !(e.hasTold && e.told == sig && e.assumes(sig))
}

// sigSeg is a run of consecutive collectives that this rank initialized with one
// signature.
type sigSeg struct {
	from, to uint64
	sig      uint32
	cause    string
}

// maxSigSegs bounds the runs a team remembers: a declaration of a collective older
// than them is answered with a failure (sigLate), not compared.
const maxSigSegs = 64

type sigEdges struct {
	parent   sigEdge
	children []sigEdge // per overlay child, in the overlay's order
	hist     []sigSeg  // oldest first
}

// sigEdge returns the edge to peer, nil where peer is not an overlay neighbour.
func (t *Team) sigEdge(peer int) *sigEdge {
	ov := t.overlay()
	if peer == ov.parent && peer >= 0 {
		return &t.sigE.parent
	}
	for i, ch := range ov.children {
		if ch == peer {
			return t.childEdge(i)
		}
	}
	return nil
}

// childEdge returns the edge to overlay child i; the edges are made at first use.
func (t *Team) childEdge(i int) *sigEdge {
	if n := len(t.overlay().children); len(t.sigE.children) != n {
		t.sigE.children = make([]sigEdge, n)
	}
	return &t.sigE.children[i]
}

// sigRecord notes that this rank initialized collective seq with signature sig.
func (t *Team) sigRecord(seq uint64, sig uint32, cause string) {
	h := t.sigE.hist
	if n := len(h); n > 0 && h[n-1].to+1 == seq && h[n-1].sig == sig {
		h[n-1].to = seq
		return
	}
	if len(h) == maxSigSegs {
		copy(h, h[1:])
		h = h[:len(h)-1]
	}
	t.sigE.hist = append(h, sigSeg{from: seq, to: seq, sig: sig, cause: cause})
}

// sigAt returns this rank's signature of collective seq, if it still knows it.
func (t *Team) sigAt(seq uint64) (uint32, string, bool) {
	h := t.sigE.hist
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].from <= seq && seq <= h[i].to {
			return h[i].sig, h[i].cause, true
		}
	}
	return 0, "", false
}

// sigForget drops what this rank knows of every edge: after a mismatch nothing is
// assumed until each edge declared again.
func (t *Team) sigForget() {
	t.sigE.parent = sigEdge{}
	for i := range t.sigE.children {
		t.sigE.children[i] = sigEdge{}
	}
}

// sigLate answers a neighbour's declaration of a collective this rank has finished
// (it passed its check on an assumption, or the neighbour declared late): an equal
// signature gets this rank's own in return, which the neighbour may be waiting for;
// a different one fails the collective everywhere as a mismatch (this rank's own
// outcome stands, as a rank's that finished before the news does); one this rank no
// longer remembers fails it on the neighbour, which cannot be told otherwise.
func (t *Team) sigLate(peer int, m ctlMsg) {
	e := t.sigEdge(peer)
	if e == nil {
		return
	}
	e.learn(m.seq, m.sig)
	sig, cause, ok := t.sigAt(m.seq)
	switch {
	case !ok && m.flags&flagAck == 0:
		t.send(peer, ctlMsg{kind: ctlAbort, seq: m.seq, post: 1, origin: uint32(t.rank),
			cause: fmt.Sprintf("rank %d finished collective #%d before rank %d's signature of it came, and no longer holds its own to compare", t.rank, m.seq, peer)})
	case sig != m.sig:
		t.sigForget()
		err := t.mismatchText(m.seq, peer, m.cause, cause)
		if t.remember(m.seq, 1) {
			t.flood(m.seq, 1, t.rank, err.Error(), flagMismatch)
		}
		t.tellMismatch(peer, m.seq, err.Error())
	case m.flags&flagAck == 0: // an answer needs none
		kind := ctlSigOK
		if peer == t.overlay().parent {
			kind = ctlSigUp
		}
		t.send(peer, ctlMsg{kind: kind, flags: flagAck, seq: m.seq, post: 1, origin: uint32(t.rank), sig: sig, cause: cause})
	}
}

// mismatchText is mismatchError from the two signature texts (sigPayload): theirs,
// which peer sent, and ours; one that does not decode counts as no root and no
// description.
func (t *Team) mismatchText(seq uint64, peer int, theirs, ours string) error {
	pr, pd, perr := decodeSigPayload(theirs, t.size)
	if perr != nil {
		pr, pd = noRoot, ""
	}
	mr, md, merr := decodeSigPayload(ours, t.size)
	if merr != nil {
		mr, md = noRoot, ""
	}
	return t.mismatchError(seq, peer, pr, pd, mr, md)
}

// tellMismatch sends peer, which declared collective seq differently and may wait for
// this rank's answer, the mismatch directly: a flood of news this rank already passed
// on does not go again.
func (t *Team) tellMismatch(peer int, seq uint64, cause string) {
	t.send(peer, ctlMsg{kind: ctlAbort, flags: flagMismatch, seq: seq, post: 1, origin: uint32(t.rank), cause: cause})
}
