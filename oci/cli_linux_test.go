package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/tent-sandbox/tent/sandbox/policy"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/tent-sandbox/tent/sandbox"
)

func runMain(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = Main(context.Background(), args, strings.NewReader(""), &o, &e)
	return o.String(), e.String(), code
}

// --version has runc's three lines.
func TestVersion(t *testing.T) {
	out, _, code := runMain(t, "--version")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "tent-runc version ") || !strings.HasPrefix(lines[1], "commit: ") || lines[2] != "spec: "+specs.Version {
		t.Errorf("--version: %d %q", code, out)
	}
}

// A fatal error goes to --log as runc's JSON line, which is what the
// shim reads after a failed create, and to stderr, which go-runc reads
// after a failed kill or delete.
func TestErrorLog(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "log.json")
	_, stderr, code := runMain(t, "--root", filepath.Join(dir, "root"), "--log", log, "--log-format", "json", "checkpoint", "x")
	if code != 1 || !strings.Contains(stderr, "checkpoint: not supported by tent-runc") {
		t.Errorf("checkpoint: exit %d, stderr %q: want 1 and the refusal", code, stderr)
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var line struct{ Level, Msg string }
	if err := json.Unmarshal(bytes.TrimSpace(data), &line); err != nil || line.Level != "error" || !strings.Contains(line.Msg, "checkpoint: not supported by tent-runc") {
		t.Errorf("log line %q (%v): want level error and the refusal", data, err)
	}
}

// delete --force of a container that is gone succeeds (the shim's
// cleanup calls it); without --force it fails, as runc's does.
func TestDeleteGone(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	if _, stderr, code := runMain(t, "--root", root, "delete", "--force", "gone"); code != 0 {
		t.Errorf("delete --force gone: exit %d %s", code, stderr)
	}
	if _, stderr, code := runMain(t, "--root", root, "delete", "gone"); code != 1 || !strings.Contains(stderr, "container does not exist") {
		t.Errorf("delete gone: exit %d %q", code, stderr)
	}
	if _, stderr, code := runMain(t, "--root", root, "kill", "../x", "9"); code != 1 || !strings.Contains(stderr, "invalid container id") {
		t.Errorf("kill ../x: exit %d %q", code, stderr)
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]syscall.Signal{"9": syscall.SIGKILL, "15": syscall.SIGTERM, "TERM": syscall.SIGTERM, "SIGKILL": syscall.SIGKILL, "hup": syscall.SIGHUP} {
		if got, err := policy.ParseSignal(in); err != nil || got != want {
			t.Errorf("%s: %v %v, want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"0", "65", "NOPE", ""} {
		if _, err := policy.ParseSignal(bad); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

func baseConfig() *specs.Spec {
	return &specs.Spec{Version: "1.0.2", Root: &specs.Root{Path: "rootfs"},
		Process: &specs.Process{Args: []string{"sh"}, Cwd: "/", Env: []string{"PATH=/bin"}, User: specs.User{UID: 1000, GID: 1000},
			Rlimits: []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Soft: 1024, Hard: 4096}}},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/run", Type: "tmpfs", Source: "tmpfs"},
			{Destination: "/etc/hosts", Type: "bind", Source: "/etc/hosts", Options: []string{"rbind", "ro"}},
			{Destination: "/dev/termination-log", Type: "bind", Source: "/tmp/termination-log", Options: []string{"rbind", "rw"}},
		},
		Linux: &specs.Linux{
			Namespaces:    []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.MountNamespace}},
			Resources:     &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: ptr(int64(64 << 20))}, Pids: &specs.LinuxPids{Limit: 50}, CPU: &specs.LinuxCPU{Quota: ptr(int64(50000)), Period: ptr(uint64(100000))}},
			MaskedPaths:   []string{"/proc/kcore"},
			ReadonlyPaths: []string{"/proc/sys"},
		}}
}

func ptr[T any](v T) *T { return &v }

