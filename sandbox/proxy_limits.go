package sandbox

import (
	"time"

	"github.com/tent-sandbox/tent/netpolicy"
)

// ProxyLimits bound what a sandbox with a limited network can make its
// host-side proxy spend: the proxy runs in the process that owns the
// sandbox, outside the sandbox's cgroup, so its connections, request
// heads, denial table and audit log are capped here instead. Each field
// is the netpolicy.ProxyConfig field of the same name: zero means the
// default (256 connections, 64 KiB heads received within 30 s, 256
// distinct denied destinations, 64 MiB of audit log), a negative value
// no limit. The zero value is the defaults.
type ProxyLimits struct {
	MaxConns       int
	MaxHeaderBytes int
	HeadTimeout    time.Duration
	MaxDenials     int
	AuditBytes     int64
}

// proxyConfig is the proxy's configuration for the sandbox named id.
func (l ProxyLimits) proxyConfig(id string) netpolicy.ProxyConfig {
	return netpolicy.ProxyConfig{SandboxID: id, MaxConns: l.MaxConns, MaxHeaderBytes: l.MaxHeaderBytes,
		HeadTimeout: l.HeadTimeout, MaxDenials: l.MaxDenials, AuditBytes: l.AuditBytes}
}
