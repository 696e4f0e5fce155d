package serve

import (
	"bufio"
	"context"
	"errors"
	"math"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tent-sandbox/tent/internal/handle"
	"github.com/tent-sandbox/tent/sandbox"
)

// maxMetricsIDs bounds GET /sandboxes/metrics's sandbox_ids.
const maxMetricsIDs = 100

// hostMemory is the host's memory in bytes (/proc/meminfo MemTotal), 0
// when unknown.
var hostMemory = sync.OnceValue(func() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
})

// metric reads sandbox info's usage now, from its cgroup. The CPU
// percentage is over the time since the previous sample (or since the
// sandbox started) and the CPUs it may use. ok is false for a sandbox
// without a cgroup (no usage to report).
func (s *Server) metric(ctx context.Context, info sandbox.Info) (m sandboxMetric, ok bool, err error) {
	u, err := handle.Open(ctx, s.b, info.ID).Usage(ctx)
	if errors.Is(err, sandbox.ErrUnsupported) {
		return m, false, nil
	}
	if err != nil {
		return m, false, err
	}
	now := time.Now()
	cpus := float64(runtime.NumCPU())
	if c := info.Spec.Limits.CPUs; c > 0 {
		cpus = c
	}
	s.mu.Lock()
	b := s.boxLocked(info.ID)
	prevCPU, prevAt := b.cpuNanos, b.cpuAt
	if prevAt.IsZero() || u.CPUNanos < prevCPU {
		prevCPU, prevAt = 0, info.Created
	}
	b.cpuNanos, b.cpuAt = u.CPUNanos, now
	s.mu.Unlock()
	pct := 0.0
	if wall := now.Sub(prevAt); wall > 0 {
		pct = float64(u.CPUNanos-prevCPU) / float64(wall) / cpus * 100
		pct = math.Round(math.Min(math.Max(pct, 0), 100)*100) / 100
	}
	total := u.MemoryLimit
	if total <= 0 {
		total = hostMemory()
	}
	return sandboxMetric{
		Timestamp:     now.UTC().Format(time.RFC3339Nano),
		TimestampUnix: now.Unix(),
		CPUCount:      int(math.Ceil(cpus)),
		CPUUsedPct:    pct,
		MemUsed:       u.MemoryBytes,
		MemTotal:      total,
	}, true, nil
}

// handleMetrics serves GET /sandboxes/{sandboxID}/metrics: one sample,
// taken now (tent keeps no history), or none for a sandbox without a
// cgroup or outside the start/end interval asked for.
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	info, err := s.get(r.Context(), r.PathValue("sandboxID"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	var start, end int64 = 0, math.MaxInt64
	for _, f := range []struct {
		name string
		v    *int64
	}{{"start", &start}, {"end", &end}} {
		if v := q.Get(f.name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				s.writeError(w, r, errorf(http.StatusBadRequest, "%s: %q is not a Unix time in seconds", f.name, v))
				return
			}
			*f.v = n
		}
	}
	out := []sandboxMetric{}
	m, ok, err := s.metric(r.Context(), info)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if ok && m.TimestampUnix >= start && m.TimestampUnix <= end {
		out = append(out, m)
	}
	writeJSON(w, http.StatusOK, out)
}

// handleMetricsMany serves GET /sandboxes/metrics?sandbox_ids=A,B: the
// latest sample of each running sandbox named that has one.
func (s *Server) handleMetricsMany(w http.ResponseWriter, r *http.Request) {
	var ids []string
	for _, v := range r.URL.Query()["sandbox_ids"] {
		for id := range strings.SplitSeq(v, ",") {
			if id != "" {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) > maxMetricsIDs {
		s.writeError(w, r, errorf(http.StatusBadRequest, "sandbox_ids: %d ids, at most %d", len(ids), maxMetricsIDs))
		return
	}
	out := sandboxesWithMetrics{Sandboxes: map[string]sandboxMetric{}}
	for _, id := range ids {
		info, err := s.get(r.Context(), id)
		if err != nil {
			continue
		}
		if m, ok, err := s.metric(r.Context(), info); err == nil && ok {
			out.Sandboxes[id] = m
		}
	}
	writeJSON(w, http.StatusOK, out)
}
