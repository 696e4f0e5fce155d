package netpolicy

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsTTL is the lifetime of the stub DNS's answers. A fake address never
// changes meaning, so caching it is harmless: a rule removed meanwhile is
// enforced when the program connects.
const dnsTTL = 60

// ServeDNS answers DNS queries (UDP) on c, the stub DNS of a transparent
// sandbox, until c is closed (by the caller or by [Proxy.Close]), then
// returns nil. In tent, c is bound to port 53 of every address of the
// sandbox's network namespace, so whatever server a program's resolver
// is configured with (resolv.conf, or a built-in one), it is this one.
//
// A query for a name the policy in force allows (see [Compiled.CheckDNS])
// is answered at once, without any lookup: type A with the name's fake
// address (see [FakeNet]), valid for 60 s, which the transparent
// listeners map back to the name ([Proxy.ServeTransparent]); AAAA and
// every other type with no record (NOERROR, no answer), so clients use
// IPv4. A query for any other name gets NXDOMAIN at once, is audited
// (proto "dns", port 0) and counted in [Proxy.Denied] (but for reverse
// lookups, under .arpa, and names of one label, such as the sandbox's own
// host name, which programs look up on their own) — unless the host's
// hosts file ([ProxyConfig.HostsFile]) lists the name with IPv4
// addresses an IP or CIDR allow rule covers: then those addresses are
// the answer (the host's resolver and a program inside reading that file
// find the same). Names are never resolved otherwise, nor forwarded
// anywhere: nothing a program puts in a name leaves the sandbox through
// DNS. Queries that are not standard
// queries of class IN with one question get NOTIMP, FORMERR or REFUSED;
// past [ProxyConfig.MaxNames] distinct names, REFUSED. c must be a UDP
// socket with IP_PKTINFO (and IPV6_RECVPKTINFO if IPv6) set, so that each
// answer leaves from the address its query was sent to. Queries are
// answered one at a time: nothing in an answer waits.
func (p *Proxy) ServeDNS(c *net.UDPConn) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrProxyClosed
	}
	p.dnsConns = append(p.dnsConns, c)
	p.wg.Add(1)
	p.mu.Unlock()
	defer p.wg.Done()
	buf := make([]byte, 1500)
	oob := make([]byte, 256)
	var out []byte
	for {
		n, oobn, _, from, err := c.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if p.isClosed() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) {
				continue
			}
			select {
			case <-p.ctx.Done():
				return nil
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		out = p.answerDNS(out[:0], buf[:n])
		if out == nil {
			continue
		}
		_, _, _ = c.WriteMsgUDPAddrPort(out, replySource(oob[:oobn]), from)
	}
}

// answerDNS appends to out the answer to the query q, or returns nil for
// a message that deserves none (an answer, or no header at all).
func (p *Proxy) answerDNS(out, q []byte) []byte {
	var parser dnsmessage.Parser
	h, err := parser.Start(q)
	if err != nil || h.Response {
		return nil
	}
	reply := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	build := func(rc dnsmessage.RCode, question *dnsmessage.Question, addrs ...netip.Addr) []byte {
		reply.RCode = rc
		b := dnsmessage.NewBuilder(out, reply)
		b.EnableCompression()
		if question != nil {
			_ = b.StartQuestions()
			_ = b.Question(*question)
			if len(addrs) > 0 {
				_ = b.StartAnswers()
			}
			for _, a := range addrs {
				_ = b.AResource(dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: dnsTTL},
					dnsmessage.AResource{A: a.As4()})
			}
		}
		msg, err := b.Finish()
		if err != nil {
			return nil
		}
		return msg
	}
	if h.OpCode != 0 {
		return build(dnsmessage.RCodeNotImplemented, nil)
	}
	qs, err := parser.AllQuestions()
	if err != nil || len(qs) != 1 {
		return build(dnsmessage.RCodeFormatError, nil)
	}
	question := qs[0]
	if question.Class != dnsmessage.ClassINET {
		return build(dnsmessage.RCodeRefused, &question)
	}
	name := normalizeHost(question.Name.String())
	pol := p.policy.Load()
	d := pol.CheckDNS(name)
	rec := AuditRecord{Event: EventDecision, Proto: "dns", Host: recordHost(name), Rule: d.Rule, Reason: d.Reason}
	if !d.Allowed && d.Reason == ReasonNotAllowed {
		// No name rule: the host's hosts file may list the name with an
		// address an IP or CIDR rule allows, which a program inside
		// reading the same file reaches; one asking DNS gets it too.
		if addrs, ld := p.listedAddrs(pol, name); ld.Allowed {
			rec.Verdict, rec.Rule, rec.Reason, rec.Addr = VerdictAllow, ld.Rule, ld.Reason, addrs[0].String()
			p.record(rec)
			if question.Type != dnsmessage.TypeA {
				return build(dnsmessage.RCodeSuccess, &question)
			}
			return build(dnsmessage.RCodeSuccess, &question, addrs...)
		}
	}
	if !d.Allowed {
		if d.Reason == "" {
			d.Reason = ReasonNotAllowed
		}
		rec.Verdict, rec.Reason = VerdictDeny, d.Reason
		p.record(rec)
		// Reverse lookups, and single labels (a program resolving the
		// sandbox's own host name), are not what anyone means to reach:
		// audited, but kept out of the denials and their summary.
		if strings.Contains(name, ".") && !strings.HasSuffix(name, ".arpa") {
			p.denials.add(rec.Host, 0, d.Reason)
		}
		return build(dnsmessage.RCodeNameError, &question)
	}
	a, ok := p.fake.lookup(name)
	if !ok {
		rec.Verdict, rec.Reason = VerdictError, "too many names"
		p.record(rec)
		return build(dnsmessage.RCodeRefused, &question)
	}
	if question.Type != dnsmessage.TypeA {
		return build(dnsmessage.RCodeSuccess, &question)
	}
	rec.Verdict, rec.Addr = VerdictAllow, a.String()
	p.record(rec)
	return build(dnsmessage.RCodeSuccess, &question, a)
}

// maxListedAnswers bounds the addresses of one answer from the hosts
// file (a UDP answer is never truncated: 16 A records fit in 512 bytes).
const maxListedAnswers = 16

// listedAddrs returns the IPv4 addresses the host's hosts file lists for
// name that pol allows by an IP or CIDR rule (see
// [Compiled.checkListedAddr]), and the decision of the first; none, and a
// refusal, when there are none.
func (p *Proxy) listedAddrs(pol *Compiled, name string) ([]netip.Addr, Decision) {
	var ok []netip.Addr
	var first Decision
	for _, a := range p.hosts.lookup(name) {
		if !a.Is4() || FakeNet.Contains(a) || len(ok) == maxListedAnswers || slices.Contains(ok, a) {
			continue
		}
		if d := pol.checkListedAddr(a); d.Allowed {
			if len(ok) == 0 {
				first = d
			}
			ok = append(ok, a)
		}
	}
	if len(ok) == 0 {
		return nil, Decision{Reason: ReasonNotAllowed}
	}
	return ok, first
}
