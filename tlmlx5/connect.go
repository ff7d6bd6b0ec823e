package tlmlx5

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/fault"
	"github.com/ibcoll/ibcoll/verbs"
)

// The lazy connect: a symmetric handshake over the team's Messenger, safe when both
// sides start at once.
//
// Each side makes one QP for the pair, posts its receives, and sends a hello with its
// QP's info and a flag "my QP is connected (RTR)". A side that gets a hello makes its
// QP if it has none, connects it to the info, and sends a hello with the flag set if
// it had not yet. A side posts on the QP only once it knows the peer's QP is
// connected (a hello with the flag came): a write to a QP that is not yet at RTR
// would be lost. Until then what is sent to the peer queues in its send ring, and
// flushes when it becomes ready. One side starting: 3 hellos; both at once: 4.
//
// A connect that fails here (the QP cannot be made or connected, an injected fault)
// sends a refusal, so that the peer fails at once too; a peer that never answers
// fails the link after connectBound, or the collective's deadline comes first.
// Either way the peer goes down (peerFailed): the team is broken and coll fails
// what runs, on every rank.

type linkPhase uint8

const (
	linkNone  linkPhase = iota // no hello sent yet
	linkSent                   // QP made, receives posted, hello sent, peer's info not seen
	linkRTR                    // QP connected; the peer's QP not known to be
	linkReady                  // both connected: sends flow
)

type linkState struct {
	state     linkPhase
	sentReady bool // a hello with the RTR flag went out
	told      bool // the peer was told that this side counts the link down
	since     time.Time
	goneAt    time.Time // when checkLinks may ask the Messenger about the peer next
}

// Hello messages: kind, flags, then the sender's QP info (a refusal: its reason).
const (
	msgHello  = 1
	msgRefuse = 2
	msgClosed = 3 // the sender's team closed while the link was being made; its leaving seq follows, then why its team broke, if it did

	helloRTR = 1 // the sender's QP is connected
)

// link returns the peer for rank r, starting a connection to it when there is
// none. A peer whose connection cannot start is returned down.
func (t *team) link(r int) *peer {
	if pe := t.peers[r]; pe != nil {
		return pe
	}
	if t.msgr == nil || !t.connected {
		// A mesh team has every peer; a lazy one before Connect has none yet.
		return t.downPeer(r, errors.New("no link to this rank"))
	}
	pe, err := t.start(r)
	if err == nil {
		err = t.hello(pe)
	}
	if err != nil {
		t.refuse(pe, err)
	}
	return pe
}

// start makes pe's QP and memory; the caller sends the first hello.
func (t *team) start(r int) (*peer, error) {
	pe, err := t.newPeer(r)
	if err == nil && t.ev.fatal != nil {
		err = t.ev.fatal // the device is gone: no new link either (events.go)
	}
	if err == nil {
		err = t.attach(pe)
	}
	if err == nil {
		err = t.p.Faults.Hit(fault.Connect)
	}
	if err != nil {
		return pe, fmt.Errorf("tlmlx5: connect to rank %d: %w", r, err)
	}
	pe.link = linkState{state: linkSent, since: time.Now()}
	return pe, nil
}

// hello sends this rank's QP info to pe.
func (t *team) hello(pe *peer) error {
	info, err := pe.qp.Info().MarshalBinary()
	if err != nil {
		return err
	}
	var flags byte
	if pe.link.state >= linkRTR {
		flags = helloRTR
		pe.link.sentReady = true
	}
	msg := append([]byte{msgHello, flags}, info...)
	if err := t.msgr.Send(pe.rank, msg); err != nil {
		return fmt.Errorf("tlmlx5: connect to rank %d: %w", pe.rank, err)
	}
	return nil
}

// refuse takes pe down for err and tells the peer, so that it fails at once rather
// than at its bound.
func (t *team) refuse(pe *peer, err error) {
	if errors.Is(err, driver.ErrClosed) {
		// The peer's team closed (its mailbox refused the hello): it is gone, as a
		// peer that left is, and coll learns it from the Messenger. No link of the
		// team failed: the team is not broken by it.
		t.peerLeft(pe)
		return
	}
	t.peerFailed(pe, err)
}

