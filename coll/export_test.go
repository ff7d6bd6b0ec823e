package coll

// SetPipelineMin sets the pipelined copy-in threshold for the tests of this package and
// returns the function that restores it.
func SetPipelineMin(n int) (restore func()) {
	old := pipelineMin
	pipelineMin = n
	return func() { pipelineMin = old }
}
