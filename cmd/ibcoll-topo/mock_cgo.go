//go:build cgo

package main

import (
	"github.com/ibcoll/ibcoll/topology"
	"github.com/ibcoll/ibcoll/topology/mock"
)

func mockNames() []string { return mock.Names() }

func mockOptions(name, dir string) (topology.Options, error) {
	m, err := mock.New(name, dir)
	if err != nil {
		return topology.Options{}, err
	}
	return m.Options, nil
}
