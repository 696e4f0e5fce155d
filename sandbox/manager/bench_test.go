package manager_test

import (
	"context"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/internal/benchstat"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/manager"
)

// BenchmarkManagerAcquire compares Manager.Acquire served by the warm pool
// with a cold Acquire (Fresh: the Local backend provisions), medians of
// the same run (target: warm <= 1 ms). Each acquire starts with the pool
// full and nothing provisioning in the background; each sandbox is
// released (terminated) untimed.
func BenchmarkManagerAcquire(b *testing.B) {
	ctx := context.Background()
	l := newLocal(b, sandbox.LocalOptions{})
	m, err := manager.New(manager.Options{Backends: []sandbox.Backend{l}, Pool: []manager.WarmSpec{{Size: 1}}})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close(ctx)
	acquire := func(fresh bool) time.Duration {
		if err := m.WaitPool(ctx); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		s, err := m.Acquire(ctx, manager.AcquireRequest{Client: "bench", Fresh: fresh})
		d := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if s.Pooled == fresh {
			b.Fatalf("fresh %v, pooled %v", fresh, s.Pooled)
		}
		if err := m.Release(ctx, s.ID); err != nil {
			b.Fatal(err)
		}
		return d
	}
	var warm, cold []time.Duration
	for b.Loop() {
		warm = append(warm, acquire(false))
		cold = append(cold, acquire(true))
	}
	mw, mc := benchstat.Median(warm), benchstat.Median(cold)
	b.ReportMetric(float64(mw.Nanoseconds())/1e3, "warm-µs")
	b.ReportMetric(float64(mc.Nanoseconds())/1e3, "cold-µs")
	b.ReportMetric(float64(mc)/float64(mw), "cold/warm")
}
