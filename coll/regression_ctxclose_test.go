package coll_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/ibcoll/ibcoll/coll"
	"github.com/ibcoll/ibcoll/coll/driver"
	"github.com/ibcoll/ibcoll/mem"
)

// fakeTL stays registered after its test: contexts of later tests that name no TLs
// open it too, from many goroutines, so its counters are locked.
type fakeTL struct {
	name   string
	mu     sync.Mutex
	fails  int
	closes *int
}

func (f *fakeTL) Name() string                               { return f.name }
func (f *fakeTL) Open(driver.Config) (driver.Context, error) { return &fakeTLCtx{f}, nil }

type fakeTLCtx struct{ f *fakeTL }

func (c *fakeTLCtx) Reach() mem.Reach { return mem.Reach{} }
func (c *fakeTLCtx) NewEndpoint(driver.TeamParams) (driver.Endpoint, []byte, error) {
	return nil, nil, errors.New("no")
}
func (c *fakeTLCtx) Close() error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if c.f.fails > 0 {
		c.f.fails--
		return errors.New("close failed")
	}
	*c.f.closes++
	return nil
}

// The two TLs are registered once, by the test's first run (a second registration
// panics), so that it also runs under -count=N; each run resets them.
var (
	regA, regB = &fakeTL{name: "regression-a", closes: new(int)}, &fakeTL{name: "regression-b", closes: new(int)}
	regOnce    sync.Once
)

func TestRegressionContextCloseRetry(t *testing.T) {
	regOnce.Do(func() {
		driver.Register(regA)
		driver.Register(regB)
	})
	for f, fails := range map[*fakeTL]int{regA: 0, regB: 1} {
		f.mu.Lock()
		f.fails, *f.closes = fails, 0
		f.mu.Unlock()
	}
	c, err := coll.NewContext(coll.Config{TLs: []string{"regression-a", "regression-b"}})
	if err != nil {
		t.Fatal(err)
	}
	err1 := c.Close()
	err2 := c.Close()
	regA.mu.Lock()
	ca := *regA.closes
	regA.mu.Unlock()
	regB.mu.Lock()
	cb := *regB.closes
	regB.mu.Unlock()
	t.Logf("first Close: %v; second Close: %v; a closed %d times, b closed %d times", err1, err2, ca, cb)
	if cb != 1 {
		t.Errorf("TL b was never closed (its failed Close is not retried)")
	}
}
