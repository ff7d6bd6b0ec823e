//go:build !ibcoll_stagetrace

package asym

// stageTrace records a post's timeline in builds with the ibcoll_stagetrace tag
// (trace_on.go); here it is empty and its calls compile to nothing.
type stageTrace struct{}

func (*stageTrace) begin(*Stage)        {}
func (*stageTrace) mark(byte, int, int) {}
func (*stageTrace) end(*Stage)          {}
func (*stageTrace) tune(*Stage)         {}

// copyInTrace records a pipelined copy-in's steps in trace builds only.
type copyInTrace struct{}

func (*copyInTrace) step(int, int)      {}
func (*stageTrace) copyIn(*copyInTrace) {}
