package coll_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ibcoll/ibcoll/coll"
)

// byteSched is a schedule read from the fuzzer's bytes. Past their end it is
// deterministic and fair: no delay, ranks in turn.
type byteSched struct {
	b    []byte
	i    int
	turn int
}

func (s *byteSched) next() (byte, bool) {
	if s.i >= len(s.b) {
		return 0, false
	}
	s.i++
	return s.b[s.i-1], true
}

// intn is the hub's randomness: delays, interleavings, permutations.
func (s *byteSched) intn(n int) int {
	if c, ok := s.next(); ok {
		return int(c) % n
	}
	return 0
}

// pick chooses the rank that moves next.
func (s *byteSched) pick(n int) int {
	if c, ok := s.next(); ok {
		return int(c) % n
	}
	s.turn++
	return s.turn % n
}

// fuzzMaxSteps bounds the calls (Post or Test, each one poll) a schedule may take: the
// protocol must end every post within it once the schedule turns fair.
const fuzzMaxSteps = 20000

// FuzzProtocol drives a 3-rank team from one goroutine, with every delivery decision
// (delays, interleaving across peers and, when asked, within a peer: not RC) and the
// order in which ranks move taken from the fuzzer's bytes. Each rank posts a
// persistent barrier k times, going on as soon as its own post ends; one rank's task
// fails at post k (at Post, in State, or in State only after every other rank's task
// ended). Every post must end on every rank within fuzzMaxSteps, posts before k
// succeed everywhere, post k fails everywhere, nobody is cut off, and a barrier after
// it succeeds.
func FuzzProtocol(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0})
	f.Add([]byte{1, 1, 1, 2, 0x07, 5, 200, 7, 9, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Add([]byte{2, 0, 2, 0, 0x13, 1, 1, 1, 1, 0, 0, 2, 2, 2, 0, 1})
	f.Add([]byte{0, 1, 0, 4, 0x0f, 3, 3, 3, 2, 2, 1, 0, 3, 2, 1, 0, 0, 0, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		const n = 3
		s := &byteSched{b: data}
		failRank, k, mode, polls := s.intn(n), 1+s.intn(2), s.intn(3), s.intn(5)
		pb := s.intn(256)
		pol := fakePolicy{MaxDelay: pb & 3, CrossPeer: pb&4 != 0, ReorderPeer: pb&8 != 0, Batch: (pb >> 4) & 3}
		h := newFakeHubIntn(n, pol, s.intn)
		defer fakeHubs.Delete(h.dev)
		h.plan = func(rank int, seq uint64, post uint32) taskPlan {
			p := taskPlan{Polls: h.intn(3), AbortPolls: h.intn(3)}
			if rank == failRank && seq == 0 && post == uint32(k) {
				p.Polls = polls
				switch mode {
				case 0:
					p.PostErr = errFakeTask
				case 1:
					p.StateErr = errFakeTask
				case 2:
					p.StateErr = errFakeTask
					p.When = func(h *fakeHub) bool {
						for r := range n {
							if r != rank && !h.endedLocked(r, seq, post) {
								return false
							}
						}
						return true
					}
				}
			}
			return p
		}
		desc := fmt.Sprintf("rank %d fails post %d (mode %d, %d polls), %v", failRank, k, mode, polls, pol)
		w, err := startFakeWorld(h, func(int) coll.Config { return coll.Config{Timeout: time.Minute, AbortGrace: time.Minute} })
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := w.close(); err != nil {
				t.Error(err)
			}
		}()
		reqs := make([]*coll.Request, n)
		for r := range n {
			if reqs[r], err = w.teams[r].Init(barrierArgs(true)); err != nil {
				t.Fatal(err)
			}
		}
		out := fuzzDrive(t, s, reqs, k, desc)
		for r, req := range reqs {
			if err := req.Close(); err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		for p := 1; p <= k; p++ {
			for r := range n {
				var err error
				if p <= len(out[r]) {
					err = out[r][p-1]
				}
				switch {
				case p > len(out[r]):
					t.Errorf("%s: rank %d stopped before post %d: %v", desc, r, p, out[r])
				case p < k && err != nil:
					t.Errorf("%s: rank %d post %d failed: %v", desc, r, p, err)
				case p == k && err == nil:
					t.Errorf("%s: rank %d post %d succeeded", desc, r, p)
				case p == k && r != failRank && peerErr(err) == nil:
					t.Errorf("%s: rank %d post %d: want a PeerError, got %v", desc, r, p, err)
				}
			}
		}
		if c := h.cutOffs(); len(c) > 0 {
			t.Errorf("%s: cut-offs %+v", desc, c)
		}
		// The team is still usable.
		for r := range n {
			if reqs[r], err = w.teams[r].Init(barrierArgs(false)); err != nil {
				t.Fatalf("%s: rank %d: Init after the failure: %v", desc, r, err)
			}
		}
		out = fuzzDrive(t, s, reqs, 1, desc+", then a barrier")
		for r, req := range reqs {
			if len(out[r]) != 1 || out[r][0] != nil {
				t.Errorf("%s: rank %d: the barrier after the failure: %v", desc, r, out[r])
			}
			if err := req.Close(); err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
	})
}

// fuzzDrive posts every rank's request up to k times, each rank going on as soon as
// its own post succeeded and stopping at its first failure, moving the rank that s
// picks one call at a time. It returns each rank's outcomes.
func fuzzDrive(t *testing.T, s *byteSched, reqs []*coll.Request, k int, desc string) [][]error {
	n := len(reqs)
	out := make([][]error, n)
	posted := make([]bool, n)
	finished := 0
	for step := 0; finished < n; step++ {
		if step > fuzzMaxSteps {
			t.Fatalf("%s: no end after %d steps: outcomes %v", desc, fuzzMaxSteps, out)
		}
		r := s.pick(n)
		if len(out[r]) == k || len(out[r]) > 0 && out[r][len(out[r])-1] != nil {
			_, _ = reqs[r].Test() // finished: still answers its peers
			continue
		}
		if !posted[r] {
			posted[r] = true
			_ = reqs[r].Post() // its error is the post's outcome, which Test reports too
			continue
		}
		done, err := reqs[r].Test()
		if !done {
			continue
		}
		posted[r] = false
		out[r] = append(out[r], err)
		if err != nil || len(out[r]) == k {
			finished++
		}
	}
	return out
}
