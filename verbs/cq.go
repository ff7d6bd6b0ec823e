package verbs

import (
	"context"
)

// CQ is a completion queue.
type CQ struct {
	node
	ctx   *Context
	b     cqBackend
	depth int
}

// CreateCQ wraps ibv_create_cq(3) with a completion channel, so that
// waiting for completions can block instead of spinning.
func (c *Context) CreateCQ(depth int) (*CQ, error) {
	if c == nil {
		return nil, invalid("CreateCQ", "nil Context")
	}
	if depth <= 0 || depth > c.attr.MaxCQE {
		return nil, invalid("CreateCQ", "depth must be in [1, %d] (the device's max_cqe), got %d", c.attr.MaxCQE, depth)
	}
	if err := c.reserve("CreateCQ", "context"); err != nil {
		return nil, err
	}
	b, err := c.b.createCQ(depth)
	if err != nil {
		c.dropChild()
		return nil, err
	}
	cq := &CQ{ctx: c, b: b, depth: depth}
	cq.register("cq", 0)
	return cq, nil
}

// Depth returns the number of entries the CQ was created with.
func (c *CQ) Depth() int {
	if c == nil {
		return 0
	}
	return c.depth
}

// Poll wraps ibv_poll_cq(3): it fills wcs with up to len(wcs) completions
// and returns how many it filled. It never blocks.
func (c *CQ) Poll(wcs []WC) (int, error) {
	if c == nil {
		return 0, invalid("Poll", "nil CQ")
	}
	if len(wcs) == 0 {
		return 0, nil
	}
	if err := c.rlock("Poll", "CQ"); err != nil {
		return 0, err
	}
	defer c.mu.RUnlock()
	return c.b.poll(wcs)
}

// Wait blocks until the CQ may hold completions, or ctx ends. It arms the
// completion channel (ibv_req_notify_cq(3), ibv_get_cq_event(3)) and so
// uses no CPU while waiting. It may return early; poll again after it.
func (c *CQ) Wait(ctx context.Context) error {
	if c == nil {
		return invalid("Wait", "nil CQ")
	}
	if ctx == nil {
		return invalid("Wait", "nil context.Context")
	}
	if err := c.rlock("Wait", "CQ"); err != nil {
		return err
	}
	defer c.mu.RUnlock()
	return c.b.wait(ctx)
}

// Close wraps ibv_destroy_cq(3). It fails with ErrBusy while a QP uses the
// CQ. It waits for concurrent Poll and Wait calls to return, so cancel the
// context of a blocked Wait before closing.
func (c *CQ) Close() error {
	if c == nil {
		return nil
	}
	if done, err := c.beginClose("CQ.Close", "CQ"); done {
		return err
	}
	if err := c.b.close(); err != nil {
		c.endClose(false)
		return err
	}
	c.endClose(true)
	c.ctx.dropChild()
	c.unregister()
	return nil
}
