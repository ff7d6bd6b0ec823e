package coll

import "github.com/ibcoll/ibcoll/asym"

// stageKit is what a request stages with: the stage, made in place at every Init, the
// plan it is made from, and the stage's callbacks for the transport, bound once. The
// team keeps the kits of closed requests for the next Inits (takeKit, putKit), so
// that a repeated staged collective, through Run or Init, allocates none of it
// again: the stage keeps its lists' backing arrays and asym.PlanInto the plan's
// spans'.
type stageKit struct {
	stage  asym.Stage
	plan   asym.Staging
	landed func(off, n int)
	ready  func(off, n int) (bool, error)
}

// maxIdleKits bounds the kits a team keeps unused: one per request closed at about the
// same time, as many as the transport keeps tasks (tlmlx5's maxCachedTasks).
const maxIdleKits = 16

// takeKit returns an idle kit or a new one. Under t.mu.
func (t *Team) takeKit() *stageKit {
	if n := len(t.kits); n > 0 {
		k := t.kits[n-1]
		t.kits[n-1] = nil
		t.kits = t.kits[:n-1]
		return k
	}
	k := new(stageKit)
	k.landed, k.ready = k.stage.Landed, k.stage.Ready
	return k
}

// putKit keeps the kit of a request whose stage closed, nil or not. Under t.mu.
func (t *Team) putKit(k *stageKit) {
	if k != nil && len(t.kits) < maxIdleKits {
		t.kits = append(t.kits, k)
	}
}
