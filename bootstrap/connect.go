package bootstrap

import (
	"context"
	"fmt"
	"net"
	"strconv"
)

// ConnectOptions configures Connect.
type ConnectOptions struct {
	Server ServerOptions // rank 0's server
	Client ClientOptions
	// ListenAddr is where rank 0's server listens. Empty: all interfaces,
	// on the port of Env.Store.
	ListenAddr string
	// External says a separate process serves the store, as
	// Env.External does: rank 0 only dials.
	External bool
}

// Connect joins the store of a multi-process run, with env.Token as the shared
// secret where opts set none. Rank 0 starts a Server
// (unless the store is external) and every rank dials the store; Dial
// retries until ctx ends, so ranks may start in any order. The Server is
// nil except on the rank that serves. Each rank leaves its will under DiedKey.
//
// Rank 0 must close its Server last: only once every rank is done with
// the store (after a final Barrier, say), since closing it fails the
// other ranks' calls.
func Connect(ctx context.Context, env Env, opts ConnectOptions) (*Client, *Server, error) {
	if env.Size < 1 || env.Rank < 0 || env.Rank >= env.Size {
		return nil, nil, fmt.Errorf("bootstrap: connect: %w: rank %d of %d", ErrInvalid, env.Rank, env.Size)
	}
	_, port, err := net.SplitHostPort(env.Store)
	if err != nil {
		return nil, nil, fmt.Errorf("bootstrap: connect: %w: store address %q: %v", ErrInvalid, env.Store, err)
	}
	if opts.Server.Token == "" {
		opts.Server.Token = env.Token
	}
	if opts.Client.Token == "" {
		opts.Client.Token = env.Token
	}
	addr := env.Store
	var srv *Server
	if env.Rank == 0 && !env.External && !opts.External {
		la := opts.ListenAddr
		if la == "" {
			la = net.JoinHostPort("", port)
		}
		srv, err = NewServer(la, opts.Server)
		if err != nil {
			return nil, nil, fmt.Errorf("bootstrap: connect: rank 0 serves the store: %w", err)
		}
		addr = dialable(srv.Addr())
	}
	c, err := Dial(ctx, addr, opts.Client)
	if err == nil {
		err = c.Will(ctx, DiedKey, []byte(strconv.Itoa(env.Rank)))
	}
	if err != nil {
		c.Close()
		srv.Close()
		return nil, nil, fmt.Errorf("bootstrap: connect rank %d of %d: %w", env.Rank, env.Size, err)
	}
	return c, srv, nil
}

// DiedKey is the key whose value names the first rank whose process died: every
// rank that Connect joins leaves a will that sets it to the rank's number, which
// its Close withdraws. Whoever waits for the key (coll's TCPOOB teams) learns of a
// death within the time the store takes to see the connection drop.
const DiedKey = "ibcoll/died"

// dialable turns a listening address into one to dial: a wildcard host
// (Go listens dual-stack there) becomes IPv4 loopback.
func dialable(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	if ta.IP == nil || ta.IP.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", fmt.Sprint(ta.Port))
	}
	return ta.String()
}
