package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"

	"github.com/tent-sandbox/tent/netpolicy"
)

// SetNetworkPolicy replaces the network rules of a running limited
// sandbox; new connections follow them at once, open ones are kept.
// Switching to mode none denies every new connection. Switching to or
// from host, or to limited for a sandbox started without it, fails with
// ErrUnsupported: those are chosen when the sandbox is created.
func (c *Cmd) SetNetworkPolicy(ctx context.Context, p NetworkPolicy) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	r := c.run
	c.mu.Unlock()
	if r == nil {
		return errors.New("sandbox: not started")
	}
	return r.setNetworkPolicy(p)
}

func (r *running) setNetworkPolicy(p NetworkPolicy) error {
	if r.proxy == nil || p.Mode == netpolicy.Host {
		return fmt.Errorf("%w: the network mode (none, limited or host) is chosen when the sandbox starts; only a limited sandbox's rules can change", ErrUnsupported)
	}
	if p.Mode == netpolicy.None || p.Mode == "" {
		p = NetworkPolicy{Mode: netpolicy.Limited} // no allowed host: everything denied
	}
	compiled, err := netpolicy.Compile(p)
	if err != nil {
		return invalid(fmt.Errorf("network: %w", err))
	}
	r.proxy.SetPolicy(compiled)
	return nil
}

// startProxy serves the sandbox's proxy listeners (HTTP, SOCKS5) with a
// host-side proxy.
func startProxy(cfg netpolicy.ProxyConfig, policy *netpolicy.Compiled, fds []int, audit io.Writer, resolver netpolicy.Resolver, log *slog.Logger) (*netpolicy.Proxy, error) {
	var ls []net.Listener
	for _, fd := range fds {
		f := os.NewFile(uintptr(fd), "tent-proxy-listener")
		l, err := net.FileListener(f)
		f.Close()
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return nil, fmt.Errorf("proxy listener: %w", err)
		}
		ls = append(ls, l)
	}
	cfg.Policy, cfg.Resolver, cfg.Audit, cfg.Logger = policy, resolver, audit, log
	proxy := netpolicy.NewProxy(cfg)
	go func() { _ = proxy.ServeHTTP(ls[0]) }()
	go func() { _ = proxy.ServeSOCKS5(ls[1]) }()
	return proxy, nil
}