// A bundle becomes a sandbox: its rootfs (relative to the bundle), user,
// limits, mounts (tent's own /proc), host network when it asks for no
// network namespace, masked and read-only paths.
func TestConvert(t *testing.T) {
	b, err := convert("/b", baseConfig())
	if err != nil {
		t.Fatal(err)
	}
	s := b.Spec
	switch {
	case s.Root == nil || s.Root.Path != "/b/rootfs" || s.Root.ReadOnly:
		t.Errorf("root %+v", s.Root)
	case s.User == nil || s.User.UID != 1000 || s.User.GID != 1000:
		t.Errorf("user %+v", s.User)
	case s.Limits.Memory != 64<<20 || s.Limits.Pids != 50 || s.Limits.CPUs != 0.5 || s.Limits.NoFile != 1024:
		t.Errorf("limits %+v", s.Limits)
	case len(s.Mounts) != 1 || s.Mounts[0] != (sandbox.Mount{Source: "/etc/hosts", Target: "/etc/hosts", Access: sandbox.ReadOnly}):
		t.Errorf("mounts %+v", s.Mounts)
	case len(s.Tmpfs) != 1 || s.Tmpfs[0] != "/run":
		t.Errorf("tmpfs %v", s.Tmpfs)
	case s.Network.Mode != "host":
		t.Errorf("network %+v: want host (no network namespace asked)", s.Network)
	case len(s.MaskedPaths) != 1 || len(s.ReadOnlyPaths) != 1:
		t.Errorf("masked %v, read-only %v", s.MaskedPaths, s.ReadOnlyPaths)
	case b.Main.Args[0] != "sh" || b.Main.Cwd != "/":
		t.Errorf("process %+v", b.Main)
	case s.IDRange == nil || *s.IDRange != DefaultIDRange:
		t.Errorf("id range %+v, want oci.DefaultIDRange", s.IDRange)
	}
	// The bundle's own range, additional groups and capabilities (the
	// ones tent grants; the others left out).
	cfg := baseConfig()
	cfg.Linux.UIDMappings = []specs.LinuxIDMapping{{HostID: 200000, Size: 65536}}
	cfg.Linux.GIDMappings = cfg.Linux.UIDMappings
	cfg.Process.User.AdditionalGids = []uint32{1000, 5, 27}
	// A user-namespaced pod's namespace, by path: the same range, the
	// container's own namespace.
	cfg.Linux.Namespaces = append(cfg.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace, Path: "/run/pod/userns"})
	cfg.Process.Capabilities = &specs.LinuxCapabilities{Permitted: []string{"CAP_CHOWN", "CAP_SYS_ADMIN", "CAP_NET_RAW"}, Ambient: []string{"CAP_CHOWN", "CAP_SYS_ADMIN"}}
	if b, err = convert("/b", cfg); err != nil {
		t.Fatal(err)
	}
	s = b.Spec
	if *s.IDRange != (sandbox.IDRange{Host: 200000, Size: 65536}) || !slices.Equal(s.User.Groups, []uint32{5, 27}) ||
		!slices.Equal(s.Capabilities, []string{"CAP_CHOWN"}) || !slices.Equal(s.AmbientCapabilities, []string{"CAP_CHOWN"}) {
		t.Errorf("range %+v, groups %v, capabilities %v, ambient %v", s.IDRange, s.User.Groups, s.Capabilities, s.AmbientCapabilities)
	}
}

