package cgroups_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os/exec"
	"syscall"

	"github.com/tent-sandbox/tent/cgroups"
)

// Run one command in a cgroup of its own with 256 MiB, 64 tasks and one CPU,
// then report what it used. On cgroup v2 the command starts inside the
// cgroup (CLONE_INTO_CGROUP); on v1 it is moved in right after it starts.
func Example() {
	ctx := context.Background()
	h, err := cgroups.Detect("/proc")
	if err != nil {
		log.Fatal(err)
	}
	cg, err := cgroups.Create(h, "tent-example", cgroups.Limits{Memory: 256 << 20, Pids: 64, CPUs: 1})
	if errors.Is(err, cgroups.ErrNotDelegated) {
		log.Fatalf("no cgroup for the sandbox: %v", err) // the message says how to get one
	}
	if err != nil {
		log.Fatal(err)
	}
	defer cg.Destroy(ctx)

	cmd := exec.Command("make", "test")
	fd, intoCgroup := cg.FD()
	if intoCgroup {
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	}
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	if !intoCgroup {
		if err := cg.AddProc(cmd.Process.Pid); err != nil {
			log.Fatal(err)
		}
	}
	_ = cmd.Wait()
	st, err := cg.Stats()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s cgroup: peak %d bytes, %d OOM kills\n", cg.Version(), st.MemoryPeak, st.OOMKills)
}

// tent doctor: say whether sandboxes can get a cgroup here, and how to fix
// it if not.
func ExampleCanCreate() {
	h, err := cgroups.Detect("/proc")
	if err != nil {
		log.Fatal(err)
	}
	v, err := cgroups.CanCreate(h)
	if err != nil {
		fmt.Printf("cgroups (%s host, %s): not available: %v\n", h.Mode, v, err)
		return
	}
	fmt.Printf("cgroups (%s host): %s\n", h.Mode, v)
}
