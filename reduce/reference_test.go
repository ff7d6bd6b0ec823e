package reduce

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ibcoll/ibcoll/collective"
)

// TestReference: the exported reference (Reference, then ReferenceFinalize) agrees with
// the kernels' public path (IntoMany, then Finalize) for every dtype and operator, on lengths past the kernels'
// threshold, and refuses bad arguments naming itself.
func TestReference(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	for _, dt := range collective.DTypes() {
		for _, op := range validOps(dt) {
			for _, k := range []int{1, 2, 5} {
				n := (minNative/dt.Size() + 1 + rng.IntN(2000)) * dt.Size()
				srcs := make([][]byte, k)
				for i := range srcs {
					srcs[i] = make([]byte, n)
					fill(rng, srcs[i], dt)
				}
				got, want := make([]byte, n), make([]byte, n)
				if err := Reference(got, srcs, dt, op); err != nil {
					t.Fatal(err)
				}
				if err := ReferenceFinalize(got, dt, op, k); err != nil {
					t.Fatal(err)
				}
				if err := IntoMany(want, srcs, dt, op); err != nil {
					t.Fatal(err)
				}
				if err := Finalize(want, dt, op, k); err != nil {
					t.Fatal(err)
				}
				if i := firstDiff(got, want, dt); i >= 0 {
					t.Fatalf("seed %d: %v %v k=%d n=%d: element %d is %x, the kernels' %x", seed, dt, op, k, n, i,
						got[i*dt.Size():(i+1)*dt.Size()], want[i*dt.Size():(i+1)*dt.Size()])
				}
			}
		}
	}
	buf, a := make([]byte, 64), make([]byte, 64)
	for _, err := range []error{
		Reference(buf, nil, collective.Int32, collective.OpSum),
		Reference(buf, [][]byte{a[:60]}, collective.Int32, collective.OpSum),
		Reference(buf, [][]byte{a}, collective.Float32, collective.OpBxor),
	} {
		if err == nil || !strings.HasPrefix(err.Error(), "reduce: Reference: ") || !errors.Is(err, collective.ErrInvalid) {
			t.Errorf("got %v, want an invalid-argument error of Reference", err)
		}
	}
	for _, err := range []error{
		ReferenceFinalize(buf, collective.Int32, collective.Op(0), 2),
		ReferenceFinalize(buf[:6], collective.Int32, collective.OpAvg, 2),
		// An avg over no ranks: dividing by it would panic (integers) or give Inf.
		ReferenceFinalize(buf, collective.Int32, collective.OpAvg, 0),
		ReferenceFinalize(buf, collective.Float32, collective.OpAvg, -2),
	} {
		if err == nil || !strings.HasPrefix(err.Error(), "reduce: ReferenceFinalize: ") || !errors.Is(err, collective.ErrInvalid) {
			t.Errorf("got %v, want an invalid-argument error of ReferenceFinalize", err)
		}
	}
}
