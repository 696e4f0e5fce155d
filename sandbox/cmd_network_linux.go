package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/netpolicy"
)

// SetNetworkPolicy replaces the network rules of a running limited
// sandbox; new connections follow them at once, open ones are kept.
// Switching to mode none denies every new connection. Switching to or
// from host, or to limited for a sandbox started without it, fails with
// ErrUnsupported: those are chosen when the sandbox is created.
//
// The header transforms among p's secrets (netpolicy.Secret with Header:
// E2B's network rules) are rules like the others and replace the
// sandbox's: none in p removes them, a new value rotates a credential.
// They put nothing inside the sandbox, so they can change at run time,
// provided the sandbox trusts the proxy's CA from its start (it was
// given a secret or an HTTP rule then; else ErrUnsupported). The
// sandbox's secrets that are variables (placeholders in its
// environment) are kept whatever p says, and p may not give any: their
// placeholders are already in the environment of what runs.
func (c *Cmd) SetNetworkPolicy(ctx context.Context, p NetworkPolicy) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	r, sb := c.run, c.sb
	c.mu.Unlock()
	if sb != nil {
		return sb.SetNetworkPolicy(ctx, p)
	}
	if r == nil {
		return errors.New("sandbox: not started")
	}
	_, compiled, err := r.prepareNetworkPolicy(p)
	if err != nil {
		return err
	}
	r.proxy.SetPolicy(compiled)
	return nil
}

// prepareNetworkPolicy checks p (see Cmd.SetNetworkPolicy) and compiles
// what the proxy is to enforce, changing nothing: it returns p as the
// sandbox is to report it (with its variables among its secrets) and the
// compiled policy for r.proxy.SetPolicy.
func (r *running) prepareNetworkPolicy(p NetworkPolicy) (NetworkPolicy, *netpolicy.Compiled, error) {
	if r.proxy == nil || p.Mode == netpolicy.Host {
		return p, nil, fmt.Errorf("%w: the network mode (none, limited or host) is chosen when the sandbox starts; only a limited sandbox's rules can change", ErrUnsupported)
	}
	var headers []netpolicy.Secret
	for _, s := range p.Secrets {
		if s.Header == "" {
			return p, nil, fmt.Errorf("%w: secret %s: secrets that are variables are given when the sandbox starts (their placeholders are in its environment from then on); only header transforms change at run time", ErrUnsupported, s.Name)
		}
		headers = append(headers, s)
	}
	// The variables are kept, with their placeholders and values.
	p.Secrets = slices.DeleteFunc(r.proxy.Policy().Secrets(), func(s netpolicy.Secret) bool { return s.Header != "" })
	p.Secrets = append(p.Secrets, headers...)
	enforced := p
	if p.Mode == netpolicy.None || p.Mode == "" {
		// No allowed host: everything denied (the policy as given, mode
		// none, is what the sandbox reports).
		enforced = NetworkPolicy{Mode: netpolicy.Limited, Secrets: p.Secrets}
	}
	compiled, err := netpolicy.Compile(enforced)
	if err != nil {
		return p, nil, invalid(fmt.Errorf("network: %w", err))
	}
	if compiled.NeedsInterception() && r.plan.ca == nil {
		return p, nil, fmt.Errorf("%w: header transforms and HTTP rules need the proxy to intercept TLS, which the sandbox must trust from its start: give a secret or an HTTP rule when it is created", ErrUnsupported)
	}
	return p, compiled, nil
}

// maxCatchPorts caps the TCP ports a limited sandbox catches (one
// listening socket each, in the sandbox and on the host).
const maxCatchPorts = 256

// catchPorts returns the ports policy needs caught, but for the proxy's
// own ports inside (3128, 1080), which its listeners hold on 127.0.0.1:
// a rule on one of those is reached through the proxy variables only.
func catchPorts(policy *netpolicy.Compiled) []int {
	return slices.DeleteFunc(policy.CatchPorts(), func(p int) bool {
		return p == namespaces.ProxyHTTPPort || p == namespaces.ProxySOCKSPort
	})
}

