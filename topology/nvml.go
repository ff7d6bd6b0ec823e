//go:build cgo

package topology

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlSource reads GPUs through an nvml.Interface.
type nvmlSource struct{ lib nvml.Interface }

// NVML adapts go-nvml to a GPUSource: nvml.New() for the driver's library, or one
// of go-nvml's mock machines. GPUs initializes the library, reads, and shuts it
// down again.
func NVML(lib nvml.Interface) GPUSource { return nvmlSource{lib} }

func defaultGPUs() GPUSource { return nvmlSource{nvml.New()} }

func (s nvmlSource) GPUs() (out []GPUInfo, err error) {
	if s.lib == nil {
		return nil, fmt.Errorf("nil nvml.Interface")
	}
	// A mock machine without some function panics when it is called; a
	// library must not, so that becomes an error too.
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("NVML: %v", r)
		}
	}()
	if ret := s.lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML init: %s", ret.Error())
	}
	defer s.lib.Shutdown()
	n, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML device count: %s", ret.Error())
	}
	for i := 0; i < n; i++ {
		d, ret := s.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML device %d: %s", i, ret.Error())
		}
		pci, ret := d.GetPciInfo()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML device %d: PCI info: %s", i, ret.Error())
		}
		g := GPUInfo{Index: i, PCI: busID(pci)}
		if u, ret := d.GetUUID(); ret == nvml.SUCCESS {
			g.UUID = u
		}
		if name, ret := d.GetName(); ret == nvml.SUCCESS {
			g.Name = name
		}
		out = append(out, g)
	}
	return out, nil
}

// busID is the PCI bus id NVML gives, else one made of its numbers.
func busID(p nvml.PciInfo) string {
	var b []byte
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	if len(b) > 0 {
		return string(b)
	}
	return fmt.Sprintf("%04x:%02x:%02x.0", p.Domain, p.Bus, p.Device)
}