// What tent cannot honour is refused, naming the field; a malformed
// bundle too.
func TestConvertRefused(t *testing.T) {
	for _, c := range []struct {
		name, field string
		change      func(*specs.Spec)
		want        error
	}{
		{"user namespace path without a range", "linux.namespaces[2] (user).path", func(s *specs.Spec) {
			s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace, Path: "/run/pod/userns"})
		}, ErrUnsupportedConfig},
		{"namespace path", "linux.namespaces[2] (mount).path", func(s *specs.Spec) {
			s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.MountNamespace, Path: "/proc/1/ns/mnt"})
		}, ErrUnsupportedConfig},
		{"relative netns", "linux.namespaces[2] (network).path", func(s *specs.Spec) {
			s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: "netns/x"})
		}, sandbox.ErrInvalidSpec},
		{"sysctl", "linux.sysctl", func(s *specs.Spec) { s.Linux.Sysctl = map[string]string{"kernel.core_pattern": "|/x"} }, ErrUnsupportedConfig},
		{"host net sysctl", "linux.sysctl", func(s *specs.Spec) { s.Linux.Sysctl = map[string]string{"net.ipv4.ip_forward": "1"} }, ErrUnsupportedConfig},
		{"sysctl name", "linux.sysctl", func(s *specs.Spec) { s.Linux.Sysctl = map[string]string{"fs/mqueue/../x": "1"} }, sandbox.ErrInvalidSpec},
		{"rlimit", "process.rlimits[1]", func(s *specs.Spec) {
			s.Process.Rlimits = append(s.Process.Rlimits, specs.POSIXRlimit{Type: "RLIMIT_CORE"})
		}, ErrUnsupportedConfig},
		{"mount type", "mounts[4] (/data)", func(s *specs.Spec) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/data", Type: "nfs", Source: "x:/y"})
		}, ErrUnsupportedConfig},
		{"hooks", "hooks", func(s *specs.Spec) { s.Hooks = &specs.Hooks{Poststart: []specs.Hook{{Path: "/bin/true"}}} }, ErrUnsupportedConfig},
		{"device", "linux.devices[0]", func(s *specs.Spec) { s.Linux.Devices = []specs.LinuxDevice{{Path: "/dev/kvm"}} }, ErrUnsupportedConfig},
		{"version", "ociVersion", func(s *specs.Spec) { s.Version = "0.9" }, sandbox.ErrInvalidSpec},
		{"no args", "process.args", func(s *specs.Spec) { s.Process.Args = nil }, sandbox.ErrInvalidSpec},
		{"relative cwd", "process.cwd", func(s *specs.Spec) { s.Process.Cwd = "tmp" }, sandbox.ErrInvalidSpec},
		{"bad seccomp", "linux.seccomp", func(s *specs.Spec) { s.Linux.Seccomp = &specs.LinuxSeccomp{DefaultAction: "SCMP_ACT_NOPE"} }, sandbox.ErrInvalidSpec},
		{"two id ranges", "linux.uidMappings", func(s *specs.Spec) {
			s.Linux.UIDMappings = []specs.LinuxIDMapping{{HostID: 100000, Size: 1000}, {ContainerID: 1000, HostID: 300000, Size: 1000}}
			s.Linux.GIDMappings = s.Linux.UIDMappings
		}, ErrUnsupportedConfig},
		{"gid range differs", "linux.gidMappings", func(s *specs.Spec) {
			s.Linux.UIDMappings = []specs.LinuxIDMapping{{HostID: 100000, Size: 65536}}
			s.Linux.GIDMappings = []specs.LinuxIDMapping{{HostID: 200000, Size: 65536}}
		}, ErrUnsupportedConfig},
		{"a mount's own idmapping", "mounts[4] (/data).uidMappings", func(s *specs.Spec) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/data", Type: "bind", Source: "/tmp", Options: []string{"rbind"},
				UIDMappings: []specs.LinuxIDMapping{{HostID: 5000, Size: 10}}, GIDMappings: []specs.LinuxIDMapping{{HostID: 5000, Size: 10}}})
		}, ErrUnsupportedConfig},
	} {
		cfg := baseConfig()
		c.change(cfg)
		_, err := convert("/b", cfg)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: got %v, want %v naming %s", c.name, err, c.want, c.field)
		}
	}
}

// linux.sysctl: the container's own namespaces' (IPC; net.* of its own
// network namespace) become the sandbox's Spec.Sysctls, which its init
// sets; net.* of a network namespace joined by path (a pod's) are set
// there by the runtime.
func TestConvertSysctls(t *testing.T) {
	cfg := baseConfig()
	cfg.Linux.Namespaces = append(cfg.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace})
	cfg.Linux.Sysctl = map[string]string{"kernel.shm_rmid_forced": "1", "fs.mqueue.msg_max": "100", "net.ipv4.ip_local_port_range": "20000 30000"}
	b, err := convert("/b", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(b.Spec.Sysctls, cfg.Linux.Sysctl) || len(b.Sysctls) != 0 {
		t.Errorf("own namespaces: the sandbox's %v, the runtime's %v; want all the sandbox's", b.Spec.Sysctls, b.Sysctls)
	}
	cfg = baseConfig()
	cfg.Linux.Namespaces = append(cfg.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: "/var/run/netns/pod"})
	cfg.Linux.Sysctl = map[string]string{"kernel.shm_rmid_forced": "1", "net.ipv4.ip_unprivileged_port_start": "0"}
	if b, err = convert("/b", cfg); err != nil {
		t.Fatal(err)
	}
	if len(b.Spec.Sysctls) != 1 || b.Spec.Sysctls["kernel.shm_rmid_forced"] != "1" || len(b.Sysctls) != 1 || b.Sysctls["net.ipv4.ip_unprivileged_port_start"] != "0" {
		t.Errorf("a joined network namespace: the sandbox's %v, the runtime's %v", b.Spec.Sysctls, b.Sysctls)
	}
	if len(b.PodSysctls) != 0 {
		t.Errorf("a container's own IPC sysctls became the pod's: %v", b.PodSysctls)
	}
	// A pod's sandbox container: its IPC sysctls are the pod's too.
	cfg.Annotations = map[string]string{"io.kubernetes.cri.container-type": "sandbox"}
	if b, err = convert("/b", cfg); err != nil {
		t.Fatal(err)
	}
	if b.Spec.Sysctls["kernel.shm_rmid_forced"] != "1" || len(b.PodSysctls) != 1 || b.PodSysctls["kernel.shm_rmid_forced"] != "1" {
		t.Errorf("a pod's sandbox container: its own %v, the pod's %v", b.Spec.Sysctls, b.PodSysctls)
	}
}
