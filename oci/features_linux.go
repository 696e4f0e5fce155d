package oci

import (
	"encoding/json"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
)

// features prints what tent-runc honours, in runtime-spec's features
// format: no hooks, no capabilities (every process runs with none), the
// namespaces it makes itself, seccomp.
func (g *globals) features() error {
	yes, no := true, false
	f := features.Features{
		OCIVersionMin: "1.0.0",
		OCIVersionMax: specs.Version,
		Hooks:         []string{},
		MountOptions:  []string{"bind", "rbind", "ro", "rw", "nosuid", "nodev", "noexec"},
		Linux: &features.Linux{
			Namespaces:   []string{"cgroup", "ipc", "mount", "network", "pid", "user", "uts"},
			Capabilities: []string{},
			Cgroup:       &features.Cgroup{V1: &yes, V2: &yes, Systemd: &no, SystemdUser: &no},
			Seccomp: &features.Seccomp{Enabled: &yes,
				Actions:   []string{"SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO", "SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS", "SCMP_ACT_KILL_THREAD", "SCMP_ACT_LOG", "SCMP_ACT_TRAP"},
				Operators: []string{"SCMP_CMP_EQ", "SCMP_CMP_GE", "SCMP_CMP_GT", "SCMP_CMP_LE", "SCMP_CMP_LT", "SCMP_CMP_MASKED_EQ", "SCMP_CMP_NE"},
				Archs:     []string{"SCMP_ARCH_X86_64"}},
			Apparmor: &features.Apparmor{Enabled: &no},
			Selinux:  &features.Selinux{Enabled: &no},
		},
		Annotations: map[string]string{"io.github.tent-sandbox.tent.landlock": "enforced", "io.github.tent-sandbox.tent.user-namespace": "always"},
	}
	out, err := json.MarshalIndent(f, "", "    ")
	if err != nil {
		return err
	}
	_, err = g.stdout.Write(append(out, '\n'))
	return err
}
