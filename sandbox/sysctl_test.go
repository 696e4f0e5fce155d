package sandbox_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
)

// hostSysctls reads the host's values of the sysctls the tests set.
func hostSysctls(t *testing.T, names ...string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, n := range names {
		b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(n, ".", "/"))
		if err != nil {
			t.Fatal(err)
		}
		m[n] = strings.TrimSpace(string(b))
	}
	return m
}

// TestSysctlsAreTheSandboxs: Spec.Sysctls are set in the sandbox's own IPC
// and network namespaces (the spec's value wins over tent's own
// ip_unprivileged_port_start), and the host's stay as they were.
func TestSysctlsAreTheSandboxs(t *testing.T) {
	set := map[string]string{
		"kernel.shm_rmid_forced":              "1",
		"kernel.msgmax":                       "4096",
		"fs.mqueue.msg_max":                   "100",
		"net.ipv4.ip_local_port_range":        "20000 30000",
		"net.ipv4.ip_unprivileged_port_start": "1024",
	}
	var names []string
	for k := range set {
		names = append(names, k)
	}
	before := hostSysctls(t, names...)
	script := ""
	for _, n := range names {
		script += "echo " + n + "=$(cat /proc/sys/" + strings.ReplaceAll(n, ".", "/") + ");"
	}
	// Root inside: the IPC namespace's sysctls are its root's to set.
	out := mustRun(t, sandbox.Spec{Sysctls: set, Identity: sandbox.Identity{User: &sandbox.User{}}}, "sh", "-c", script)
	for _, n := range names {
		if !strings.Contains(out+"\n", n+"="+set[n]+"\n") {
			t.Errorf("inside, %s: want %s in\n%s", n, set[n], out)
		}
	}
	// A limited sandbox has its own network namespace too.
	out = mustRun(t, sandbox.Spec{Sysctls: map[string]string{"net.ipv4.tcp_syncookies": "0"}, Networking: sandbox.Networking{Network: sandbox.NetworkPolicy{Mode: netpolicy.Limited, AllowedHosts: []string{"example.com"}}}}, "cat", "/proc/sys/net/ipv4/tcp_syncookies")
	if out != "0" {
		t.Errorf("a limited sandbox's net.ipv4.tcp_syncookies: %q, want 0", out)
	}
	for n, v := range hostSysctls(t, names...) {
		if v != before[n] {
			t.Errorf("the host's %s changed: %s, was %s", n, v, before[n])
		}
	}
}

// TestSysctlsRefused: a sysctl that is not the sandbox's own, a net.*
// one with the host's network, a name that could climb /proc/sys, a value
// of several lines: ErrInvalidSpec naming it, before anything runs; a
// value the kernel refuses fails the start naming the sysctl; the
// reduced tier has no namespaces to set them in.
func TestSysctlsRefused(t *testing.T) {
	for _, c := range []struct {
		spec sandbox.Spec
		want string
	}{
		{sandbox.Spec{Sysctls: map[string]string{"kernel.core_pattern": "|/tmp/x"}}, "sysctls: kernel.core_pattern is not a sysctl of the sandbox's own namespaces"},
		{sandbox.Spec{Sysctls: map[string]string{"vm.overcommit_memory": "1"}}, "sysctls: vm.overcommit_memory is not"},
		{sandbox.Spec{Sysctls: map[string]string{"net.ipv4.ip_forward": "1"}, Networking: sandbox.Networking{Network: sandbox.NetworkPolicy{Mode: netpolicy.Host}}}, "network mode host"},
		{sandbox.Spec{Sysctls: map[string]string{"fs.mqueue..": "1"}}, "is not a sysctl name"},
		{sandbox.Spec{Sysctls: map[string]string{"fs.mqueue/../../kernel/core_pattern": "1"}}, "is not a sysctl name"},
		{sandbox.Spec{Sysctls: map[string]string{"kernel.shmmax": "1\n2"}}, "must be one line"},
		{sandbox.Spec{Sysctls: map[string]string{"kernel.shmmax": ""}}, "must be one line"},
	} {
		_, _, err := run(t, c.spec, "true")
		if !errors.Is(err, sandbox.ErrInvalidSpec) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want ErrInvalidSpec with %q", c.spec.Sysctls, err, c.want)
		}
	}
	_, _, err := run(t, sandbox.Spec{Sysctls: map[string]string{"kernel.shm_rmid_forced": "7"}, Identity: sandbox.Identity{User: &sandbox.User{}}}, "true")
	if err == nil || !strings.Contains(err.Error(), `sysctl kernel.shm_rmid_forced="7"`) {
		t.Errorf("a value the kernel refuses: %v", err)
	}
	_, _, err = run(t, sandbox.Spec{Tier: sandbox.TierReduced, Sysctls: map[string]string{"kernel.shm_rmid_forced": "1"}}, "true")
	var ue *sandbox.UnsupportedError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "sysctls") {
		t.Errorf("sysctls in the reduced tier: %v, want an UnsupportedError naming them", err)
	}
	// Not root inside: the IPC ones are refused up front, the network
	// ones set.
	user := &sandbox.User{UID: 1000, GID: 1000}
	_, _, err = run(t, sandbox.Spec{Identity: sandbox.Identity{User: user}, Sysctls: map[string]string{"kernel.shm_rmid_forced": "1"}}, "true")
	if !errors.Is(err, sandbox.ErrInvalidSpec) || errors.As(err, &ue) || !strings.Contains(err.Error(), "sysctls: kernel.shm_rmid_forced") || !strings.Contains(err.Error(), "uid 1000") {
		t.Errorf("an IPC sysctl with uid 1000 inside: %v, want ErrInvalidSpec naming it and the uid (not an UnsupportedError: a caller falling back on those would run it otherwise)", err)
	}
	if out := mustRun(t, sandbox.Spec{Identity: sandbox.Identity{User: user}, Sysctls: map[string]string{"net.ipv4.tcp_syncookies": "0"}}, "cat", "/proc/sys/net/ipv4/tcp_syncookies"); out != "0" {
		t.Errorf("a network sysctl with uid 1000 inside: %q, want 0", out)
	}
}
