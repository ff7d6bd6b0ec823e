package fault

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ibcoll/ibcoll/internal/errs"
)

func TestParse(t *testing.T) {
	for s, want := range map[string]Fault{
		"alloc@0":      {Alloc, 0, 1},
		"copyout@3:2":  {CopyOut, 3, 2},
		"stall@*:5":    {Stall, AnyRank, 5},
		"team@12":      {Team, 12, 1},
		"qperr@1:1000": {QPErr, 1, 1000},
	} {
		got, err := Parse(s)
		require.NoError(t, err, s)
		require.Equal(t, want, got, s)
		back, err := Parse(got.String())
		require.NoError(t, err)
		require.Equal(t, got, back)
	}
	for _, bad := range []string{"", "alloc", "alloc@", "alloc@x", "alloc@-1", "alloc@0:0", "alloc@0:x", "free@0", "@0"} {
		_, err := Parse(bad)
		require.ErrorIs(t, err, errs.ErrInvalid, bad)
	}
}

func TestSetCountsPerRank(t *testing.T) {
	faults := []Fault{{Alloc, 1, 2}, {Alloc, AnyRank, 4}, {CopyIn, 0, 1}}
	require.NotNil(t, NewSet(faults, 5), "AnyRank applies to rank 5")
	s1 := NewSet(faults, 1)
	var got []bool
	for range 5 {
		got = append(got, s1.Hit(Alloc) != nil)
	}
	require.Equal(t, []bool{false, true, false, true, false}, got, "the 2nd and 4th allocations of rank 1 fail, once each")
	require.NoError(t, s1.Hit(CopyIn), "rank 0's fault does not apply to rank 1")
	require.Equal(t, int64(5), s1.Seen(Alloc))
	err := NewSet(faults, 0).Hit(CopyIn)
	require.ErrorIs(t, err, ErrInjected)
	require.EqualError(t, err, "injected fault: copyin #1")
	var none *Set
	require.NoError(t, none.Hit(Alloc), "the nil Set never fails")
	require.Nil(t, NewSet(nil, 0))
}

func TestSetConcurrent(t *testing.T) {
	s := NewSet([]Fault{{Reg, AnyRank, 500}}, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	fails := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if s.Hit(Reg) != nil {
					mu.Lock()
					fails++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 1, fails, "exactly one of 800 concurrent steps is the 500th")
}

func TestValidate(t *testing.T) {
	require.NoError(t, Fault{Kind: Alloc, Rank: AnyRank}.Validate("f"))
	require.EqualError(t, Fault{Kind: 0}.Validate("Config.Faults[2]"), "Config.Faults[2].Kind is unknown (0): invalid argument")
	require.ErrorContains(t, Fault{Kind: Alloc, Rank: -2}.Validate("f"), "f.Rank is -2")
	require.ErrorContains(t, Fault{Kind: Alloc, N: -1}.Validate("f"), "f.N is -1")
}

// TestArmFiresOnlyWhenTaken: Hit's failure counts as fired at once; Arm's only once
// its caller says it took effect, so a failure that another one came before is not
// called fired.
func TestArmFiresOnlyWhenTaken(t *testing.T) {
	s := NewSet([]Fault{{Kind: QPErr, Rank: 0, N: 2}, {Kind: Stall, Rank: 0, N: 1}, {Kind: Alloc, Rank: AnyRank}}, 0)
	took, err := s.Arm(QPErr)
	if err != nil {
		t.Fatalf("step 1 of qperr failed: %v", err)
	}
	took()
	if s.Fired(QPErr, 2) {
		t.Fatal("qperr fired before its step")
	}
	_, err = s.Arm(QPErr)
	if err == nil {
		t.Fatal("step 2 of qperr did not fail")
	}
	if s.Fired(QPErr, 2) {
		t.Fatal("an armed failure that was never taken counts as fired")
	}
	took, err = s.Arm(Stall)
	if err == nil {
		t.Fatal("step 1 of stall did not fail")
	}
	took()
	if !s.Fired(Stall, 0) || !s.Fired(Stall, 1) {
		t.Fatal("a taken stall is not fired (N 0 is N 1)")
	}
	if err := s.Hit(Alloc); err == nil || !s.Fired(Alloc, 1) {
		t.Fatalf("Hit's failure (%v) is not fired", err)
	}
	if s.Fired(Reg, 1) || (*Set)(nil).Fired(Alloc, 1) {
		t.Fatal("a fault never set fired")
	}
}