// tellDown tells pe, through the Messenger, that this side counts their link down,
// once. A lazy link has no other rank that would pass news on for it: a QP that
// failed here (an error completion, a cut-off, an injected qperr) leaves the peer's
// QP as it was, and a peer that only waits to receive (a gather's sender waiting for
// the root's ready-to-receive) would wait for its deadline, while the abort sent over
// the failed link never comes. Told, it takes the link down too, so its team breaks
// and what runs there fails at once. It is no use on a mesh team (no Messenger) or
// before Connect.
func (t *team) tellDown(pe *peer, err error) {
	if t.msgr == nil || !t.connected || pe.link.told {
		return
	}
	pe.link.told = true
	why := err.Error()
	if len(why) > 200 {
		why = why[:200]
	}
	_ = t.msgr.Send(pe.rank, append([]byte{msgRefuse, 0}, why...))
}

// tellClosed tells, through the Messenger, every peer whose link is still being made
// that this team closes. coll's news that a rank left goes over links that are up; a
// peer whose hello this side answered, but whose answer had not come, would finish
// its side of the link after the close, and wait on it for its deadline (a gather's
// sender waiting for the ready-to-receive of a root that closed at once).
func (t *team) tellClosed() {
	if t.msgr == nil || !t.connected {
		return
	}
	// The closing rank's next collective: it did its part of every earlier one, whose
	// outcome (an agreement's decision, say) the peer may still be reading. A team that
	// broke did not do its part of those in flight then, whose news (the broken flood)
	// went only over links that were up: the peer fails them from the first, with the
	// cause.
	from, why := t.p.NextSeq(), ""
	if t.p.Leaving != nil {
		from, why = t.p.Leaving()
	}
	if len(why) > 200 {
		why = why[:200]
	}
	msg := binary.LittleEndian.AppendUint64([]byte{msgClosed, 0}, from)
	msg = append(msg, why...)
	for _, pe := range t.linked {
		if !pe.down && pe.qp != nil && pe.link.state != linkReady {
			_ = t.msgr.Send(pe.rank, msg)
		}
	}
}

// linkless returns the peer for rank r, recording one without a link (no QP, no
// send ring) if there is none: it is only ever taken down.
func (t *team) linkless(r int) *peer {
	pe := t.peers[r]
	if pe == nil {
		pe = &peer{rank: r}
		t.peers[r] = pe
		t.linked = append(t.linked, pe)
	}
	return pe
}

// downPeer records rank r as down without a link.
func (t *team) downPeer(r int, err error) *peer {
	pe := t.linkless(r)
	t.peerFailed(pe, err)
	return pe
}

// Message is a hello or a refusal from peer r's endpoint (driver.Lazy).
func (t *team) Message(r int, msg []byte) {
	if t.closed || r < 0 || r >= t.size || r == t.rank || !t.connected {
		return
	}
	if len(msg) == 0 {
		// The Messenger's news of r: it may know now that r's team closed.
		if pe := t.peers[r]; pe != nil && !pe.down && pe.link.state != linkReady && pe.link.state != linkNone {
			if err := t.msgr.Gone(r); err != nil {
				t.refuse(pe, err)
			}
		}
		return
	}
	if len(msg) < 2 {
		return
	}
	pe := t.peers[r]
	if pe != nil && pe.down {
		if msg[0] == msgHello {
			// It is connecting to a rank that counts it down (cut off, or its link
			// failed here): tell it, or it would wait for its bound.
			_ = t.msgr.Send(r, append([]byte{msgRefuse, 0}, "this rank counts the sender down"...))
		}
		return
	}
	switch msg[0] {
	case msgRefuse:
		why := fmt.Errorf("rank %d counts its link to this rank down: %s", r, msg[2:])
		pe = t.linkless(r)
		pe.link.told = true // it knows
		t.peerFailed(pe, why)
		return
	case msgClosed:
		if len(msg) < 10 {
			return // malformed: a peer made without a link would take sends
		}
		pe = t.linkless(r)
		why := fmt.Sprintf("rank %d closed its team before the link to it was up", r)
		if len(msg) > 10 {
			why = fmt.Sprintf("rank %d closed its broken team before the link to it was up: %s", r, msg[10:])
		}
		t.peerLeft(pe)
		t.msgr.Left(r, binary.LittleEndian.Uint64(msg[2:]), why)
		return
	case msgHello:
	default:
		return
	}
	var info verbs.QPInfo
	if err := info.UnmarshalBinary(msg[2:]); err != nil {
		return // not from a peer endpoint of this transport: nothing to answer
	}
	if pe == nil {
		var err error
		if pe, err = t.start(r); err != nil {
			t.refuse(pe, err)
			return
		}
	}
	if pe.link.state == linkSent {
		if err := pe.qp.Connect(info); err != nil {
			t.refuse(pe, fmt.Errorf("tlmlx5: connect to rank %d: %w", r, err))
			return
		}
		pe.link.state = linkRTR
	}
	if !pe.link.sentReady {
		if err := t.hello(pe); err != nil {
			t.refuse(pe, err)
			return
		}
	}
	if msg[1]&helloRTR != 0 && pe.link.state == linkRTR {
		pe.link.state = linkReady
		t.peerReady(pe)
	}
}

