package asym

import (
	"errors"
	"testing"

	"github.com/ibcoll/ibcoll/mem"
)

// TestNilStageAndOptions: a nil Stage answers every method with an error or its zero
// value, a nil Option is refused naming it, and WithAlloc(nil), WithFree(nil) and
// WithStreams(nil, nil) keep the defaults (they left nil functions that panicked at
// the first allocation).
func TestNilStageAndOptions(t *testing.T) {
	var s *Stage
	for name, err := range map[string]error{
		"CopyIn": s.CopyIn(), "Complete": s.Complete(nil), "SetOutput": s.SetOutput(nil), "Init": s.Init(Staging{}, UserBuf{}, UserBuf{}, nil),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("nil Stage %s: %v", name, err)
		}
	}
	if _, err := s.Ready(0, 1); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil Stage Ready: %v", err)
	}
	s.SetRows(8, 2)
	s.Landed(0, 8)
	if s.Staged() || s.InFlight() || s.CopyingIn() || s.Src() != (UserBuf{}) || s.Dst() != (UserBuf{}) ||
		s.SrcRegistration() != nil || s.DstRegistration() != nil {
		t.Error("a nil Stage reports something")
	}
	if err := s.Close(); err != nil {
		t.Errorf("nil Stage Close: %v", err)
	}

	if _, err := NewStage(Staging{}, UserBuf{}, UserBuf{}, nil, WithFaults(nil), nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("a nil Option: %v", err)
	}
	// A staged destination with the defaults kept by nil functions: it allocates.
	plan := Staging{Dst: Scratch{Needed: true, Type: mem.Host, Bytes: 64, CopyOut: true, Spans: []Span{{0, 64}}}}
	dst := newBuf(t, mem.Sim, 64)
	st, err := NewStage(plan, UserBuf{}, UserBuf{Addr: dst.Addr(), Type: mem.Sim, Len: 64, Buf: dst}, &fakeRegistrar{},
		WithAlloc(nil), WithFree(nil), WithStreams(nil, nil))
	if err != nil {
		t.Fatalf("NewStage with nil functions: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}
