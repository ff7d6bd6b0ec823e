//go:build !cgo

package main

import (
	"errors"

	"github.com/ibcoll/ibcoll/topology"
)

func mockNames() []string { return []string{"(none: go-nvml's mocks need cgo)"} }

func mockOptions(string, string) (topology.Options, error) {
	return topology.Options{}, errors.New("the mock machines need a cgo build (go-nvml needs cgo)")
}
