package verbs

// PD is a protection domain. It wraps struct ibv_pd.
type PD struct {
	node
	ctx *Context
	b   pdBackend
	dev devKeys // keys of its MRs in device memory (devkeys.go)
}

// AllocPD wraps ibv_alloc_pd(3).
func (c *Context) AllocPD() (*PD, error) {
	if c == nil {
		return nil, invalid("AllocPD", "nil Context")
	}
	if err := c.reserve("AllocPD", "context"); err != nil {
		return nil, err
	}
	b, err := c.b.allocPD()
	if err != nil {
		c.dropChild()
		return nil, err
	}
	pd := &PD{ctx: c, b: b}
	pd.register("pd", 0)
	return pd, nil
}

// Context returns the PD's device context.
func (p *PD) Context() *Context {
	if p == nil {
		return nil
	}
	return p.ctx
}

// Close wraps ibv_dealloc_pd(3). It fails with ErrBusy while MRs or QPs
// of the PD are open.
func (p *PD) Close() error {
	if p == nil {
		return nil
	}
	if done, err := p.beginClose("PD.Close", "PD"); done {
		return err
	}
	if err := p.b.close(); err != nil {
		p.endClose(false)
		return err
	}
	p.endClose(true)
	p.ctx.dropChild()
	p.unregister()
	return nil
}
