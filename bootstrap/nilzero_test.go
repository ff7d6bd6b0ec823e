package bootstrap

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestNilArguments: a nil context, a nil or zero Client and a nil getenv are refused
// with ErrInvalid naming them, where they panicked.
func TestNilArguments(t *testing.T) {
	//nolint:staticcheck // a nil context is the input under test
	if _, err := Dial(nil, "127.0.0.1:1", ClientOptions{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Dial(nil ctx): %v", err)
	}
	if _, _, err := Detect(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("Detect(nil): %v", err)
	}
	ctx := context.Background()
	for name, c := range map[string]*Client{"nil": nil, "zero": {}} {
		if _, err := c.Get(ctx, "k"); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s Client Get: %v", name, err)
		}
		if err := c.Set(ctx, "k", nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s Client Set: %v", name, err)
		}
		if _, err := c.Allgather(ctx, 0, 1, "x", nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s Client Allgather: %v", name, err)
		}
		if err := c.Barrier(ctx, "x", 1); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s Client Barrier: %v", name, err)
		}
	}
	if (*Client)(nil).MaxValueSize() != 0 {
		t.Error("nil Client MaxValueSize")
	}
	for name, c := range map[string]*Client{"nil": nil, "zero": {}} {
		if !errors.Is(c.Err(), ErrInvalid) {
			t.Errorf("%s Client Err: %v", name, c.Err())
		}
		select {
		case <-c.Done():
		default:
			t.Errorf("%s Client Done is open: it can never be used", name)
		}
		if err := c.Close(); err != nil {
			t.Errorf("%s Client Close: %v", name, err)
		}
	}
	c := dial(t, newServer(t, ServerOptions{}), ClientOptions{})
	//nolint:staticcheck // a nil context is the input under test
	if _, err := c.Get(nil, "k"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "nil context.Context") {
		t.Errorf("Get(nil ctx): %v", err)
	}
}
