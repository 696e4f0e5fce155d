// Command benchcmp measures the start-up cost of `tent run -- /bin/true`
// against /bin/true alone and against bubblewrap with every namespace, in
// one run, interleaving the three so that machine noise hits them alike.
// It prints medians and ratios. Used by `make bench`.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"time"
)

func main() {
	tent := flag.String("tent", "bin/tent", "path of the tent binary")
	n := flag.Int("n", 200, "runs of each command")
	flag.Parse()

	cases := []struct {
		name string
		argv []string
	}{
		{"/bin/true", []string{"/bin/true"}},
		{"bwrap --unshare-all", []string{"bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "/bin/true"}},
		{"tent run (all protections)", []string{*tent, "run", "--", "/bin/true"}},
	}
	times := make([][]time.Duration, len(cases))
	for i, c := range cases {
		if out, err := exec.Command(c.argv[0], c.argv[1:]...).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "benchcmp: %s does not run: %v\n%s", c.name, err, out)
			if i == 1 {
				fmt.Fprintln(os.Stderr, "benchcmp: install bubblewrap (scripts/setup) for the baseline")
			}
			os.Exit(1)
		}
	}
	for r := 0; r < *n; r++ {
		for i, c := range cases {
			start := time.Now()
			if err := exec.Command(c.argv[0], c.argv[1:]...).Run(); err != nil {
				fmt.Fprintf(os.Stderr, "benchcmp: %s: %v\n", c.name, err)
				os.Exit(1)
			}
			times[i] = append(times[i], time.Since(start))
		}
	}
	med := make([]time.Duration, len(cases))
	for i := range cases {
		slices.Sort(times[i])
		med[i] = times[i][len(times[i])/2]
	}
	fmt.Printf("start-up, median of %d runs each (interleaved):\n", *n)
	for i, c := range cases {
		p90 := times[i][len(times[i])*9/10]
		fmt.Printf("  %-28s %8.2f ms   p90 %8.2f ms\n", c.name, ms(med[i]), ms(p90))
	}
	fmt.Printf("ratios:\n")
	fmt.Printf("  tent / bwrap      %.2fx   (target <= 1.00)\n", float64(med[2])/float64(med[1]))
	fmt.Printf("  tent / /bin/true  %.2fx\n", float64(med[2])/float64(med[0]))
	fmt.Printf("  bwrap / /bin/true %.2fx\n", float64(med[1])/float64(med[0]))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
