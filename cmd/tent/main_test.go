package main

import (
	"os"
	"os/exec"
	"path/filepath"
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

// TestInitStartsEarly checks where the sandbox init starts in Go's
// package initialisation: it runs from package namespaces' initialiser,
// so every initialiser that runs before it is paid for by every sandbox
// start. The linker orders packages one at a time, each time the first,
// by import path, of those whose imports are all initialised: a
// dependency of namespaces whose path sorts late holds it back behind
// every ready package that sorts before that dependency. Until
// internal/memtrim stopped importing runtime/debug, regexp's and YAML's
// initialisers (about 0.15 ms) ran in every sandbox init. The order is
// read from a built tent (GODEBUG=inittrace=1 prints each initialiser as
// it runs).
func TestInitStartsEarly(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tent")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--version")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tent --version: %v\n%s", err, out)
	}
	pos := map[string]int{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "init" {
			pos[strings.ReplaceAll(f[1], "%2e", ".")] = len(pos)
		}
	}
	const init = "github.com/tent-sandbox/tent/namespaces"
	if _, ok := pos[init]; !ok {
		t.Fatalf("no initialiser of %s in GODEBUG=inittrace=1's output:\n%s", init, out)
	}
	t.Logf("%s is initialised %dth of %d packages with initialisers", init, pos[init]+1, len(pos))
	for _, p := range []string{"regexp", "gopkg.in/yaml.v3", "net", "net/http", "github.com/tent-sandbox/tent/sandbox"} {
		i, ok := pos[p]
		if !ok {
			t.Errorf("%s has no initialiser any more: update this test", p)
			continue
		}
		if i < pos[init] {
			t.Errorf("%s is initialised before %s (%d, %d): every sandbox init runs its initialisers", p, init, i+1, pos[init]+1)
		}
	}
}
