package netpolicy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"time"
)

// dialTimeout bounds resolving plus connecting for one destination.
const dialTimeout = 10 * time.Second

// refusal is a destination the policy refused.
type refusal struct {
	host string
	port int
	d    Decision
}

func (e *refusal) Error() string {
	return fmt.Sprintf("%s: %s", net.JoinHostPort(e.host, strconv.Itoa(e.port)), e.d.Reason)
}

// failure is an allowed destination that could not be resolved or reached.
type failure struct {
	op   string // "resolve" or "connect"
	dest string
	err  error
}

func (e *failure) Error() string { return fmt.Sprintf("failed to %s %s: %v", e.op, e.dest, e.err) }
func (e *failure) Unwrap() error { return e.err }

// upstream is a connection to a checked destination.
type upstream struct {
	net.Conn
	addr netip.Addr  // the checked address c is connected to
	rec  AuditRecord // the allow decision, reused for the close record
	tls  *tls.Conn   // over Conn, for an intercepted host (upstreamTLS)
}

// stream is what requests are written to and responses read from: the
// TLS connection over u for an intercepted host, else u itself.
func (u *upstream) stream() net.Conn {
	if u.tls != nil {
		return u.tls
	}
	return u.Conn
}

// open decides on host:port, resolves allowed names, checks every address
// and connects to the first one that passed. It audits the outcome and
// returns a *refusal or a *failure on error.
//
// A name longer than DNS allows is refused before anything else; records
// keep host as [storedHost] has it.
func (p *Proxy) open(ctx context.Context, proto, host string, port int) (*upstream, error) {
	pol := p.policy.Load()
	rec := AuditRecord{Proto: proto, Host: recordHost(host), Port: port}
	var d Decision
	if len(host) > maxNameLen+2 { // even without brackets or a final dot
		d = Decision{Reason: ReasonInvalidHost}
	} else {
		d = pol.CheckName(host, port)
	}
	if !d.Allowed {
		return nil, p.refuse(rec, d)
	}
	name := normalizeHost(host) // allowed, so a valid name or IP literal: rec.Host
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	stop := context.AfterFunc(p.ctx, cancel)
	defer stop()
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(name); err == nil {
		addrs = []netip.Addr{ip.Unmap()}
	} else {
		addrs, err = p.resolver.LookupNetIP(ctx, "ip", name)
		if err == nil && len(addrs) == 0 {
			err = errors.New("no addresses")
		}
		if err != nil {
			return nil, p.fail(rec, d, "resolve", err)
		}
	}
	var ok []netip.Addr
	var refused Decision
	for _, a := range addrs {
		a = a.WithZone("").Unmap()
		ad := pol.CheckAddr(a, port)
		if ad.Allowed {
			ok = append(ok, a)
		} else if refused.Reason == "" {
			refused, rec.Addr = ad, a.String()
		}
	}
	if len(ok) == 0 {
		return nil, p.refuse(rec, refused)
	}
	var err error
	for _, a := range ok {
		rec.Addr = a.String()
		var c net.Conn
		c, err = p.dial(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			if !p.track(c) {
				return nil, p.fail(rec, d, "connect", ErrProxyClosed)
			}
			rec.Event, rec.Verdict, rec.Rule, rec.Reason = EventDecision, VerdictAllow, d.Rule, d.Reason
			p.record(rec)
			return &upstream{Conn: c, addr: a, rec: rec}, nil
		}
	}
	return nil, p.fail(rec, d, "connect", err)
}

// recheck applies the current policy to a kept-alive upstream connection
// for a new request to the same host and port, and audits the decision.
func (p *Proxy) recheck(u *upstream, proto, host string, port int) error {
	pol := p.policy.Load()
	rec := AuditRecord{Proto: proto, Host: recordHost(host), Port: port}
	d := pol.CheckName(host, port)
	if !d.Allowed {
		return p.refuse(rec, d)
	}
	rec.Addr = u.rec.Addr
	if ad := pol.CheckAddr(u.addr, port); !ad.Allowed {
		return p.refuse(rec, ad)
	}
	rec.Event, rec.Verdict, rec.Rule, rec.Reason = EventDecision, VerdictAllow, d.Rule, d.Reason
	p.record(rec)
	return nil
}

// finish closes u and writes its close record.
func (p *Proxy) finish(u *upstream, up, down int64) {
	p.untrack(u.Conn)
	rec := u.rec
	rec.Event, rec.BytesUp, rec.BytesDown = EventClose, up, down
	p.record(rec)
}

func (p *Proxy) refuse(rec AuditRecord, d Decision) error {
	if d.Reason == "" {
		d.Reason = ReasonPrivate
	}
	rec.Event, rec.Verdict, rec.Rule, rec.Reason = EventDecision, VerdictDeny, d.Rule, d.Reason
	p.record(rec)
	p.denials.add(rec.Host, rec.Port, d.Reason)
	return &refusal{host: rec.Host, port: rec.Port, d: d}
}

func (p *Proxy) fail(rec AuditRecord, d Decision, op string, err error) error {
	rec.Event, rec.Verdict, rec.Rule = EventDecision, VerdictError, d.Rule
	rec.Reason = fmt.Sprintf("failed to %s: %v", op, err)
	p.record(rec)
	return &failure{op: op, dest: net.JoinHostPort(rec.Host, strconv.Itoa(rec.Port)), err: err}
}

// record writes rec to the audit log (and tent's log, at debug level).
// Its texts never hold a secret's value in any form the scrubber knows:
// records keep what the sandbox sent, and what a host said is scrubbed
// where it is quoted; this is the last net for both.
func (p *Proxy) record(rec AuditRecord) {
	rec.Time, rec.Sandbox = time.Now().UTC(), p.id
	if all := allPairs(p.resolve(p.policy.Load())); len(all) > 0 {
		rec.Path, rec.Reason = scrubString(rec.Path, all), scrubString(rec.Reason, all)
	}
	if r := p.retired.Load(); r != nil {
		rec.Path, rec.Reason = scrubString(rec.Path, r.all), scrubString(rec.Reason, r.all)
	}
	p.audit.write(rec)
	if !p.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	p.log.Debug("netpolicy: "+rec.Event, "sandbox", p.id, "proto", rec.Proto, "host", rec.Host,
		"port", rec.Port, "addr", rec.Addr, "verdict", rec.Verdict, "rule", rec.Rule, "reason", rec.Reason,
		"bytes_up", rec.BytesUp, "bytes_down", rec.BytesDown)
}
