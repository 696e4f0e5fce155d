package oci

import (
	"encoding/json"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"

	"github.com/tent-sandbox/tent/sandbox"
)

// features prints what tent-runc honours, in runtime-spec's features
// format: no hooks, the capabilities it grants, the namespaces it makes
// itself, seccomp, idmapped mounts (every mount is idmapped with the
// container's id range: containerd then offers Kubernetes' user-namespaced
// pods, hostUsers: false, on this handler), recursive read-only binds
// (every read-only bind is: "ro" as "rro").
func (g *globals) features() error {
	yes, no := true, false
	caps := sandbox.GrantableCapabilities()
	f := features.Features{
		OCIVersionMin: "1.0.0",
		OCIVersionMax: specs.Version,
		Hooks:         []string{},
		MountOptions:  []string{"bind", "rbind", "ro", "rw", "nosuid", "nodev", "noexec", "idmap", "ridmap", "rro"},
		Linux: &features.Linux{
			Namespaces:      []string{"cgroup", "ipc", "mount", "network", "pid", "user", "uts"},
			Capabilities:    caps,
			MountExtensions: &features.MountExtensions{IDMap: &features.IDMap{Enabled: &yes}},
			Cgroup:          &features.Cgroup{V1: &yes, V2: &yes, Systemd: &no, SystemdUser: &no},
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
