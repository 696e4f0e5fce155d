package netpolicy

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
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
type AuditRecord struct {
	Time    time.Time `json:"time"`
	Sandbox string    `json:"sandbox"`
	Event   string    `json:"event"`          // "decision" or "close"
	Proto   string    `json:"proto"`          // "http", "connect" or "socks5"
	Host    string    `json:"host"`           // as the program asked for it
	Port    int       `json:"port"`           // destination port
	Addr    string    `json:"addr,omitempty"` // the resolved address connected to (or refused)
	// Verdict is "allow", "deny" (the policy refused) or "error" (allowed,
	// but resolving or connecting failed; Reason says how).
	Verdict   string `json:"verdict"`
	Rule      string `json:"rule,omitempty"` // the pattern that decided
	Reason    string `json:"reason,omitempty"`
	BytesUp   int64  `json:"bytes_up,omitempty"`   // close: program to destination
	BytesDown int64  `json:"bytes_down,omitempty"` // close: destination to program
}

// Audit event and verdict values.
const (
	EventDecision = "decision"
	EventClose    = "close"
	VerdictAllow  = "allow"
	VerdictDeny   = "deny"
	VerdictError  = "error"
)

// auditLog serializes records to one writer, one Write per line.
type auditLog struct {
	mu     sync.Mutex
	w      io.Writer
	log    *slog.Logger
	failed bool // a write failed; reported once
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
	if _, err := a.w.Write(line); err != nil && !a.failed {
		a.failed = true
		a.log.Warn("netpolicy: failed to write the audit log; further failures are not reported", "err", err)
	}
}

// Denial counts the refusals of one destination for one reason.
type Denial struct {
	Host   string // as the program asked for it, normalized (lower case, no trailing dot)
	Port   int
	Reason string // a Reason constant
	Count  int
}

type denialKey struct {
	host   string
	port   int
	reason string
}

// denials accumulates refusals in order of first occurrence.
type denials struct {
	mu    sync.Mutex
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
	if d.index == nil {
		d.index = make(map[denialKey]int)
	}
	d.index[k] = len(d.list)
	d.list = append(d.list, Denial{Host: host, Port: port, Reason: reason, Count: 1})
}

func (d *denials) snapshot() []Denial {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Denial(nil), d.list...)
}

// maxSummary is how many destinations [Summary] names before "and N more".
const maxSummary = 5

// Summary renders denials as one line for a person or an agent, e.g.
// "blocked 3 connections: evil.example:443 (not allowed, 2 times),
// 10.0.0.1:80 (private address)". It returns "" when d records none.
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
		b.WriteString(net.JoinHostPort(x.Host, strconv.Itoa(x.Port)))
		b.WriteString(" (")
		b.WriteString(x.Reason)
		if x.Count > 1 {
			fmt.Fprintf(&b, ", %d times", x.Count)
		}
		b.WriteString(")")
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
