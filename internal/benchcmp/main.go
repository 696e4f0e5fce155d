// Command benchcmp measures the start-up cost of a sandbox against
// /bin/true alone and against bubblewrap with every namespace, in one
// run, interleaving every case so that machine noise hits them alike. It
// prints medians and ratios. Used by `make bench`.
//
// The cases, each running /bin/true:
//
//   - /bin/true itself (the floor: one fork and exec);
//   - bwrap --unshare-all with a read-only root, /proc and /dev;
//   - `tent run` with every protection on (seven namespaces, a cgroup,
//     Landlock, seccomp, the cgroup view), with --net none (the default)
//     and with --net limited (the proxy's listeners, stub DNS and routes);
//   - sandbox.Command(...).Run() in this process: a Go program that
//     embeds the library (its init is this binary, re-executed);
//   - sandbox.Provision then Terminate in this process: a long-lived
//     sandbox made ready and torn down, nothing run in it (the issue's
//     "provision + terminate", against one bwrap start);
//   - with -before, an older tent binary's `tent run`, for a before/after
//     ratio measured in the same run.
//
// The tent binaries' cached pages are dropped first, so that each is read
// back from disk by its first run: a binary whose page cache was filled
// by the write that made it (cp, the linker) faults differently (its
// folios are smaller), by 10-20 % of a whole `tent run`, which swamps
// any difference between two builds.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/sandbox"
)

// dropCache writes path's dirty pages back (a binary just built or
// copied has them, and the kernel keeps dirty pages) and evicts its
// unmapped pages from the page cache (pages that a running process maps
// stay).
func dropCache(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("writing %s back: %w", path, err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("dropping %s from the page cache: %w", path, os.NewSyscallError("fadvise", err))
	}
	return nil
}

func main() {
	sandbox.Init() // this binary is the in-process case's sandbox init
	tent := flag.String("tent", "bin/tent", "path of the tent binary")
	before := flag.String("before", "", "path of an older tent binary to compare with (optional)")
	n := flag.Int("n", 200, "runs of each case")
	flag.Parse()

	bwrap := []string{"bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "/bin/true"}
	cases := []benchCase{
		{name: "/bin/true", argv: []string{"/bin/true"}},
		{name: "bwrap --unshare-all", argv: bwrap},
		{name: "tent run (all protections)", argv: []string{*tent, "run", "--", "/bin/true"}},
		{name: "tent run --net limited", argv: []string{*tent, "run", "--allow-host", "example.com", "--", "/bin/true"}},
		{name: "sandbox.Command().Run()", run: func() error {
			return sandbox.Command(context.Background(), sandbox.Spec{}, "/bin/true").Run()
		}},
		{name: "Provision + Terminate", run: func() error {
			sb, err := sandbox.Provision(context.Background(), sandbox.Spec{}, sandbox.ProvisionOptions{})
			if err != nil {
				return err
			}
			return sb.Terminate(context.Background())
		}},
	}
	if *before != "" {
		cases = append(cases, benchCase{name: "tent run, before", argv: []string{*before, "run", "--", "/bin/true"}})
	}
	for _, bin := range []string{*tent, *before} {
		if bin != "" {
			if err := dropCache(bin); err != nil {
				fmt.Fprintf(os.Stderr, "benchcmp: %v\n", err)
				os.Exit(1)
			}
		}
	}
	for i, c := range cases {
		if err := c.check(); err != nil {
			fmt.Fprintf(os.Stderr, "benchcmp: %s does not run: %v\n", c.name, err)
			if i == 1 {
				fmt.Fprintln(os.Stderr, "benchcmp: install bubblewrap (scripts/setup) for the baseline")
			}
			os.Exit(1)
		}
	}
	times := make([][]time.Duration, len(cases))
	for r := 0; r < *n; r++ {
		for i, c := range cases {
			start := time.Now()
			if err := c.once(); err != nil {
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
	ratio := func(a, b int) float64 { return float64(med[a]) / float64(med[b]) }
	fmt.Printf("ratios:\n")
	fmt.Printf("  tent / bwrap                %.2fx   (target <= 1.25)\n", ratio(2, 1))
	fmt.Printf("  tent --net limited / bwrap  %.2fx\n", ratio(3, 1))
	fmt.Printf("  in-process / bwrap          %.2fx   (target <= 1.25)\n", ratio(4, 1))
	fmt.Printf("  provision+terminate / bwrap %.2fx   (target <= 1.0)\n", ratio(5, 1))
	fmt.Printf("  tent / /bin/true            %.2fx\n", ratio(2, 0))
	fmt.Printf("  bwrap / /bin/true           %.2fx\n", ratio(1, 0))
	if *before != "" {
		fmt.Printf("  tent / tent before          %.2fx   (before / bwrap %.2fx)\n", ratio(2, 6), ratio(6, 1))
	}
}

// benchCase is a command to time as a whole process (argv) or a function
// run in this process (run).
type benchCase struct {
	name string
	argv []string
	run  func() error
}

// once runs c one time, its output discarded.
func (c benchCase) once() error {
	if c.run != nil {
		return c.run()
	}
	return exec.Command(c.argv[0], c.argv[1:]...).Run()
}

// check runs c one time and returns its output with its error.
func (c benchCase) check() error {
	if c.run != nil {
		return c.run()
	}
	if out, err := exec.Command(c.argv[0], c.argv[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
