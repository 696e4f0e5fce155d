package netpolicy

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// TestAuditBudget: 1000 records into a 16 KiB budget: the log is at most
// 16 KiB, says once that it drops records and, at close, how many.
func TestAuditBudget(t *testing.T) {
	var buf syncBuffer
	var a auditLog
	const budget = 16 << 10
	a.init(&buf, discardLogger(), "sbx", budget)
	const n = 1000
	for i := range n {
		a.write(AuditRecord{Time: time.Now(), Sandbox: "sbx", Event: EventDecision, Proto: "connect",
			Host: fmt.Sprintf("h%d.example", i), Port: 443, Verdict: VerdictDeny, Reason: ReasonNotAllowed})
	}
	a.close(time.Now())
	a.write(AuditRecord{Event: EventDecision}) // after close: dropped, uncounted
	if buf.b.Len() > budget {
		t.Errorf("%d bytes, budget %d", buf.b.Len(), budget)
	}
	recs := buf.records(t)
	written := len(recs) - 2
	notice, last := recs[written], recs[written+1]
	if notice.Event != EventLimit || notice.Reason != ReasonAuditBudget || notice.Count != 0 || notice.Limit != budget {
		t.Errorf("notice %+v", notice)
	}
	if last.Event != EventLimit || last.Verdict != VerdictDropped || last.Count != int64(n-written) {
		t.Errorf("last record %+v, want %d dropped", last, n-written)
	}
	for _, r := range recs[:written] {
		if r.Event != EventDecision {
			t.Fatalf("record %+v before the notice", r)
		}
	}

	// A budget too small for the two budget records grows to fit them.
	var small syncBuffer
	var b auditLog
	b.init(&small, discardLogger(), "sbx", 1)
	b.write(AuditRecord{Event: EventDecision})
	b.close(time.Now())
	if recs := small.records(t); len(recs) != 2 || recs[1].Count != 1 || int64(small.b.Len()) > b.budget {
		t.Errorf("tiny budget: %+v in %d bytes (budget raised to %d)", recs, small.b.Len(), b.budget)
	}

	// No limit: every record is written.
	var all syncBuffer
	var u auditLog
	u.init(&all, discardLogger(), "sbx", math.MaxInt64)
	for range 100 {
		u.write(AuditRecord{Event: EventDecision})
	}
	u.close(time.Now())
	if recs := all.records(t); len(recs) != 100 {
		t.Errorf("no limit: %d records, want 100", len(recs))
	}
}

// TestDenialsBounded: 10,000 distinct destinations for two reasons fill
// MaxDenials entries, then one entry per reason counts the rest.
func TestDenialsBounded(t *testing.T) {
	d := denials{max: 4}
	for i := range 10_000 {
		reason := ReasonNotAllowed
		if i%2 == 1 {
			reason = ReasonPrivate
		}
		d.add(fmt.Sprintf("h%d.example", i), 443, reason)
	}
	d.add("h0.example", 443, ReasonNotAllowed)
	got := d.snapshot()
	want := []Denial{
		{"h0.example", 443, ReasonNotAllowed, 2}, {"h1.example", 443, ReasonPrivate, 1},
		{"h2.example", 443, ReasonNotAllowed, 1}, {"h3.example", 443, ReasonPrivate, 1},
		{"", 0, ReasonNotAllowed, 4998}, {"", 0, ReasonPrivate, 4998},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	if s := Summary(got); !strings.Contains(s, "other destinations (not allowed, 4998 times)") {
		t.Errorf("Summary: %q", s)
	}
}

// TestSummaryBounded: whatever the denials hold (hosts and reasons of a
// megabyte with control characters, the largest counts), Summary is at
// most MaxSummaryLen bytes of printable ASCII.
func TestSummaryBounded(t *testing.T) {
	huge := strings.Repeat("\x1b[31m\xff", 200_000)
	var d []Denial
	for i := range 8 {
		d = append(d, Denial{Host: huge, Port: 65535, Reason: huge, Count: math.MaxInt / 16})
		if i == 0 {
			d = append(d, Denial{Reason: huge, Count: math.MaxInt / 16})
		}
	}
	s := Summary(d)
	if len(s) > MaxSummaryLen {
		t.Errorf("%d bytes, bound %d", len(s), MaxSummaryLen)
	}
	for i := 0; i < len(s); i++ {
		if !printable(s[i]) {
			t.Fatalf("byte %#x at %d", s[i], i)
		}
	}
	t.Logf("%d bytes: %.200s...", len(s), s)
}

// TestStoredHost: names a rule can match are kept as they are; others are
// escaped and cut to 253 bytes, and Summary leaves the result alone.
func TestStoredHost(t *testing.T) {
	long := strings.Repeat("a", 300)
	for _, c := range []struct{ in, want string }{
		{"example.com", "example.com"},
		{"2001:db8::1", "2001:db8::1"},
		{long[:253], long[:253]},
		{long[:254], long[:250] + "..."},
		{"a\x1b[31mb c", `a\x1b\x5b31mb\x20c`},
		{"fe80::1%eth0", `fe80::1\x25eth0`},
		{strings.Repeat("\n", 100), strings.Repeat(`\x0a`, 62) + "..."},
	} {
		got := storedHost(c.in)
		if got != c.want {
			t.Errorf("storedHost(%q) = %q, want %q", c.in, got, c.want)
		}
		if len(got) > maxNameLen {
			t.Errorf("storedHost(%q): %d bytes", c.in, len(got))
		}
		if clampText(got, maxNameLen) != got {
			t.Errorf("clampText changes %q", got)
		}
	}
	if got := recordHost("[" + long + "]"); got != `\x5b`+long[:246]+"..." {
		t.Errorf("recordHost: %q", got)
	}
	if got := recordHost("Example.COM."); got != "example.com" {
		t.Errorf("recordHost: %q", got)
	}
}
