package cli

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/internal/npmtest"
	"github.com/tent-sandbox/tent/internal/sandboxtest"
)

// mcpSDKVersion is the TypeScript SDK TestMCPTypeScriptClient uses: the
// one the conformance suite depends on, so that one npm install serves
// both tests.
const mcpSDKVersion = "1.32.2"

// mcpNPMPackages are what the MCP tests install with npm (once, cached).
var mcpNPMPackages = []string{"@modelcontextprotocol/conformance@" + conformanceVersion, "@modelcontextprotocol/sdk@" + mcpSDKVersion}

// TestMCPTypeScriptClient drives tent mcp with the official TypeScript
// client over stdio (testdata/mcp-client.mjs): initialize, list tools,
// create, run, edit a file and read it back, grep, a timeout, a denied
// fetch whose denial the model can read, a widening refused, cancel,
// close; nothing is left behind.
func TestMCPTypeScriptClient(t *testing.T) {
	node, modules, err := npmtest.Install(t.TempDir(), mcpNPMPackages...)
	if errors.Is(err, npmtest.ErrNoNode) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	probe, err := sandboxtest.ProbeDir()
	if err != nil {
		t.Fatal(err)
	}
	// The script must find the SDK: it runs from a directory holding
	// node_modules (a symlink to the installed one).
	dir := t.TempDir()
	script := filepath.Join(dir, "mcp-client.mjs")
	b, err := os.ReadFile(testdata(t, "mcp-client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state")
	netLog := filepath.Join(t.TempDir(), "net.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, tentBin, "--state-dir", state, "mcp",
		"--ro", probe+":/opt/probe", "--allow-host", "allowed.test", "--net-log", netLog)
	cmd.Dir = dir
	cmd.Env = baseEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s\n%s", err, out, stderr.String())
	}
	type result struct {
		Error bool
		Text  string
		Out   map[string]any
	}
	var seen struct {
		Server                                 string
		Tools                                  []string
		Create, Run, Edit, Read, Grep, Timeout result
		Denied, Network, Widen                 result
		Cancel                                 string
	}
	if err := json.Unmarshal(out, &seen); err != nil {
		t.Fatalf("%v: %s\n%s", err, out, stderr.String())
	}
	check := func(what string, ok bool, r any) {
		t.Helper()
		if !ok {
			t.Errorf("%s: %+v", what, r)
		}
	}
	check("server", seen.Server == "tent", seen.Server)
	check("tools", slices.Contains(seen.Tools, "shell") && slices.Contains(seen.Tools, "file_edit") && len(seen.Tools) == 25, seen.Tools)
	check("create", !seen.Create.Error && seen.Create.Out["name"] == "ts", seen.Create)
	check("run", seen.Run.Out["stdout"] == "hello from tent\n" && seen.Run.Out["exit_code"] == 0.0, seen.Run)
	check("edit", seen.Edit.Out["replacements"] == 1.0, seen.Edit)
	check("read back", seen.Read.Out["content"] == "const a = 2;\nconsole.log(a);\n", seen.Read)
	matches, _ := seen.Grep.Out["matches"].([]any)
	check("grep", len(matches) == 1 && strings.Contains(seen.Grep.Text, `"line":1`), seen.Grep)
	check("timeout", seen.Timeout.Out["timed_out"] == true && strings.Contains(seen.Timeout.Text, "timed out"), seen.Timeout)
	check("denied fetch", strings.HasPrefix(seen.Denied.Out["stdout"].(string), "403 ") && strings.Contains(seen.Denied.Text, "denied.test"), seen.Denied)
	check("network_status", strings.Contains(seen.Network.Text, "denied.test") && seen.Network.Out["mode"] == "limited", seen.Network)
	check("widening", seen.Widen.Error && strings.Contains(seen.Widen.Text, "no tool mounts a host path"), seen.Widen)
	check("cancel", strings.Contains(seen.Cancel, "Abort"), seen.Cancel)
	sandboxtest.AssertNoProcess(t, "sleep", "61.75")
	if b, err := os.ReadFile(netLog); err != nil || !strings.Contains(string(b), "denied.test") {
		t.Errorf("the operator's --net-log: %v\n%s", err, b)
	}
	if r := tent(t, "--state-dir", state, "ls", "-q"); r.stdout != "" {
		t.Errorf("sandboxes left after the client closed: %q", r.stdout)
	}
}
