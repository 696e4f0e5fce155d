package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A request through the sandbox's proxy to a host the policy does not
// allow: perl (always on Debian) speaks HTTP to $HTTP_PROXY by hand.
const proxyGet = `use IO::Socket::INET; my ($h) = $ENV{HTTP_PROXY} =~ m{//([^/]+)}; ` +
	`my $s = IO::Socket::INET->new($h) or die "connect: $!"; ` +
	`print $s "GET http://evil.example/ HTTP/1.0\r\nHost: evil.example\r\n\r\n"; print scalar <$s>;`

func TestLimitedNetworkDenialIsSummarisedAndLogged(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "net.jsonl")
	r := tent(t, "run", "--allow-host", "example.org", "--net-log", log, "--", "perl", "-e", proxyGet)
	r.expect(t, 0, "tent: blocked 1 connection: evil.example:80 (not allowed)")
	if !strings.HasPrefix(r.stdout, "HTTP/1.1 403") {
		t.Errorf("stdout %q, want the proxy's 403", r.stdout)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(strings.SplitN(string(b), "\n", 2)[0]), &rec); err != nil {
		t.Fatalf("net log %q: %v", b, err)
	}
	if rec["host"] != "evil.example" || rec["verdict"] != "deny" {
		t.Errorf("net log record %v", rec)
	}
	if id, _ := rec["sandbox"].(string); len(id) != 16 {
		t.Errorf("net log record names sandbox %q, want an id", rec["sandbox"])
	}
}

// A long-lived sandbox's network log names it by its id.
func TestNetLogNamesTheSandbox(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	log := filepath.Join(t.TempDir(), "net.jsonl")
	id := l.create(t, "--allow-host", "example.org", "--net-log", log)
	l.tent(t, "exec", id, "--", "perl", "-e", proxyGet).expect(t, 0)
	l.tent(t, "rm", id).expect(t, 0)
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("net log line %q: %v", line, err)
		}
		if rec["sandbox"] != id {
			t.Errorf("net log record %v, want sandbox %q", rec, id)
		}
	}
}

func TestNetworkFlagsAreValidated(t *testing.T) {
	t.Parallel()
	tent(t, "run", "--allow-host", "*", "--", "true").expect(t, 125, `"*"`)
	tent(t, "run", "--allow-host", "*.com", "--", "true").expect(t, 125, "public suffix")
	tent(t, "run", "--allow-host", "https://example.com/x", "--", "true").expect(t, 125, "https://example.com/x")
	tent(t, "run", "--allow-host", "example.com:99999", "--", "true").expect(t, 125, "99999")
	tent(t, "run", "--net", "host", "--allow-host", "example.com", "--", "true").expect(t, 125, "host")
	tent(t, "run", "--net", "bogus", "--", "true").expect(t, 125, "bogus")
	policy := writeFile(t, filepath.Join(t.TempDir(), "p.yaml"), "allowed_hosts: [\"*.co.uk\"]\n")
	tent(t, "run", "--policy", policy, "--", "true").expect(t, 125, "*.co.uk")
}
