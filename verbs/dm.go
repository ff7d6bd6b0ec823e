package verbs

// DM is a region of NIC device memory. The CPU cannot address it; data
// moves with CopyTo/CopyFrom or with RDMA through a DM MR.
type DM struct {
	node
	ctx  *Context
	b    dmBackend
	size int
}

// AllocDM wraps ibv_alloc_dm(3): NIC device memory (mlx5 MEMIC). Providers
// without device memory answer an error wrapping ErrNotSupported.
func (c *Context) AllocDM(size int) (*DM, error) {
	if c == nil {
		return nil, invalid("AllocDM", "nil Context")
	}
	if size <= 0 {
		return nil, invalid("AllocDM", "size must be > 0, got %d", size)
	}
	if err := c.reserve("AllocDM", "context"); err != nil {
		return nil, err
	}
	b, err := c.b.allocDM(size)
	if err != nil {
		c.dropChild()
		return nil, err
	}
	dm := &DM{ctx: c, b: b, size: size}
	dm.register("dm", 0)
	return dm, nil
}

// Len returns the size of the region.
func (d *DM) Len() int {
	if d == nil {
		return 0
	}
	return d.size
}

func (d *DM) checkCopy(op string, offset, n int) error {
	if offset < 0 || offset%4 != 0 {
		return invalid(op, "offset %d must be a non-negative multiple of 4", offset)
	}
	if n%4 != 0 {
		return invalid(op, "length %d must be a multiple of 4", n)
	}
	if n < 0 || offset > d.size || n > d.size-offset {
		return invalid(op, "offset %d + length %d exceeds the %d-byte DM", offset, n, d.size)
	}
	return nil
}

// CopyTo wraps ibv_memcpy_to_dm(3). Offset and length must be multiples
// of 4: device memory is written in 4-byte words.
func (d *DM) CopyTo(offset int, src []byte) error {
	if d == nil {
		return invalid("CopyTo", "nil DM")
	}
	if err := d.checkCopy("CopyTo", offset, len(src)); err != nil {
		return err
	}
	if err := d.rlock("CopyTo", "DM"); err != nil {
		return err
	}
	defer d.mu.RUnlock()
	if len(src) == 0 {
		return nil
	}
	return d.b.copyTo(offset, src)
}

// CopyFrom wraps ibv_memcpy_from_dm(3), with the same alignment rules.
func (d *DM) CopyFrom(dst []byte, offset int) error {
	if d == nil {
		return invalid("CopyFrom", "nil DM")
	}
	if err := d.checkCopy("CopyFrom", offset, len(dst)); err != nil {
		return err
	}
	if err := d.rlock("CopyFrom", "DM"); err != nil {
		return err
	}
	defer d.mu.RUnlock()
	if len(dst) == 0 {
		return nil
	}
	return d.b.copyFrom(dst, offset)
}

// Close wraps ibv_free_dm(3). It fails with ErrBusy while a DM MR lives,
// as the kernel does.
func (d *DM) Close() error {
	if d == nil {
		return nil
	}
	if done, err := d.beginClose("DM.Close", "DM"); done {
		return err
	}
	if err := d.b.close(); err != nil {
		d.endClose(false)
		return err
	}
	d.endClose(true)
	d.ctx.dropChild()
	d.unregister()
	return nil
}
