package netpolicy

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// AuditRecord is one line of the audit log, a JSON object:
//
//	{"time":"2025-01-02T03:04:05.123456789Z","sandbox":"a1b2","event":"decision","proto":"connect",
//	 "host":"example.com","port":443,"addr":"93.184.215.14","verdict":"allow","rule":"example.com","reason":"allowed by rule"}
//	{"time":"...","sandbox":"a1b2","event":"close","proto":"connect","host":"example.com","port":443,
//	 "addr":"93.184.215.14","verdict":"allow","rule":"example.com","reason":"allowed by rule","bytes_up":517,"bytes_down":5120}
//
// Every destination a sandboxed program asks for yields one "decision"
// record; every upstream connection that was opened yields one "close"
// record with the bytes it carried. Plain HTTP forwarding writes a decision
// per request and a close record per upstream connection (which several
// requests to the same host may share).
//
// The proxy's limits (see [ProxyConfig]) write "limit" records, which
// name no destination:
//
//	{"time":"...","sandbox":"a1b2","event":"limit","proto":"http","host":"","port":0,"verdict":"deny","reason":"too many connections","limit":256}
//	{"time":"...","sandbox":"a1b2","event":"limit","host":"","port":0,"verdict":"deny","reason":"too many connections","limit":256,"count":1744}
//	{"time":"...","sandbox":"a1b2","event":"limit","host":"","port":0,"verdict":"dropped","reason":"audit log budget exhausted","limit":67108864}
//	{"time":"...","sandbox":"a1b2","event":"limit","host":"","port":0,"verdict":"dropped","reason":"audit log budget exhausted","limit":67108864,"count":5210}
//
// The first of each pair is written when the limit is first reached, the
// second (with the count of connections refused, or of records dropped)
// by [Proxy.Close].
type AuditRecord struct {
	Time    time.Time `json:"time"`
	Sandbox string    `json:"sandbox"`
	Event   string    `json:"event"`           // "decision", "close" or "limit"
	Proto   string    `json:"proto,omitempty"` // "http", "connect" or "socks5"
	// Host is the destination as the program asked for it, normalized
	// (lower case, no trailing dot, no brackets). A name longer than 253
	// bytes, or with bytes no host name has, is kept as [Summary] shows it:
	// those bytes written as \xNN, cut to 253 bytes ending in "...".
	Host string `json:"host"`
	Port int    `json:"port"`           // destination port
	Addr string `json:"addr,omitempty"` // the resolved address connected to (or refused)
	// Verdict is "allow", "deny" (the policy, or a limit, refused) or
	// "error" (allowed, but resolving or connecting failed; Reason says
	// how); "dropped" in the records of the audit budget.
	Verdict   string `json:"verdict"`
	Rule      string `json:"rule,omitempty"` // the pattern that decided
	Reason    string `json:"reason,omitempty"`
	BytesUp   int64  `json:"bytes_up,omitempty"`   // close: program to destination
	BytesDown int64  `json:"bytes_down,omitempty"` // close: destination to program
	Limit     int64  `json:"limit,omitempty"`      // limit: its configured value
	Count     int64  `json:"count,omitempty"`      // limit, at Close: connections refused or records dropped
	// Method and Path describe one request of event "request": a request
	// on an intercepted connection (proto "https"), or a plain HTTP one
	// to a host with HTTP rules. Path is without the query, escaped, at
	// most 512 bytes.
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	// Secrets names the secrets whose values the proxy put into the
	// request; Kept those whose placeholders it left as they were,
	// because the host is not one of theirs (or the request was in clear
	// text). Values never appear in records.
	Secrets []string `json:"secrets,omitempty"`
	Kept    []string `json:"placeholders_kept,omitempty"`
}

// Audit event and verdict values.
const (
	EventDecision  = "decision"
	EventClose     = "close"
	EventLimit     = "limit" // a limit of the proxy was reached (see AuditRecord)
	VerdictAllow   = "allow"
	VerdictDeny    = "deny"
	VerdictError   = "error"
	VerdictDropped = "dropped" // records of the audit budget
)

// auditLog serializes records to one writer, one Write per line, within
// a byte budget.
type auditLog struct {
	mu      sync.Mutex
	w       io.Writer
	log     *slog.Logger
	sandbox string
	budget  int64 // bytes in all, including reserve; math.MaxInt64: none
	reserve int64 // room kept for the two budget records
	used    int64
	dropped int64 // records not written since the budget ran out
	full    bool  // the budget ran out (and the first budget record is written)
	closed  bool  // the last record is written: drop everything
	failed  bool  // a write failed; reported once
}

func (a *auditLog) init(w io.Writer, log *slog.Logger, sandbox string, budget int64) {
	a.w, a.log, a.sandbox, a.budget = w, log, sandbox, budget
	// The longest the budget records can be: a time with all nine
	// decimals and the largest count.
	longest := a.budgetRecord(time.Date(2000, 1, 1, 0, 0, 0, 123456789, time.UTC), math.MaxInt64)
	a.reserve = 2 * int64(len(longest))
	a.budget = max(a.budget, a.reserve)
}

// budgetRecord is the record of the exhausted budget: the first one
// (count 0) or the last one, with the count of records dropped.
func (a *auditLog) budgetRecord(t time.Time, count int64) []byte {
	line, _ := json.Marshal(AuditRecord{Time: t, Sandbox: a.sandbox, Event: EventLimit, Verdict: VerdictDropped,
		Reason: ReasonAuditBudget, Limit: a.budget, Count: count})
	return append(line, '\n')
}

