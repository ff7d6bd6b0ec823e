//go:build cgo

package coll_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/topology"
	"github.com/ibcoll/ibcoll/topology/mock"
	"github.com/ibcoll/ibcoll/verbs"
)

// placeOn makes NewContext place on mock machine name and records the CUDA
// devices it selects instead of selecting them.
func placeOn(t *testing.T, name string) (*mock.Machine, *[]int) {
	t.Helper()
	m, err := mock.New(name, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	topo, err := topology.Discover(m.Options)
	if err != nil {
		t.Fatal(err)
	}
	var used []int
	t.Cleanup(coll.SetPlacement(topo, nil, func(n int) error { used = append(used, n); return nil }))
	return m, &used
}

// With no device named, every local rank of the DGX A100 opens its GPU's
// nearest HCA and selects its GPU.
func TestPlacementByLocalRank(t *testing.T) {
	m, used := placeOn(t, mock.DGXA100)
	for r := range 8 {
		*used = nil
		cfg, p := coll.Place(coll.Config{LocalRank: r})
		if cfg.Device != m.ExpectHCA[r] || p.Device != m.ExpectHCA[r] || p.DeviceFrom != "topology" {
			t.Errorf("local rank %d: device %q (%+v), want %s from the topology", r, cfg.Device, p, m.ExpectHCA[r])
		}
		if p.GPU != r || p.GPUPCI != m.GPUPCI[r] || p.Relation != "PXB" || p.CUDADevice != r {
			t.Errorf("local rank %d: %+v, want GPU %d (CUDA %d) at PXB", r, p, r, r)
		}
		// CUDA device 0 is the default already: only others are selected.
		if want := []int{r}; r == 0 && len(*used) != 0 || r > 0 && fmt.Sprint(*used) != fmt.Sprint(want) {
			t.Errorf("local rank %d: selected CUDA devices %v", r, *used)
		}
	}
	// PlacedDevice names the same device, and selects no CUDA device.
	*used = nil
	for r := range 8 {
		if d := coll.PlacedDevice(coll.Config{LocalRank: r}); d != m.ExpectHCA[r] {
			t.Errorf("PlacedDevice(local rank %d) = %q, want %s", r, d, m.ExpectHCA[r])
		}
	}
	if d := coll.PlacedDevice(coll.Config{LocalRank: 2, Device: "soft0"}); d != "soft0" {
		t.Errorf("PlacedDevice with Config.Device soft0 = %q", d)
	}
	if d := coll.PlacedDevice(coll.Config{LocalRank: 2, NoPlacement: true}); d != "" {
		t.Errorf("PlacedDevice with NoPlacement = %q, want the default", d)
	}
	if len(*used) != 0 {
		t.Errorf("PlacedDevice selected CUDA devices %v", *used)
	}
	// NewContext really asks for that device: it fails to open it where no
	// mlx5_7 exists, and opens it where one does.
	ctx, err := coll.NewContext(coll.Config{LocalRank: 5})
	if err == nil {
		defer ctx.Close()
		if d := ctx.Placement().Device; d != "mlx5_7" {
			t.Errorf("NewContext(local rank 5) opened %q, want mlx5_7", d)
		}
	} else if !strings.Contains(err.Error(), `"mlx5_7"`) {
		t.Errorf("NewContext(local rank 5): %v, want a failure to open mlx5_7", err)
	}
}

// A named device and a named CUDA device win, and the placement says so.
func TestPlacementExplicitWins(t *testing.T) {
	_, used := placeOn(t, mock.DGXA100)
	ctx, err := coll.NewContext(coll.Config{Device: "soft0", LocalRank: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	p := ctx.Placement()
	if p.Device != "soft0" || p.DeviceFrom != "Config.Device" || p.CUDADevice != 3 || p.GPU != 3 || fmt.Sprint(*used) != "[3]" {
		t.Errorf("explicit device: %+v, selected %v; want soft0 and GPU 3 selected", p, *used)
	}
	*used = nil
	// (Place, not NewContext: NewContext would select CUDA device 1 for the process.)
	_, p = coll.Place(coll.Config{LocalRank: 3, CUDADevice: 1})
	if p.CUDADevice != 1 || p.GPU != 3 || p.Device != "mlx5_3" || len(*used) != 0 {
		t.Errorf("explicit CUDA device: %+v, selected %v", p, *used)
	}
	env := map[string]string{"IBCOLL_CUDA_DEVICE": "0", "LOCAL_RANK": "6", "IBCOLL_DEVICE": "mlx5_4"}
	cfg, err := coll.ConfigFromEnv(coll.Config{}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	cfg, p = coll.Place(cfg)
	if cfg.LocalRank != 6 || cfg.Device != "mlx5_4" || p.CUDADevice != 0 || p.GPU != 6 || len(*used) != 0 {
		t.Errorf("$IBCOLL_CUDA_DEVICE=0 $IBCOLL_DEVICE=mlx5_4 $LOCAL_RANK=6: %+v %+v, selected %v", cfg, p, *used)
	}
	cfg, p = coll.Place(coll.Config{LocalRank: 2, NoPlacement: true})
	if cfg.Device != "" || p.GPU != -1 || p.DeviceFrom != "default" {
		t.Errorf("NoPlacement: %+v", p)
	}
}

// CUDA_VISIBLE_DEVICES numbers the GPUs a local rank takes; a process that
// already uses another CUDA device keeps it, with a note.
func TestPlacementVisibleAndBusy(t *testing.T) {
	placeOn(t, mock.DGXA100)
	env := map[string]string{"CUDA_VISIBLE_DEVICES": "6,7", "SLURM_LOCALID": "1"}
	cfg, err := coll.ConfigFromEnv(coll.Config{}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	cfg, p := coll.Place(cfg)
	if cfg.Device != "mlx5_9" || p.GPU != 7 || p.CUDADevice != 1 {
		t.Errorf("CUDA_VISIBLE_DEVICES=6,7 local rank 1: %+v", p)
	}
	t.Cleanup(coll.SetPlacement(nil, nil, nil))
	m, err := mock.New(mock.DGXA100, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	topo, _ := topology.Discover(m.Options)
	t.Cleanup(coll.SetPlacement(topo, nil, func(int) error { return fmt.Errorf("in use: %w", coll.ErrBusy) }))
	_, p = coll.Place(coll.Config{LocalRank: 2})
	if p.Device != "mlx5_2" || p.CUDADevice != 0 || !strings.Contains(p.Note, "already uses") {
		t.Errorf("busy CUDA device: %+v", p)
	}
}

// Without NVML (or when discovery fails) nothing changes: the transport's
// default device, CUDA device 0, and a note.
func TestPlacementWithoutGPUs(t *testing.T) {
	placeOn(t, mock.NoNVML)
	cfg, p := coll.Place(coll.Config{LocalRank: 1})
	if cfg.Device != "" || p.DeviceFrom != "default" || p.GPU != -1 || !strings.Contains(p.Note, "NVML") {
		t.Errorf("no NVML: %+v %+v", cfg, p)
	}
	t.Cleanup(coll.SetPlacement(nil, errors.New("sysfs unreadable"), nil))
	cfg, p = coll.Place(coll.Config{})
	if cfg.Device != "" || !strings.Contains(p.Note, "sysfs unreadable") {
		t.Errorf("failed discovery: %+v", p)
	}
}

func TestPlacementBadInput(t *testing.T) {
	if _, err := coll.NewContext(coll.Config{LocalRank: -1}); err == nil || !strings.Contains(err.Error(), "Config.LocalRank") {
		t.Errorf("LocalRank -1: %v", err)
	}
	env := map[string]string{"OMPI_COMM_WORLD_LOCAL_RANK": "two"}
	if _, err := coll.ConfigFromEnv(coll.Config{}, func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "OMPI_COMM_WORLD_LOCAL_RANK") {
		t.Errorf("malformed local rank: %v", err)
	}
	var nilCtx *coll.Context
	if p := nilCtx.Placement(); p.GPU != -1 {
		t.Errorf("nil Context: %+v", p)
	}
}

// TestPlacementOpened: the placement names the device the transport opened, also
// where the default chose it (Device and DeviceFrom then say only "default"): a
// program can log which NIC it runs on. With NoPlacement and no device named, this
// machine's default is its first real device with an active port, else soft0.
func TestPlacementOpened(t *testing.T) {
	for _, cfg := range []coll.Config{{Device: "soft0"}, {NoPlacement: true}} {
		ctx, err := coll.NewContext(cfg)
		if err != nil {
			t.Fatal(err)
		}
		p := ctx.Placement()
		want := "soft0"
		if cfg.Device == "" {
			want = defaultDevice(t)
		}
		if p.Opened != want {
			t.Errorf("%+v: Opened %q, want %q (placement %+v)", cfg, p.Opened, want, p)
		}
		// Placement is safe beside Close (-race), and still names the device after it.
		done := make(chan string)
		go func() { done <- ctx.Placement().Opened }()
		if err := ctx.Close(); err != nil {
			t.Fatal(err)
		}
		if got := <-done; got != want {
			t.Errorf("Placement beside Close: Opened %q, want %q", got, want)
		}
		if got := ctx.Placement().Opened; got != want {
			t.Errorf("after Close: Opened %q, want %q", got, want)
		}
	}
}

// defaultDevice is what verbs opens for "": the first real device with an active
// port, else soft0.
func defaultDevice(t *testing.T) string {
	devs, err := verbs.Devices()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if d.Provider == "ibv" && d.Active() {
			return d.Name
		}
	}
	return verbs.SoftDeviceName
}
