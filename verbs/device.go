package verbs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// SoftDeviceName is the name of the in-process software device.
const SoftDeviceName = "soft0"

// DeviceEnv names the environment variable that overrides the device Open
// picks for the name "".
const DeviceEnv = "IBCOLL_DEVICE"

// ibvProvider is set by the cgo build; without cgo only soft exists.
var ibvProvider provider

// sysfs is where real devices are described. Tests read fake trees through
// the same reader, handing it their own fs.FS.
var sysfs fs.FS = os.DirFS("/sys")

// Devices lists every device: the real ones that libibverbs reports, then
// soft0. A host without RDMA support (no kernel modules, no libibverbs
// devices) simply lists soft0.
func Devices() ([]DeviceInfo, error) {
	var out []DeviceInfo
	if ibvProvider != nil {
		devs, err := ibvProvider.devices(sysfs)
		if err != nil && !errors.Is(err, ErrNoDevice) && !errors.Is(err, ErrNotSupported) {
			return nil, err
		}
		out = append(out, devs...)
	}
	return append(out, softInfo()), nil
}

// Open opens a device by name: a real device (e.g. "mlx5_0", "rxe0") or
// "soft0". The name "" picks the device named by $IBCOLL_DEVICE when it is
// set, else the first real device with an active port, else soft0.
func Open(name string) (*Context, error) {
	if name == "" {
		name = os.Getenv(DeviceEnv)
	}
	if name == "" {
		devs, err := Devices()
		if err != nil {
			return nil, err
		}
		name = SoftDeviceName
		for _, d := range devs {
			if d.Provider == "ibv" && d.Active() {
				name = d.Name
				break
			}
		}
	}
	var (
		b    ctxBackend
		info DeviceInfo
		err  error
	)
	switch {
	case name == SoftDeviceName:
		b, info, err = softProvider{}.open(name)
	case ibvProvider != nil:
		b, info, err = ibvProvider.open(name)
	default:
		err = newError("Open", ErrNoDevice, fmt.Sprintf("device %q: this build has no libibverbs support (built without cgo); only %s exists", name, SoftDeviceName))
	}
	if err != nil {
		return nil, err
	}
	attr, err := b.query()
	if err != nil {
		_ = b.close()
		return nil, err
	}
	ctx := &Context{info: info, attr: attr, b: b}
	ctx.register("context", 0)
	return ctx, nil
}
