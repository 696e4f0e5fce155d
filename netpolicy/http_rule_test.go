package netpolicy

import (
	"fmt"
	"strings"
	"testing"
)

func TestHTTPRuleMethodAndPath(t *testing.T) {
	ih := newInterceptHarness(t, false)
	const rule = "GET,HEAD rules.example.com/repos/org/"
	for _, tc := range []struct {
		method, path string
		code         int
		reason       string
		upstream     string // the path the origin must see
	}{
		{"GET", "/repos/org/a", 200, "", "/repos/org/a"},
		{"HEAD", "/repos/org/", 200, "", "/repos/org/"},
		{"GET", "/repos/org/./a//b", 200, "", "/repos/org/a/b"},
		{"GET", "/repos/%6Frg/a", 200, "", "/repos/org/a"},
		{"POST", "/repos/org/a", 403, ReasonHTTPRule, ""},
		{"GET", "/repos/other/a", 403, ReasonHTTPRule, ""},
		{"GET", "/repos/org", 403, ReasonHTTPRule, ""},
		{"GET", "/repos/orgx/a", 403, ReasonHTTPRule, ""},
		{"GET", "/repos/org/../other/a", 403, ReasonHTTPRule, ""},
		{"GET", "/repos/org/%2e%2e/other/a", 403, ReasonHTTPRule, ""},
		{"GET", "/repos/org/%2E%2e/%2e%2E/x", 403, ReasonHTTPRule, ""},
		{"GET", "/repos/org%2F..%2Fother/a", 400, ReasonBadPath, ""},
		{"GET", "/repos/org/..%2f../x", 400, ReasonBadPath, ""},
		{"GET", "/repos/org/a%5c..%5c..%5cx", 400, ReasonBadPath, ""},
		{"GET", "/../../repos/org/a", 400, ReasonBadPath, ""},
	} {
		before := ih.o.count()
		resp, body := ih.raw(t, "rules.example.com", tc.method+" "+tc.path+" HTTP/1.1\r\nHost: rules.example.com\r\nConnection: close\r\n\r\n")
		if resp.StatusCode != tc.code {
			t.Errorf("%s %s: %s %q, want %d", tc.method, tc.path, resp.Status, body, tc.code)
			continue
		}
		if tc.code != 200 {
			d := resp.Header.Get("X-Tent-Denied")
			wantRule := "none"
			if tc.reason == ReasonHTTPRule {
				wantRule = rule
				if !strings.Contains(body, rule) {
					t.Errorf("%s %s: the body does not name the rule: %q", tc.method, tc.path, body)
				}
			}
			if d != tc.reason+"; rule="+wantRule {
				t.Errorf("%s %s: X-Tent-Denied %q", tc.method, tc.path, d)
			}
			if ih.o.count() != before {
				t.Errorf("%s %s: refused, yet the origin received it", tc.method, tc.path)
			}
			continue
		}
		if got := ih.o.last(t); got.URI != tc.upstream || got.Method != tc.method {
			t.Errorf("%s %s: the origin saw %s %s, want %s", tc.method, tc.path, got.Method, got.URI, tc.upstream)
		}
	}
	// Plain HTTP to the same host is held to the same rules.
	plain := newOrigin(t, false)
	c := ih.client(nil)
	resp, _ := get(t, c, fmt.Sprintf("http://rules.example.com:%d/other", plain.port))
	if resp.StatusCode != 403 || resp.Header.Get("X-Tent-Denied") != ReasonHTTPRule+"; rule="+rule {
		t.Errorf("plain HTTP outside the rule: %s %q", resp.Status, resp.Header.Get("X-Tent-Denied"))
	}
	resp, _ = get(t, c, fmt.Sprintf("http://rules.example.com:%d/repos/org/x", plain.port))
	if resp.StatusCode != 200 {
		t.Errorf("plain HTTP inside the rule: %s", resp.Status)
	}
	ih.proxy.Close()
	var logged bool
	for _, r := range ih.audit.records(t) {
		logged = logged || (r.Event == EventRequest && r.Verdict == VerdictDeny && r.Method == "POST" && r.Path == "/repos/org/a" && r.Reason == ReasonHTTPRule)
	}
	if !logged {
		t.Errorf("no audit record of the refused POST with its method and path")
	}
	if !strings.Contains(Summary(ih.proxy.Denied()), "rules.example.com") {
		t.Errorf("Summary %q", Summary(ih.proxy.Denied()))
	}
}

func TestHTTPRuleParse(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"GET,head api.github.com/repos/ORG/", "GET,HEAD api.github.com/repos/ORG/", ""},
		{"api.example.com/v1/", "api.example.com/v1/", ""},
		{"POST *.example.com:8443", "POST *.example.com:8443", ""},
		{"GET api.example.com/a/../b", "GET api.example.com/b", ""},
		{"GET api.example.com/", "GET api.example.com", ""},
		{"GET 10.0.0.1/x", "", "IP address"},
		{"CONNECT a.example", "", "CONNECT"},
		{"G(T a.example", "", "bad method"},
		{"a.example/x?y", "", "query"},
		{"a.example/%2F", "", "encoded"},
	} {
		r, isHTTP, err := ParseHTTPRule(tc.in)
		if !isHTTP {
			t.Errorf("%q: not an HTTP rule", tc.in)
			continue
		}
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || r.String() != tc.want {
			t.Errorf("%q: %q %v, want %q", tc.in, r.String(), err, tc.want)
		}
	}
	for _, plain := range []string{"example.com", "10.0.0.0/8", "[2001:db8::/32]:443", "example.com:443"} {
		if _, isHTTP, _ := ParseHTTPRule(plain); isHTTP {
			t.Errorf("%q read as an HTTP rule", plain)
		}
	}
	c := mustCompile(t, []string{"GET a.example/x/", "b.example"}, nil)
	if d := c.CheckName("a.example", 443); !d.Allowed || d.Rule != "GET a.example/x/" {
		t.Errorf("CheckName %v", d)
	}
	if !c.Intercepts("a.example", 443) || c.Intercepts("b.example", 443) {
		t.Error("Intercepts")
	}
}

// FuzzNormalizePath: a normalised path is its own normal form, starts
// with "/", and has no dot segment, empty segment, backslash or escaped
// slash left for a server to read otherwise.
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/", "/a/b/", "/a/../b", "/%2e%2e/x", "/a//b/./c", "/%2F", "/a%5cb", "/%zz", "/a/%2E%2e/", "/~%41%7e", "/a?b", "/.%2e/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		np, ok := NormalizePath(p)
		if !ok {
			return
		}
		again, ok := NormalizePath(np)
		if !ok || again != np {
			t.Fatalf("%q -> %q -> %q %v", p, np, again, ok)
		}
		if np[0] != '/' || strings.Contains(np, "//") || strings.Contains(np, "\\") || strings.Contains(strings.ToUpper(np), "%2F") {
			t.Fatalf("%q -> %q", p, np)
		}
		for _, seg := range strings.Split(np[1:], "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("%q -> %q keeps a dot segment", p, np)
			}
		}
	})
}
