package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/supervised"
)

// BenchmarkE2BSDK measures tent serve through the official E2B SDK
// (testdata/sdk/bench.mjs) and, in the same run, the same work on the
// Local backend in process, the baseline. It reports the medians of
// Sandbox.create then the first commands.run('true') ("sdk-create-run-ms",
// against "local-create-run-ms") and of commands.run('true') alone
// ("sdk-run-ms" against a `tent exec ID true` of the CLI, "tent-exec-ms",
// and against "local-exec-ms", with their ratios), how long 100
// concurrent creates took and how many failed, and the server process's
// memory once idle again. The work is done once: run it with
// -benchtime=1x.
func BenchmarkE2BSDK(b *testing.B) {
	e := startSDKServer(b, supervised.Name)
	ctx := context.Background()

	// The baseline: the same work on the backend, in process.
	var localCreateRun, localExec []float64
	for range 20 {
		t0 := time.Now()
		info, err := e.local.Provision(ctx, sandbox.Spec{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := handleOf(b, e.local, info.ID).Exec(ctx, sandbox.ExecRequest{Args: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		localCreateRun = append(localCreateRun, ms(time.Since(t0)))
		for range 5 {
			t1 := time.Now()
			if _, err := handleOf(b, e.local, info.ID).Exec(ctx, sandbox.ExecRequest{Args: []string{"true"}}); err != nil {
				b.Fatal(err)
			}
			localExec = append(localExec, ms(time.Since(t1)))
		}
		if err := handleOf(b, e.local, info.ID).Terminate(ctx); err != nil {
			b.Fatal(err)
		}
	}

	cliExec := tentExecBaseline(b)

	out, err := e.node(b, "bench.mjs", "N=20", "CONCURRENT=100")
	if err != nil {
		b.Fatalf("bench.mjs: %v\n%s", err, out)
	}
	var res struct {
		CreateRun  []float64 `json:"createRun"`
		Run        []float64 `json:"run"`
		Concurrent struct {
			N      int     `json:"n"`
			MS     float64 `json:"ms"`
			Failed int     `json:"failed"`
			Error  string  `json:"error"`
		} `json:"concurrent"`
	}
	line := out[bytes.LastIndexByte(bytes.TrimSpace(out), '\n')+1:]
	if err := json.Unmarshal(line, &res); err != nil {
		b.Fatalf("bench.mjs printed %q: %v", out, err)
	}
	if res.Concurrent.Failed > 0 {
		b.Errorf("%d of %d concurrent creates failed: %s", res.Concurrent.Failed, res.Concurrent.N, res.Concurrent.Error)
	}
	sdkRun, local := median(res.Run), median(localExec)
	b.ReportMetric(median(res.CreateRun), "sdk-create-run-ms")
	b.ReportMetric(median(localCreateRun), "local-create-run-ms")
	b.ReportMetric(sdkRun, "sdk-run-ms")
	b.ReportMetric(local, "local-exec-ms")
	b.ReportMetric(cliExec, "tent-exec-ms")
	b.ReportMetric(sdkRun/cliExec, "run-ratio-cli")
	b.ReportMetric(sdkRun/local, "run-ratio-inprocess")
	b.ReportMetric(res.Concurrent.MS, "concurrent100-ms")
	b.ReportMetric(float64(res.Concurrent.Failed), "concurrent100-failed")

	// The server idle again: every sandbox killed.
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	b.ReportMetric(float64(m.HeapInuse)/(1<<20), "idle-heap-MiB")
	b.ReportMetric(float64(rssKiB())/1024, "idle-rss-MiB")
	b.ReportMetric(0, "ns/op")
}

// tentExecBaseline builds the tent CLI, creates a sandbox with it and
// returns the median wall time of `tent exec ID true`.
func tentExecBaseline(b *testing.B) float64 {
	dir := b.TempDir()
	tent := filepath.Join(dir, "tent")
	build := exec.Command("go", "build", "-o", tent, "github.com/tent-sandbox/tent/cmd/tent")
	build.Dir = "."
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building tent: %v\n%s", err, out)
	}
	state := filepath.Join(dir, "state")
	run := func(args ...string) string {
		cmd := exec.Command(tent, append([]string{"--state-dir", state}, args...)...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("tent %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	lines := strings.Split(run("create"), "\n")
	id := lines[len(lines)-1]
	defer run("rm", id)
	var times []float64
	for range 20 {
		t0 := time.Now()
		run("exec", id, "true")
		times = append(times, ms(time.Since(t0)))
	}
	return median(times)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// rssKiB is this process's resident memory (VmRSS), 0 when unknown.
func rssKiB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return n
		}
	}
	return 0
}
