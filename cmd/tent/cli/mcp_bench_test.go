package cli

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkMCPExec measures an MCP tool call's round trip, exec ["true"]
// through the Go SDK's client to tent mcp over stdio (on the supervised
// backend, its default sandbox made first), beside `tent exec ID true`
// of the CLI on a sandbox of the same state directory: the medians of
// 50 of each ("mcp-exec-ms", "tent-exec-ms") and their ratio. Run it
// with -benchtime=1x.
func BenchmarkMCPExec(b *testing.B) {
	state := filepath.Join(b.TempDir(), "state")
	cmd := exec.Command(tentBin, "--state-dir", state, "mcp")
	cmd.Env = baseEnv()
	c := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil)
	ctx := context.Background()
	cs, err := c.Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	call := func() {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "exec", Arguments: map[string]any{"argv": []string{"true"}}})
		if err != nil || res.IsError {
			b.Fatalf("exec: %v %+v", err, res)
		}
	}
	call() // the default sandbox
	id := strings.TrimSpace(mcpBenchRun(b, tentBin, "--state-dir", state, "create", "--idle-after", "never"))
	defer mcpBenchRun(b, tentBin, "--state-dir", state, "rm", id)
	for range b.N {
		var mcpMS, cliMS []float64
		for range 50 {
			t0 := time.Now()
			call()
			mcpMS = append(mcpMS, float64(time.Since(t0).Microseconds())/1000)
			t1 := time.Now()
			mcpBenchRun(b, tentBin, "--state-dir", state, "exec", id, "--", "true")
			cliMS = append(cliMS, float64(time.Since(t1).Microseconds())/1000)
		}
		m, t := mcpMedian(mcpMS), mcpMedian(cliMS)
		b.ReportMetric(m, "mcp-exec-ms")
		b.ReportMetric(t, "tent-exec-ms")
		b.ReportMetric(m/t, "mcp/tent-exec")
	}
}

func mcpBenchRun(b *testing.B, argv ...string) string {
	b.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = baseEnv()
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("%q: %v", argv, err)
	}
	return string(out)
}

func mcpMedian(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
