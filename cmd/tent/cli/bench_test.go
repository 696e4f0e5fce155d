package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/internal/benchstat"
	"github.com/tent-sandbox/tent/sandbox"
)

// BenchmarkCLIIdleMemory creates 200 sandboxes with tent create (the
// issue's "200 idle sandboxes at once"), lets them idle past the default
// IdleAfter, and reports per sandbox the RSS of its processes on the host
// (its supervisor and its init, by then both idle holders) and what its
// cgroup is charged (target <= 4 MiB). It then times the first tent exec
// of 20 of them (which wakes both) and a second one right after, whose
// supervisor and init are freshly started Go processes (wake-exec-ms,
// second-exec-ms, medians; each includes the tent CLI's own start).
func BenchmarkCLIIdleMemory(b *testing.B) {
	const n = 200
	dir := b.TempDir()
	tentIn := func(args ...string) (string, error) {
		out, err := exec.Command(tentBin, append([]string{"--state-dir", dir}, args...)...).Output()
		return string(out), err
	}
	defer tentIn("rm", "--all")
	for b.Loop() {
		var ids []string
		for i := 0; i < n; i++ {
			out, err := tentIn("create")
			if err != nil {
				b.Fatalf("sandbox %d: %v", i+1, err)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			ids = append(ids, lines[len(lines)-1])
		}
		time.Sleep(sandbox.DefaultIdleAfter + time.Second)
		var rss, charged int64
		for _, id := range ids {
			data, err := os.ReadFile(filepath.Join(dir, id+".json"))
			if err != nil {
				b.Fatal(err)
			}
			var rec struct {
				Supervisor int      `json:"supervisor_pid"`
				Cgroups    []string `json:"cgroups"`
			}
			if err := json.Unmarshal(data, &rec); err != nil {
				b.Fatal(err)
			}
			rss += benchstat.KiB(rec.Supervisor, "status", "VmRSS:")
			tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", rec.Supervisor))
			for _, task := range tasks {
				kids, _ := os.ReadFile(task)
				for _, k := range strings.Fields(string(kids)) {
					pid, _ := strconv.Atoi(k)
					rss += benchstat.KiB(pid, "status", "VmRSS:")
				}
			}
			charged += benchstat.CgroupCharge(rec.Cgroups)
		}
		var wake, busy []time.Duration
		for _, id := range ids[:20] {
			for _, d := range []*[]time.Duration{&wake, &busy} {
				start := time.Now()
				if _, err := tentIn("exec", id, "--", "/bin/true"); err != nil {
					b.Fatalf("exec in %s: %v", id, err)
				}
				*d = append(*d, time.Since(start))
			}
		}
		if _, err := tentIn("rm", "--all"); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(rss)/n/1024, "RSS-MiB/sandbox")
		b.ReportMetric(float64(charged)/n/(1<<20), "cgroup-MiB/sandbox")
		b.ReportMetric(float64(benchstat.Median(wake).Microseconds())/1000, "wake-exec-ms")
		b.ReportMetric(float64(benchstat.Median(busy).Microseconds())/1000, "second-exec-ms")
	}
}