func (a *auditLog) write(r AuditRecord) {
	if a.w == nil {
		return
	}
	line, err := json.Marshal(r)
	if err != nil {
		return // cannot happen: every field marshals
	}
	line = append(line, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.closed:
		return
	case !a.full && int64(len(line)) <= a.budget-a.reserve-a.used:
		a.out(line)
	case !a.full:
		a.full = true
		a.out(a.budgetRecord(r.Time, 0))
		a.log.Warn("netpolicy: the audit log reached its budget; further records are dropped and counted",
			"sandbox", a.sandbox, "budget", a.budget)
		fallthrough
	default:
		a.dropped++
	}
}

// close writes the last budget record if records were dropped; nothing is
// written after it.
func (a *auditLog) close(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.w != nil && !a.closed && a.dropped > 0 {
		a.out(a.budgetRecord(now, a.dropped))
	}
	a.closed = true
}

// out writes line; a.mu is held.
func (a *auditLog) out(line []byte) {
	a.used += int64(len(line))
	if _, err := a.w.Write(line); err != nil && !a.failed {
		a.failed = true
		a.log.Warn("netpolicy: failed to write the audit log; further failures are not reported", "err", err)
	}
}

// Denial counts the refusals of one destination for one reason.
//
// An entry with an empty Host (and Port 0) stands for more than one
// destination: with [ReasonTooManyConns] it counts the client connections
// refused over [ProxyConfig.MaxConns] (before any destination was read);
// with any other reason, the refusals for that reason of destinations
// beyond the first [ProxyConfig.MaxDenials].
type Denial struct {
	// Host is as the program asked for it, normalized (lower case, no
	// trailing dot), and cut as in [AuditRecord.Host].
	Host string
	// Port is the destination port, 0 for a name the stub DNS of a
	// transparent sandbox refused (see [Proxy.ServeDNS]).
	Port   int
	Reason string // a Reason constant
	Count  int
}

type denialKey struct {
	host   string
	port   int
	reason string
}

// denials accumulates refusals in order of first occurrence: at most max
// destinations, then one entry per reason (host "") for the rest. Reasons
// are the package's constants, so the list has at most max+16 entries.
type denials struct {
	mu    sync.Mutex
	max   int64 // destinations kept
	dests int64 // destinations kept so far
	index map[denialKey]int
	list  []Denial
}

func (d *denials) add(host string, port int, reason string) {
	k := denialKey{host, port, reason}
	d.mu.Lock()
	defer d.mu.Unlock()
	if i, ok := d.index[k]; ok {
		d.list[i].Count++
		return
	}
	if host != "" {
		if d.dests >= d.max {
			k = denialKey{"", 0, reason}
			if i, ok := d.index[k]; ok {
				d.list[i].Count++
				return
			}
		} else {
			d.dests++
		}
	}
	if d.index == nil {
		d.index = make(map[denialKey]int)
	}
	d.index[k] = len(d.list)
	d.list = append(d.list, Denial{Host: k.host, Port: k.port, Reason: reason, Count: 1})
}

func (d *denials) snapshot() []Denial {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Denial(nil), d.list...)
}

// maxSummary is how many destinations [Summary] names before "and N more".
const maxSummary = 5

// maxSummaryReason is the longest reason Summary shows.
const maxSummaryReason = 64

// Summary renders denials as one line for a person or an agent, e.g.
// "blocked 3 connections: evil.example:443 (not allowed, 2 times),
// 10.0.0.1:80 (private address)". It returns "" when d records none.
// Entries with an empty host show as "other destinations (not allowed,
// 12 times)" or "too many connections (40 refused)" (see [Denial]).
//
// Whatever d holds, the line is at most [MaxSummaryLen] bytes of
// printable ASCII: it names at most 5 entries, shows other bytes as \xNN,
// and cuts a host to 253 bytes and a reason to 64, each ending in "..."
// when cut.
func Summary(d []Denial) string {
	total := 0
	for _, x := range d {
		total += x.Count
	}
	if total == 0 {
		return ""
	}
	var b strings.Builder
	if total == 1 {
		b.WriteString("blocked 1 connection: ")
	} else {
		fmt.Fprintf(&b, "blocked %d connections: ", total)
	}
	shown := 0
	for _, x := range d {
		if x.Count == 0 {
			continue
		}
		if shown == maxSummary {
			fmt.Fprintf(&b, ", and %d more destinations", countNonZero(d)-shown)
			break
		}
		if shown > 0 {
			b.WriteString(", ")
		}
		shown++
		reason := clampText(x.Reason, maxSummaryReason)
		switch {
		case x.Host == "" && x.Reason == ReasonTooManyConns:
			b.WriteString(reason)
			fmt.Fprintf(&b, " (%d refused)", x.Count)
			continue
		case x.Host == "":
			b.WriteString("other destinations")
		case x.Port == 0: // a name the stub DNS refused
			b.WriteString(clampText(x.Host, maxNameLen))
		default:
			b.WriteString(net.JoinHostPort(clampText(x.Host, maxNameLen), strconv.Itoa(x.Port)))
		}
		b.WriteString(" (")
		b.WriteString(reason)
		if x.Count > 1 {
			fmt.Fprintf(&b, ", %d times", x.Count)
		}
		b.WriteString(")")
	}
	if b.Len() > MaxSummaryLen { // cannot happen: 5 entries of at most about 360 bytes
		return clampText(b.String(), MaxSummaryLen)
	}
	return b.String()
}

func countNonZero(d []Denial) int {
	n := 0
	for _, x := range d {
		if x.Count > 0 {
			n++
		}
	}
	return n
}
