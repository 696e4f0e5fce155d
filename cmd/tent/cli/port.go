package cli

import (
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/sandbox"
)

// parsePublish reads one -p value in docker's syntax:
// [HOSTIP:][HOSTPORT:]PORT[/tcp], with an IPv6 HOSTIP in brackets
// ("[::1]:8080:80"). HOSTIP defaults to 127.0.0.1 and a missing or empty
// HOSTPORT to a free port; only TCP can be published.
func parsePublish(s string) (sandbox.PortMapping, error) {
	var m sandbox.PortMapping
	v, proto, hasProto := strings.Cut(s, "/")
	if hasProto && proto != "tcp" {
		return m, fmt.Errorf("-p %q: only TCP ports can be published (/%s)", s, proto)
	}
	if strings.HasPrefix(v, "[") {
		end := strings.Index(v, "]")
		if end < 0 || len(v) == end+1 || v[end+1] != ':' {
			return m, fmt.Errorf("-p %q: want [IPV6]:HOSTPORT:PORT", s)
		}
		m.HostIP, v = v[1:end], v[end+2:]
	}
	parts := strings.Split(v, ":")
	switch {
	case len(parts) == 3 && m.HostIP == "":
		m.HostIP, parts = parts[0], parts[1:]
	case len(parts) > 2 || (len(parts) == 1 && m.HostIP != ""):
		return m, fmt.Errorf("-p %q: want [HOSTIP:]HOSTPORT:PORT", s)
	}
	if m.HostIP != "" {
		a, err := netip.ParseAddr(m.HostIP)
		if err != nil || a.Zone() != "" {
			return m, fmt.Errorf("-p %q: host address %q is not an IP address", s, m.HostIP)
		}
	}
	port := func(what, p string, zeroOK bool) (int, error) {
		if p == "" && zeroOK {
			return 0, nil
		}
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 || strings.TrimLeft(p, "0123456789") != "" {
			return 0, fmt.Errorf("-p %q: %s %q is not a port (1-65535)", s, what, p)
		}
		return n, nil
	}
	var err error
	if len(parts) == 2 {
		if m.HostPort, err = port("host port", parts[0], true); err != nil {
			return m, err
		}
		parts = parts[1:]
	}
	m.Port, err = port("port", parts[0], false)
	return m, err
}

func newPortCmd(g *Globals) *cobra.Command {
	var out outputFlags
	var publish []string
	c := &cobra.Command{
		Use:   "port ID [PORT]",
		Short: "List a sandbox's published ports (tent create -p), or publish more (-p)",
		Long: `List the ports a sandbox publishes on the host, one per line as
"PORT/tcp -> HOSTIP:HOSTPORT" (as docker port does; -o json, --format),
or with PORT, the host address of that port only.

With -p [HOSTIP:][HOSTPORT:]PORT (repeatable; docker's syntax, loopback by
default), publish more ports of the running sandbox and print them as
bound: unlike docker, tent can add a port to a sandbox that runs. They are
published until the sandbox is removed.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(c *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if len(publish) > 0 {
				if len(args) == 2 {
					return &exitError{code: exitRefused, msg: "tent port: -p publishes ports; give no PORT with it"}
				}
				return publishPorts(c, g, &out, args[0], publish)
			}
			rec, err := g.lookup(args[0])
			if err != nil {
				return err
			}
			ports := rec.Spec.Ports
			if len(args) == 2 {
				want, err := strconv.Atoi(strings.TrimSuffix(args[1], "/tcp"))
				if err != nil {
					return &exitError{code: exitRefused, msg: fmt.Sprintf("port %q: want a number", args[1])}
				}
				var sel []sandbox.PortMapping
				for _, m := range ports {
					if m.Port == want {
						sel = append(sel, m)
					}
				}
				if len(sel) == 0 {
					return &exitError{code: exitRefused, msg: fmt.Sprintf("sandbox %s publishes no port %d", rec.ID, want)}
				}
				ports = sel
			}
			if ports == nil {
				ports = []sandbox.PortMapping{}
			}
			w := c.OutOrStdout()
			return emit(&out, w, ports, ports, func() error { return writePorts(w, ports) })
		},
	}
	out.register(c.Flags())
	c.Flags().StringArrayVarP(&publish, "publish", "p", nil, "publish `[HOSTIP:][HOSTPORT:]PORT` of the running sandbox (repeatable)")
	return c
}

// publishPorts publishes each -p value on sandbox ref, all checked
// before any is published, and prints them as bound.
func publishPorts(c *cobra.Command, g *Globals, out *outputFlags, ref string, specs []string) error {
	var ms []sandbox.PortMapping
	for _, s := range specs {
		m, err := parsePublish(s)
		if err != nil {
			return &exitError{code: exitRefused, msg: err.Error()}
		}
		ms = append(ms, m)
	}
	rec, err := g.lookup(ref)
	if err != nil {
		return err
	}
	var got []sandbox.PortMapping
	for _, m := range ms {
		b, err := rec.sb.Publish(c.Context(), m)
		if err != nil {
			return err
		}
		got = append(got, b)
	}
	w := c.OutOrStdout()
	return emit(out, w, got, got, func() error { return writePorts(w, got) })
}

// writePorts prints one mapping a line, as docker port does.
func writePorts(w io.Writer, ports []sandbox.PortMapping) error {
	for _, m := range ports {
		if _, err := fmt.Fprintln(w, m.String()); err != nil {
			return err
		}
	}
	return nil
}
