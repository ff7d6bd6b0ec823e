package verbs

// Context is an open device. It wraps ibv_open_device(3) on the ibv
// provider. A Context is safe for concurrent use.
type Context struct {
	node
	info DeviceInfo
	attr DeviceAttr // queried at Open: the limits arguments are checked against
	b    ctxBackend
	port int // the port of its QPs
	// events: what Events took from the device (events.go)
	events eventLog
}

// Name returns the device name (e.g. "mlx5_0", "rxe0", "soft0").
func (c *Context) Name() string {
	if c == nil {
		return ""
	}
	return c.info.Name
}

// Provider returns "ibv" or "soft".
func (c *Context) Provider() string {
	if c == nil {
		return ""
	}
	return c.info.Provider
}

// Info returns the device description taken when it was opened.
func (c *Context) Info() DeviceInfo {
	if c == nil {
		return DeviceInfo{}
	}
	return c.info
}

// Query wraps ibv_query_device_ex(3) and ibv_query_port(3).
func (c *Context) Query() (DeviceAttr, error) {
	if c == nil {
		return DeviceAttr{}, invalid("Query", "nil Context")
	}
	if err := c.rlock("Query", "context"); err != nil {
		return DeviceAttr{}, err
	}
	defer c.mu.RUnlock()
	return c.b.query()
}

// Close wraps ibv_close_device(3). It fails with ErrBusy while any PD, CQ
// or DM of the context is open. It is idempotent and nil-safe.
func (c *Context) Close() error {
	if c == nil {
		return nil
	}
	if done, err := c.beginClose("Context.Close", "context "+c.info.Name); done {
		return err
	}
	if err := c.b.close(); err != nil {
		c.endClose(false)
		return err
	}
	c.endClose(true)
	c.unregister()
	return nil
}
