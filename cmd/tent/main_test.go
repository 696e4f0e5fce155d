package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestServersStayOut keeps the servers' packages out of tent: each one
// linked in runs its initialisers at every tent start and every sandbox
// init's (tent serve and tent mcp are tent-server's).
func TestServersStayOut(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 {
		t.Fatalf("go list -deps listed %d packages: %q", len(deps), deps)
	}
	banned := []string{
		"github.com/tent-sandbox/tent/serve",
		"github.com/tent-sandbox/tent/mcp",
		"google.golang.org/protobuf/",
		"connectrpc.com/",
		"github.com/modelcontextprotocol/",
		"github.com/google/jsonschema-go/",
		"golang.org/x/net/http2",
	}
	for _, d := range deps {
		for _, b := range banned {
			if d == strings.TrimSuffix(b, "/") || strings.HasPrefix(d, b) {
				t.Errorf("tent links %s (a server's package: it belongs in cmd/tent-server)", d)
			}
		}
	}
}
