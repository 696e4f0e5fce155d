//go:build linux

package doctor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/cgroups"
	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/sandbox/doctor"
)

var doctorChecks = []string{
	"user namespaces", "landlock", "seccomp", "cgroups",
	"overlayfs in userns", "idmapped mounts", "kernel",
}

// children lists the pids of this process's children.
func children(t *testing.T) []string {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/children")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range tasks {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // the thread exited
		}
		out = append(out, strings.Fields(string(data))...)
	}
	return out
}

// runDoctor runs Doctor with TMPDIR pointing at an empty directory and
// checks that it leaves neither files there nor child processes.
func runDoctor(t *testing.T, ctx context.Context) *doctor.Report {
	t.Helper()
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	before := children(t)
	r := doctor.Run(ctx)
	if left, err := os.ReadDir(tmp); err != nil || len(left) > 0 {
		t.Errorf("Doctor left %v in its temporary directory (err %v)", left, err)
	}
	for _, pid := range children(t) {
		if !slices.Contains(before, pid) {
			t.Errorf("Doctor left child process %s running", pid)
		}
	}
	return r
}

// TestDoctorThisHost checks the doctor against this host's own facts,
// read independently: the Landlock ABI the kernel reports, the cgroup
// layout of /proc/self/mountinfo, seccomp, user namespaces.
func TestDoctorThisHost(t *testing.T) {
	r := runDoctor(t, context.Background())
	byName := map[string]doctor.Check{}
	for _, c := range r.Checks {
		byName[c.Name] = c
		t.Logf("%-20s %-9s %s | %s", c.Name, c.Status, c.Detail, c.Fix)
	}
	var names []string
	for _, c := range r.Checks {
		names = append(names, c.Name)
	}
	if !slices.Equal(names, doctorChecks) {
		t.Fatalf("checks = %q, want %q", names, doctorChecks)
	}
	want := func(name, status, detail string) {
		t.Helper()
		c := byName[name]
		if c.Status != status || !strings.Contains(c.Detail, detail) {
			t.Errorf("%s = %+v, want status %s with detail containing %q", name, c, status, detail)
		}
	}
	if abi, err := fs.LandlockABI(); err == nil && abi >= 6 {
		want("landlock", "available", fmt.Sprintf("ABI %d", abi))
	} else if err == nil {
		want("landlock", "degraded", fmt.Sprintf("ABI %d", abi))
	}
	want("seccomp", "available", "kill_process")
	want("user namespaces", "available", "probe ok")
	want("kernel", "available", "Linux 6.")
	host, err := cgroups.Detect("/proc")
	if err != nil {
		t.Fatal(err)
	}
	if c := byName["cgroups"]; !strings.HasPrefix(c.Detail, host.Mode.String()) {
		t.Errorf("cgroups = %+v, want this host's mode %s", c, host.Mode)
	}
	if os.Geteuid() == 0 && host.Mode == cgroups.Hybrid {
		want("cgroups", "available", "v1 sandbox cgroups")
	}
	for _, c := range r.Checks {
		if c.Status != "available" && c.Fix == "" && c.Status != "unknown" {
			t.Errorf("%s is %s without a fix", c.Name, c.Status)
		}
	}

	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	for _, name := range doctorChecks {
		if !strings.Contains(buf.String(), name) {
			t.Errorf("WriteText output lacks %q:\n%s", name, buf.String())
		}
	}
	data, err := json.Marshal(r)
	if err != nil || !strings.Contains(string(data), `"checks":[{"name":"user namespaces","status":"available"`) {
		t.Errorf("JSON = %s, %v", data, err)
	}
}

func TestDoctorWriteText(t *testing.T) {
	r := &doctor.Report{Checks: []doctor.Check{
		{Name: "seccomp", Status: "available", Detail: "ok"},
		{Name: "user namespaces", Status: "missing", Detail: "why", Fix: "do this"},
	}}
	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	want := "seccomp          available  ok\n" +
		"user namespaces  missing    why\n" +
		"                 fix: do this\n"
	if buf.String() != want {
		t.Errorf("WriteText =\n%s\nwant\n%s", buf.String(), want)
	}
}