// Linked reports whether a QP to peer exists or is being made (driver.Lazy).
func (t *team) Linked(p int) bool {
	return p >= 0 && p < t.size && t.peers[p] != nil && t.peers[p].qp != nil && !t.peers[p].down
}

// Linking reports whether the link to peer is being made (driver.Lazy): its
// handshake has not ended and connectBound has not failed it yet.
func (t *team) Linking(p int) bool {
	if p < 0 || p >= t.size || t.peers[p] == nil {
		return false
	}
	pe := t.peers[p]
	return !pe.down && pe.qp != nil && pe.link.state != linkReady
}

// peerReady runs once per peer, when its link is up both ways (at Connect for a
// mesh team): per-peer setup that needs the link belongs here. It flushes what
// queued while the link was being made.
func (t *team) peerReady(pe *peer) {
	t.flush(pe)
}

// checkLinks fails the links whose handshake has not ended within connectBound.
// A peer whose team closed meanwhile (its hello may have been dropped unread) is
// gone.
func (t *team) checkLinks() {
	var now time.Time // read only when a link is being made: Poll runs this every time
	for _, pe := range t.linked {
		if pe.down || pe.link.state == linkReady || pe.link.state == linkNone {
			continue
		}
		if now.IsZero() {
			now = time.Now()
		}
		if !now.Before(pe.link.goneAt) {
			// At the first poll, then every goneAsk, not at every poll: a Messenger's
			// Gone may cost a lock and a map (TCPOOB's bookkeeping made a 64-rank
			// wiring through the store twice as slow when every poll asked about every
			// link still being made). The Messenger's news (an empty message) asks at
			// once.
			pe.link.goneAt = now.Add(goneAsk)
			if err := t.msgr.Gone(pe.rank); err != nil {
				t.refuse(pe, err)
				continue
			}
		}
		if now.Sub(pe.link.since) > connectBound {
			t.peerFailed(pe, fmt.Errorf("no answer to its connect within %v", connectBound))
		}
	}
}

// breakLink moves the QP to rank p to the error state (fault.QPErr), linking it
// first if needed.
func (t *team) breakLink(p int) error {
	pe := t.link(p)
	if pe.qp == nil {
		return nil
	}
	err := pe.qp.MoveToError()
	// The error completions that follow would say the same, but only once this rank
	// polls again: the peer is told now (tellDown), as it would be then.
	t.peerFailed(pe, errors.New("link broken (fault qperr)"))
	return err
}

// peerLeft takes pe out of the team without breaking it: its team closed before a
// link was made, so nothing of it can come.
func (t *team) peerLeft(pe *peer) {
	if pe.down {
		return
	}
	if pe.qp != nil {
		_ = pe.qp.MoveToError()
	}
	pe.down = true
	pe.queue.clear()
	t.quarantineGone(pe.rank)
}
