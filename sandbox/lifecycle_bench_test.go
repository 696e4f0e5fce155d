package sandbox_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/internal/benchstat"
	"github.com/tent-sandbox/tent/sandbox"
)

// BenchmarkExecLatency compares Exec(/bin/true) in a provisioned sandbox
// with os/exec running /bin/true on the host, medians of the same run
// (target: ratio <= 1.5). Both capture stdout (what an agent's tool call
// does) and discard stderr.
func BenchmarkExecLatency(b *testing.B) {
	sb, err := sandbox.Provision(context.Background(), sandbox.Spec{}, sandbox.ProvisionOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Terminate(context.Background())
	var in, host []time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"/bin/true"}, Stderr: io.Discard}); err != nil {
			b.Fatal(err)
		}
		in = append(in, time.Since(start))
		start = time.Now()
		if _, err := exec.Command("/bin/true").Output(); err != nil {
			b.Fatal(err)
		}
		host = append(host, time.Since(start))
	}
	mi, mh := benchstat.Median(in), benchstat.Median(host)
	b.ReportMetric(float64(mi.Microseconds()), "sandbox-µs")
	b.ReportMetric(float64(mh.Microseconds()), "host-µs")
	b.ReportMetric(float64(mi)/float64(mh), "ratio")
}

// BenchmarkProvisionTerminate measures sandboxes provisioned and
// terminated per second, two at a time (target >= 50/s on 2 cores).
func BenchmarkProvisionTerminate(b *testing.B) {
	start := time.Now()
	b.SetParallelism(1)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			sb, err := sandbox.Provision(context.Background(), sandbox.Spec{}, sandbox.ProvisionOptions{})
			if err != nil {
				b.Error(err)
				return
			}
			if err := sb.Terminate(context.Background()); err != nil {
				b.Error(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "sandboxes/s")
}

// BenchmarkIdleMemory provisions 200 sandboxes (the issue's "200 idle
// sandboxes at once must work"), lets them idle, and reports per sandbox
// the memory of its processes (the init, by now the idle holder; nothing
// else runs): RSS, PSS (which shares the binary's pages among the inits
// as the kernel does), and what its cgroup is charged, when it has one
// (target <= 4 MiB). Then each runs a command: the median time of that
// first exec after idling (the init's return) is wake-exec-ms.
func BenchmarkIdleMemory(b *testing.B) {
	const n = 200
	for b.Loop() {
		var sbs []*sandbox.Sandbox
		for i := 0; i < n; i++ {
			sb, err := sandbox.Provision(context.Background(), sandbox.Spec{}, sandbox.ProvisionOptions{})
			if err != nil {
				b.Fatalf("sandbox %d: %v", i+1, err)
			}
			sbs = append(sbs, sb)
		}
		// Idle: nothing asked of them for longer than the default delay
		// after which an init hands off to the idle holder.
		time.Sleep(sandbox.DefaultIdleAfter + 500*time.Millisecond)
		var rss, pss, charged int64
		for _, sb := range sbs {
			rss += benchstat.KiB(sb.Info().InitPID, "status", "VmRSS:")
			pss += benchstat.KiB(sb.Info().InitPID, "smaps_rollup", "Pss:")
			charged += benchstat.CgroupCharge(sb.Info().CgroupPaths)
		}
		var wake []time.Duration
		for i, sb := range sbs {
			start := time.Now()
			if res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"/bin/true"}}); err != nil || res.ExitCode != 0 {
				b.Fatalf("idle sandbox %d no longer runs commands: %v %v", i+1, res, err)
			}
			wake = append(wake, time.Since(start))
		}
		b.ReportMetric(float64(benchstat.Median(wake).Microseconds())/1000, "wake-exec-ms")
		for _, sb := range sbs {
			_ = sb.Terminate(context.Background())
		}
		b.ReportMetric(float64(rss)/n/1024, "RSS-MiB/sandbox")
		b.ReportMetric(float64(pss)/n/1024, "PSS-MiB/sandbox")
		b.ReportMetric(float64(charged)/n/(1<<20), "cgroup-MiB/sandbox")
	}
}

// BenchmarkSnapshotCost snapshots a cow workspace of 500 MiB after a
// 1 MiB change and after a 500 MiB change (target: the first <= 50 ms;
// the cost follows the bytes changed, not the workspace).
func BenchmarkSnapshotCost(b *testing.B) {
	src := b.TempDir()
	os.Chmod(src, 0o777)
	os.Chmod(filepath.Dir(src), 0o755)
	chunk := make([]byte, 1<<20)
	for i := 0; i < 500; i++ {
		if err := os.WriteFile(filepath.Join(src, "f"+strconv.Itoa(i)), chunk, 0o666); err != nil {
			b.Fatal(err)
		}
	}
	// The workspace exists before the sandbox, on disk: without this, the
	// first snapshot's fsync (ext4's ordered mode) also flushes the 500 MiB
	// just written above.
	syscall.Sync()
	spec := sandbox.Spec{Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: src, Target: "/work", Access: sandbox.CopyOnWrite}}}}
	var small, large time.Duration
	for b.Loop() {
		for _, tc := range []struct {
			script string
			d      *time.Duration
		}{
			{"head -c 1048576 /dev/urandom > /work/new", &small},
			{"for i in $(seq 0 499); do head -c 1048576 /dev/urandom > /work/f$i; done", &large},
		} {
			sb, err := sandbox.Provision(context.Background(), spec, sandbox.ProvisionOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", tc.script}}); err != nil {
				b.Fatal(err)
			}
			store := b.TempDir()
			start := time.Now()
			if _, err := sb.Snapshot(context.Background(), store, sandbox.SnapshotOptions{}); err != nil {
				b.Fatal(err)
			}
			*tc.d += time.Since(start)
			_ = sb.Terminate(context.Background())
			os.RemoveAll(store)
		}
	}
	b.ReportMetric(float64(small.Milliseconds())/float64(b.N), "1MiB-change-ms")
	b.ReportMetric(float64(large.Milliseconds())/float64(b.N), "500MiB-change-ms")
}
