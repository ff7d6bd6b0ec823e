// Package topology describes how the GPUs and RDMA NICs (HCAs) of one node sit on
// its PCIe tree, and picks, for each GPU and each local rank, the HCA nearest to it.
// It is about hardware placement; internal/topo, despite the similar name, is about
// communication patterns (k-nomial trees, rings) among the ranks of a team.
//
// Sources:
//   - sysfs (a root directory, "/sys" in production, fake trees in tests): the PCIe
//     path of every device (bus/pci/devices/<addr> resolves to the chain of bridges
//     above it), NUMA nodes, and the RDMA devices with their ports and netdevs,
//     listed through github.com/Mellanox/rdmamap;
//   - NVML through github.com/NVIDIA/go-nvml (an nvml.Interface, so that go-nvml's
//     mock machines stand in for real ones): each GPU's index, PCI bus id, UUID and
//     name. NVML needs cgo; without it, or without the driver's libnvidia-ml.so.1,
//     Discover reports no GPUs and says why in Topology.Note; Place then offers a rank
//     an HCA by NUMA node (a suggestion: coll.NewContext places only ranks with a GPU,
//     and opens the transport's default device for the others).
//
// Relations follow `nvidia-smi topo -m`: PIX (at most one PCIe switch between the
// two), PXB (several switches, no host bridge), PHB (through the PCIe host bridge
// of one root complex), NODE (between root complexes of one NUMA node), SYS
// (across NUMA nodes). A GPU's nearest HCAs are those at its best relation; ties
// are spread so that GPUs sharing a switch use different rails.
//
// Nothing here holds resources: Discover reads, closes NVML again, and returns
// plain values that are safe for concurrent use. Discover itself serializes on a
// package lock, since rdmamap reads its sysfs paths from package variables.
// This package reads no environment; programs pass $CUDA_VISIBLE_DEVICES and the
// local rank in (see Topology.Place and bootstrap.LocalRank).
//
// This package and its mock subpackage are the only ones that import go-nvml.
package topology