// portList renders ports as "22, 80, 443" ("none" when empty).
func portList(ports []int) string {
	if len(ports) == 0 {
		return "none"
	}
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ", ")
}

// catchNewPorts asks the init of a long-lived limited sandbox to catch the
// ports compiled needs that it does not catch yet, and serves them. The
// caller holds no lock that the init's answer needs.
func (r *running) catchNewPorts(compiled *netpolicy.Compiled) error {
	if r.proxy == nil || !r.plan.cfg.Transparent || r.init == nil {
		return nil
	}
	r.catchMu.Lock()
	defer r.catchMu.Unlock()
	var missing []int
	for _, port := range catchPorts(compiled) {
		if !slices.Contains(r.plan.cfg.CatchPorts, port) {
			missing = append(missing, port)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if len(r.plan.cfg.CatchPorts)+len(missing) > maxCatchPorts {
		return invalid(fmt.Errorf("network: the allowed hosts would need %d ports caught; at most %d can be", len(r.plan.cfg.CatchPorts)+len(missing), maxCatchPorts))
	}
	fds, err := r.init.Listen("listen-"+randomID(), missing)
	if err != nil {
		return fmt.Errorf("catching ports %s: %w", portList(missing), err)
	}
	defer closeFDs(fds)
	for _, fd := range fds {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return os.NewSyscallError("fcntl(F_DUPFD_CLOEXEC)", err)
		}
		f := os.NewFile(uintptr(fd), "tent-catch-listener")
		l, err := net.FileListener(f)
		f.Close()
		if err != nil {
			unix.Close(d)
			return fmt.Errorf("catch listener: %w", err)
		}
		r.proxyFDs = append(r.proxyFDs, d)
		go func() { _ = r.proxy.ServeTransparent(l) }()
	}
	r.plan.cfg.CatchPorts = append(slices.Clip(r.plan.cfg.CatchPorts), missing...)
	return nil
}

// startProxy serves the sandbox's proxy sockets with a host-side proxy:
// the HTTP and SOCKS5 listeners, then (a transparent sandbox) the stub
// DNS's UDP socket and the catching listeners. It closes fds.
func startProxy(cfg netpolicy.ProxyConfig, policy *netpolicy.Compiled, fds []int, audit io.Writer, resolver netpolicy.Resolver, log *slog.Logger) (*netpolicy.Proxy, error) {
	// Three is a transparent sandbox whose rules catch no port yet (an
	// empty allowlist): the stub DNS alone.
	if len(fds) < 2 {
		closeFDs(fds)
		return nil, fmt.Errorf("proxy: %d sockets", len(fds))
	}
	var dns *net.UDPConn
	if len(fds) > 2 {
		f := os.NewFile(uintptr(fds[2]), "tent-dns")
		pc, err := net.FilePacketConn(f)
		f.Close()
		if err != nil {
			closeFDs(append(fds[:2:2], fds[3:]...))
			return nil, fmt.Errorf("stub DNS socket: %w", err)
		}
		dns = pc.(*net.UDPConn)
		fds = append(fds[:2:2], fds[3:]...)
	}
	var ls []net.Listener
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "tent-proxy-listener")
		l, err := net.FileListener(f)
		f.Close()
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			closeFDs(fds[i+1:])
			if dns != nil {
				dns.Close()
			}
			return nil, fmt.Errorf("proxy listener: %w", err)
		}
		ls = append(ls, l)
	}
	cfg.Policy, cfg.Resolver, cfg.Audit, cfg.Logger = policy, resolver, audit, log
	proxy := netpolicy.NewProxy(cfg)
	go func() { _ = proxy.ServeHTTP(ls[0]) }()
	go func() { _ = proxy.ServeSOCKS5(ls[1]) }()
	if dns != nil {
		go func() { _ = proxy.ServeDNS(dns) }()
	}
	for _, l := range ls[2:] {
		go func() { _ = proxy.ServeTransparent(l) }()
	}
	return proxy, nil
}
