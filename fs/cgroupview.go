package fs

import (
	"fmt"
	"strings"
)

// CgroupRoot is where a sandbox sees its own cgroup, as a container does.
const CgroupRoot = "/sys/fs/cgroup"

// CgroupDir is one directory of the sandbox's own cgroup, to be shown
// read-only inside (see [Plan.AddCgroupView]).
type CgroupDir struct {
	// Source is the directory's host path: the sandbox's cgroup v2
	// directory, or its directory in one cgroup v1 hierarchy.
	Source string `json:"source"`
	// Name is, on cgroup v1, the name of the hierarchy's directory under
	// CgroupRoot: the base name of the host's mount point ("memory",
	// "pids", "cpu,cpuacct"). It is "" on cgroup v2, whose single
	// directory is CgroupRoot itself.
	Name string `json:"name,omitempty"`
	// Links are further names under CgroupRoot that link to Name, as the
	// host has them for co-mounted controllers ("cpu" and "cpuacct" →
	// "cpu,cpuacct"). cgroup v1 only.
	Links []string `json:"links,omitempty"`
}

// AddCgroupView appends to p the steps that show the sandbox's own
// cgroup read-only at [CgroupRoot]:
//
//   - cgroup v2 (one dir with an empty Name): the directory is bound at
//     CgroupRoot;
//   - cgroup v1 (every dir named): a tmpfs at CgroupRoot, read-only once
//     filled, holding each hierarchy's directory bound at
//     CgroupRoot/Name, and the symlinks of Links.
//
// The binds ([KindCgroup]) are read-only, nosuid, nodev and noexec, and
// never Writable, so Landlock grants nothing beneath them either. The
// sandbox's commands run in a cgroup namespace whose root is this cgroup,
// so /proc/self/cgroup and /proc/self/mountinfo show it as "/", as in a
// container: runtimes (the JVM, Go, Node, Python) find their memory and
// CPU limits where they look for them. Nothing of the host's other
// cgroups is mounted. With no dirs (no cgroup) p is unchanged and the
// sandbox has no /sys at all. With a root of the caller's
// ([PlanInput].Root) the view's first step is [Step].Optional: mounted
// only where the root has /sys/fs/cgroup.
//
// p's steps must already be in parent-before-child order (as [NewPlan]
// makes them); the new ones go at the end, after every mount, and no
// caller's mount can lie beneath /sys (a reserved target).
func (p *Plan) AddCgroupView(dirs []CgroupDir) error {
	if len(dirs) == 0 {
		return nil
	}
	// A caller's root gets the view only where it has /sys/fs/cgroup:
	// tent makes no mount point in the caller's tree for it.
	optional := len(p.Steps) > 0 && p.Steps[0].Kind == KindRoot
	for _, s := range p.Steps {
		if s.Target == CgroupRoot || strings.HasPrefix(s.Target, CgroupRoot+"/") {
			return fmt.Errorf("cgroup view: %s is already in the plan", s.Target)
		}
	}
	for _, d := range dirs {
		if !strings.HasPrefix(d.Source, "/") {
			return fmt.Errorf("cgroup view: source %q is not absolute", d.Source)
		}
	}
	if len(dirs) == 1 && dirs[0].Name == "" {
		if len(dirs[0].Links) > 0 {
			return fmt.Errorf("cgroup view: a cgroup v2 directory has no links")
		}
		p.Steps = append(p.Steps, Step{Kind: KindCgroup, Target: CgroupRoot, Source: dirs[0].Source, ReadOnly: true, FD: -1, Optional: optional})
		return nil
	}
	used := map[string]bool{}
	name := func(n string) error {
		if n == "" || n == "." || n == ".." || strings.ContainsAny(n, "/\x00") {
			return fmt.Errorf("cgroup view: %q is not a directory name", n)
		}
		if used[n] {
			return fmt.Errorf("cgroup view: %q is used twice", n)
		}
		used[n] = true
		return nil
	}
	steps := []Step{{Kind: KindTmpfs, Target: CgroupRoot, Mode: 0o755, ReadOnly: true, FD: -1, Optional: optional}}
	var links []Step
	for _, d := range dirs {
		if err := name(d.Name); err != nil {
			return err
		}
		steps = append(steps, Step{Kind: KindCgroup, Target: CgroupRoot + "/" + d.Name, Source: d.Source, ReadOnly: true, FD: -1})
		for _, l := range d.Links {
			if err := name(l); err != nil {
				return err
			}
			links = append(links, Step{Kind: KindSymlink, Target: CgroupRoot + "/" + l, LinkTo: d.Name, FD: -1})
		}
	}
	p.Steps = append(append(p.Steps, steps...), links...)
	return nil
}
