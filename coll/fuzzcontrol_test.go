package coll_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/coll"
)

// wireMsg is coll's control message in its wire form: kind, flags, collective,
// post, origin, signature, then the payload.
func wireMsg(kind, flags byte, seq uint64, post, origin, sig uint32, payload ...byte) []byte {
	b := make([]byte, 24, 24+len(payload))
	b[0], b[1] = kind, flags
	binary.LittleEndian.PutUint64(b[4:], seq)
	binary.LittleEndian.PutUint32(b[12:], post)
	binary.LittleEndian.PutUint32(b[16:], origin)
	binary.LittleEndian.PutUint32(b[20:], sig)
	return append(b, payload...)
}

// FuzzTeamControl sends what a peer may put on the wire as coll's control messages
// (any bytes, up to the transport's MaxCtl) to the ranks of a 3-rank team over the
// fake transport, beside their own traffic: before a collective, during it (between
// two of its progress steps) and for collectives not initialized yet. Nothing may
// panic; every rank's Wait must return (an error is fine: a forged abort fails the
// collective, a forged "broken" the team); and the teams must close with nothing
// left behind. The seeds are well-formed messages of every kind, then mangled ones.
//
// One exception: a rank that "says" it closed its team (a well-formed "left" whose
// origin is its sender) is believed, and the peers it told send it nothing more; that
// rank alone may wait out its deadline (its Timeout is short here, so that such
// inputs stay fast), and every other rank's Wait must still return before the bound.
// A "left" that names another rank is malformed and dropped (session 24: the fuzzer
// found such news leaving the rank it named waiting for its deadline).
func FuzzTeamControl(f *testing.F) {
	msg := wireMsg
	frame := func(from, to byte, when byte, m []byte) []byte {
		return append([]byte{from, to, when, byte(len(m))}, m...)
	}
	f.Add(frame(1, 0, 0, msg(wireAbort, 0, 0, 1, 1, 0, []byte("forged")...)))
	f.Add(frame(2, 1, 1, msg(wireDone, 0, 0, 1, 2, 7, 0xff, 0xff, 0xff, 0xff)))
	f.Add(frame(0, 2, 1, msg(wireFin, 0, 0, 1, 0, 0)))
	f.Add(frame(1, 2, 0, msg(wireBroken, 0, 0, 0, 1, 0)))
	f.Add(frame(2, 0, 2, msg(wireLeft, 0, 1, 0, 2, 0)))
	f.Add(frame(0, 1, 1, msg(wireSig, 0, 0, 0, 0, 9, 1, 0, 0, 0, 'x')))
	f.Add(frame(0, 1, 1, msg(wireSig, 0, 0, 0, 0, 9, 0xff, 0xff, 0xff, 0x7f)))
	f.Add(frame(1, 0, 0, msg(wireAbort, wireAck, 5, 1, 1, 0)))
	f.Add(append(frame(2, 1, 0, msg(wireDone, 0, 0, 1, 2, 0)), frame(1, 0, 2, msg(wireAbort, 4, 0, 1, 1, 0))...))
	f.Add([]byte{0, 1, 0, 3, 1, 2, 3})
	// The default mode's signature check (collective 1, the allreduce) and aborts of
	// posts far ahead, which that mode accepts.
	f.Add(frame(1, 0, 1, msg(wireSigUp, 0, 1, 1, 1, 7, 0xff, 0xff, 0xff, 0xff, 'a')))
	f.Add(frame(0, 2, 2, msg(wireSigOK, 0, 1, 1, 0, 7, 0xff, 0xff, 0xff, 0xff)))
	f.Add(frame(0, 1, 0, msg(wireSigOK, 0, 1, 1, 2, 7)))
	f.Add(frame(2, 1, 3, msg(wireAbort, 0, 1, 1<<31, 2, 0, []byte("far ahead")...)))
	f.Add(append(frame(1, 2, 1, msg(wireAbort, 8, 1, 1, 1, 0, []byte("mismatch")...)), frame(2, 0, 2, msg(wireSigUp, 0, 1, 1, 2, 3, 2, 0, 0, 0))...))
	f.Fuzz(func(t *testing.T, data []byte) {
		const n = 3
		// Each frame: from, to, when (0: before the collective, else after that many
		// of rank "to"'s progress steps), length, message.
		type forged struct {
			from, to, when int
			b              []byte
		}
		var fs []forged
		var said [n]bool // the rank said of itself that it left
		for i := 0; i+4 <= len(data); {
			fr := forged{from: int(data[i]) % n, to: int(data[i+1]) % n, when: int(data[i+2]) % 4}
			l := min(int(data[i+3]), len(data)-i-4)
			fr.b = data[i+4 : i+4+l]
			i += 4 + l
			if fr.from != fr.to && l > 0 {
				fs = append(fs, fr)
				if l >= 20 && fr.b[0] == wireLeft && binary.LittleEndian.Uint32(fr.b[16:]) == uint32(fr.from) {
					said[fr.from] = true
				}
			}
		}
		h := newFakeHubIntn(n, fakePolicy{}, func(int) int { return 0 })
		defer fakeHubs.Delete(h.dev)
		// A rank that returned from Wait no longer polls, so a forged failure's
		// abort waits out the grace: the shortest one keeps iterations fast.
		w, err := startFakeWorld(h, func(r int) coll.Config {
			c := coll.Config{Timeout: 5 * time.Second, AbortGrace: coll.MinAbortGrace, AllOrNothing: false}
			if said[r] {
				c.Timeout = 300 * time.Millisecond
			}
			return c
		})
		require.NoError(t, err)
		send := func(when, to int) {
			for _, fr := range fs {
				if fr.when == when && (to < 0 || fr.to == to) {
					_ = h.eps[fr.from].SendCtl(fr.to, fr.b)
				}
			}
		}
		send(0, -1)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// A barrier (collective 0: the agreement) and an allreduce (collective 1: the
		// default mode's outcome and signature check); frames of "when" w go out
		// after w progress steps of each.
		w.run(func(rank int, tm *coll.Team) error {
			for _, a := range []coll.Args{barrierArgs(false), allreduceArgs(false, 4)} {
				req, err := tm.Init(a)
				if err != nil {
					continue // a forged failure may have broken the team
				}
				perr := req.Post()
				for step := 1; step < 4; step++ {
					send(step, rank)
					if done, _ := req.Test(); done {
						break
					}
				}
				if said[rank] {
					_ = req.Wait(context.Background()) // its own Timeout bounds it
				} else {
					_ = req.Wait(ctx)
				}
				_ = perr
				if err := req.Close(); err != nil {
					return err
				}
			}
			return nil
		})
		require.NoError(t, ctx.Err(), "a Wait reached the fuzz bound: the collective hung")
		require.NoError(t, w.close())
	})
}
