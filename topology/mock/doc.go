// Package mock builds whole machines for topology's tests and for
// `ibcoll-topo --mock`: a fake sysfs tree written under a directory (PCIe
// bridges, GPUs, RDMA devices with ports and netdevs, NUMA nodes, all linked as
// the kernel links them) and, where the machine has a driver, one of go-nvml's
// mock NVML servers whose GPUs sit at the tree's PCI addresses. It needs cgo,
// as go-nvml does.
package mock
