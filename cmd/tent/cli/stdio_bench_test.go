package cli

import (
	"io"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// BenchmarkPipe100MB sends 100 MB from a sandboxed command through a
// pipe that the benchmark (the caller, as root: a pipe the sandbox's user
// could not reopen, so tent relays it with splice) reads, against
// bubblewrap doing the same, interleaved so that machine noise hits both
// alike. It reports the median time from the first byte to the end of
// file (the transfer, without either tool's start-up) and the ratio.
func BenchmarkPipe100MB(b *testing.B) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		b.Skip("bubblewrap is not installed (the baseline)")
	}
	const script = "head -c 104857600 /dev/zero"
	cases := [][]string{
		{tentBin, "run", "--", "sh", "-c", script},
		{"bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "sh", "-c", script},
	}
	var times [2][]time.Duration
	for i := 0; i < b.N; i++ {
		for c, argv := range cases {
			d, n, err := transfer(argv)
			if err != nil || n != 100<<20 {
				b.Fatalf("%s: %d bytes, %v", argv[0], n, err)
			}
			times[c] = append(times[c], d)
		}
	}
	med := func(ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[len(s)/2]
	}
	t, w := med(times[0]), med(times[1])
	b.ReportMetric(float64(t.Microseconds())/1000, "tent-ms")
	b.ReportMetric(float64(w.Microseconds())/1000, "bwrap-ms")
	b.ReportMetric(float64(t)/float64(w), "ratio")
}

// transfer runs argv and reads its stdout to the end: the time from the
// first byte to end of file, and the bytes read.
func transfer(argv []string) (time.Duration, int64, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/"
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	buf := make([]byte, 1<<20)
	n, err := out.Read(buf)
	first := time.Now()
	total := int64(n)
	if err == nil {
		var m int64
		m, err = io.CopyBuffer(io.Discard, out, buf)
		total += m
	}
	d := time.Since(first)
	if werr := cmd.Wait(); err == nil || err == io.EOF {
		err = werr
	}
	return d, total, err
}
