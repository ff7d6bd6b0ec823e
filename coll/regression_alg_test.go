package coll_test

import (
	"testing"

	"github.com/ibcoll/ibcoll/coll"
)

// Request.Alg reads r.task without the team lock while Close writes it.
func TestRegressionAlgRace(t *testing.T) {
	w := newWorld(t, 1, coll.Config{})
	tm := w.ranks[0].team
	for i := 0; i < 50; i++ {
		q, err := tm.Init(coll.Args{Type: coll.Barrier})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { defer close(done); _ = q.Alg() }()
		_ = q.Close()
		<-done
	}
}
