package sandbox

// Tier is how a sandbox is built.
//
//   - [TierFull]: the sandbox as the package documentation describes it,
//     in fresh user, mount, pid, ipc, uts, cgroup and network namespaces.
//   - [TierReduced]: for hosts where user namespaces are unavailable
//     (user.max_user_namespaces=0, kernel.unprivileged_userns_clone=0,
//     Ubuntu's kernel.apparmor_restrict_unprivileged_userns=1, containers
//     that block them). The command runs on the host's filesystem and
//     process tree, restricted by what needs no namespace: Landlock path
//     rules (the mounts, on their host paths), seccomp, no_new_privs, no
//     capabilities, rlimits, a cgroup where one is writable, network none
//     through seccomp and Landlock. A spec that needs more (a hostname,
//     cow mounts, limited network, a mount whose target differs from its
//     source, ...) is refused with an [*UnsupportedError] unless
//     BestEffort. Only one-shot commands ([Cmd]) support it.
//
// The zero value, [TierAuto], picks the full tier when this process can
// create user namespaces and the reduced tier otherwise (see
// [UserNamespaces]); the [Report] says which ran.
type Tier string

// Tiers.
const (
	TierAuto    Tier = ""
	TierFull    Tier = "full"
	TierReduced Tier = "reduced"
)
