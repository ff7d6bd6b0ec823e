package coll

import "github.com/ibcoll/ibcoll/topology"

// SetPipelineMin sets the pipelined copy-in threshold for the tests of this package and
// returns the function that restores it.
func SetPipelineMin(n int) (restore func()) {
	old := pipelineMin
	pipelineMin = n
	return func() { pipelineMin = old }
}

// SetPlacement makes NewContext place on topo (nil: as Discover fails, with
// err) and select CUDA devices through use, for the tests of this package; it
// returns the function that restores both.
func SetPlacement(topo *topology.Topology, err error, use func(int) error) (restore func()) {
	oldD, oldU := discovered, useCUDADevice
	discovered = func() (*topology.Topology, error) { return topo, err }
	useCUDADevice = use
	return func() { discovered, useCUDADevice = oldD, oldU }
}

// Place runs NewContext's placement on cfg.
func Place(cfg Config) (Config, Placement) {
	p := place(&cfg)
	return cfg, p
}
