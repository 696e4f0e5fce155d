package cli

import (
	"cmp"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

// RunOptions are tent run's flags (tent create's and tent mcp's too).
// Values are kept as text and parsed by [BuildSpec], so that errors name
// the flag and quote the value.
type RunOptions struct {
	ro, rw     []string
	cow        []string
	workdir    string
	net        string
	allowHosts []string
	denyHosts  []string
	secrets    []string
	secretFile []string
	netLog     string
	memory     string
	pids       string
	cpus       string
	timeout    string
	nofile     string
	env        []string
	envPass    []string
	envFile    []string
	envInherit bool
	user       string
	hostname   string
	sysctls    []string
	seccomp    string
	policy     string
	bestEffort bool
	rwGit      bool
	report     string
	reportTo   *reportDest // --report, opened before the run
	tier       string
}

// Register adds the flags to f.
func (o *RunOptions) Register(f *pflag.FlagSet) { o.register(f) }

// NetLog is --net-log as given.
func (o *RunOptions) NetLog() string { return o.netLog }

func (o *RunOptions) register(f *pflag.FlagSet) {
	f.SortFlags = false
	f.StringArrayVar(&o.ro, "ro", nil, "bind host path `SRC[:DST]` read-only (repeatable; DST defaults to SRC's absolute path)")
	f.StringArrayVar(&o.rw, "rw", nil, "bind host path `SRC[:DST]` read-write: writes reach the host (repeatable)")
	f.StringArrayVar(&o.cow, "cow", nil, "mount host path `SRC[:DST]` copy-on-write: the sandbox writes freely, the host directory never changes (repeatable; see tent diff and tent export)")
	f.BoolVar(&o.rwGit, "rw-git", false, "let the sandbox write the hooks and config of git repositories in --rw mounts (read-only by default: the host's next git command would run what it wrote there)")
	f.StringVar(&o.workdir, "workdir", "", "working `DIR` inside (default: the current directory when it lies in a mount target, else /)")
	f.StringVar(&o.net, "net", "none", "network: `none` (loopback only), limited (allowed hosts through tent's proxy) or host")
	f.StringArrayVar(&o.allowHosts, "allow-host", nil, "allow `PATTERN`: host, *.example.com, IP or CIDR, optional :PORT (repeatable; implies --net limited)")
	f.StringArrayVar(&o.denyHosts, "deny-host", nil, "deny `PATTERN` (repeatable; wins over --allow-host)")
	f.StringArrayVar(&o.secrets, "secret", nil, "give the sandbox the secret in tent's variable `NAME@HOST[,HOST]`: inside, NAME holds a placeholder that tent's proxy replaces with the value only in HTTPS requests to those hosts (repeatable; implies --net limited; the value is never written: see docs/secrets.md)")
	f.StringArrayVar(&o.secretFile, "secret-file", nil, "read --secret values from `FILE` of NAME=VALUE lines (mode 0600) instead of tent's environment (repeatable)")
	f.StringVar(&o.netLog, "net-log", "", "append every network decision to `FILE` as JSON lines (limited mode)")
	f.StringVar(&o.memory, "memory", "", "memory limit `SIZE`, e.g. 256M or 1G (powers of 1024)")
	f.StringVar(&o.pids, "pids", "", "maximum number of processes `N`")
	f.StringVar(&o.cpus, "cpus", "", "CPU bandwidth in cores `N.N`, e.g. 0.5")
	f.StringVar(&o.timeout, "timeout", "", "wall-clock limit `DURATION`, e.g. 500ms, 2s, 1m; the whole process tree is killed and tent exits 124")
	f.StringVar(&o.nofile, "nofile", "", "maximum number of open files `N` (RLIMIT_NOFILE)")
	f.StringArrayVar(&o.env, "env", nil, "set variable `K=V` (repeatable; wins over --env-pass and --env-file)")
	f.StringArrayVar(&o.envPass, "env-pass", nil, "copy variable `NAME` from tent's environment (repeatable)")
	f.StringArrayVar(&o.envFile, "env-file", nil, "read KEY=VALUE lines from `FILE` (repeatable, layered in order, later wins)")
	f.BoolVar(&o.envInherit, "env-inherit", false, "start from tent's whole environment instead of the clean default (PATH, HOME, TERM, LANG, TZ, USER)")
	f.StringVar(&o.user, "user", "", "identity inside, numeric `UID[:GID]` (GID defaults to UID)")
	f.StringVar(&o.hostname, "hostname", "", "host `NAME` inside (default \""+sandbox.DefaultHostname+"\", never the host's)")
	f.StringArrayVar(&o.sysctls, "sysctl", nil, "set sysctl `K=V` of the sandbox's own namespaces: kernel.msg*, kernel.sem, kernel.shm* and fs.mqueue.* (IPC: uid 0 inside only), net.* (its network; not with --net host); repeatable")
	f.StringVar(&o.seccomp, "seccomp", "default", "syscall filter: `default`, unconfined, or the path of an OCI/Docker seccomp JSON profile")
	f.StringVar(&o.policy, "policy", "", "read settings from a JSON or YAML policy `FILE`; flags override it")
	f.StringVar(&o.tier, "tier", "auto", "`TIER`: auto (full when user namespaces are available, else reduced), full, or reduced (no namespaces: Landlock, seccomp, no_new_privs, rlimits/cgroup; one-shot tent run only)")
	f.BoolVar(&o.bestEffort, "best-effort", false, "run even when the host cannot provide a requested protection, and warn about each one")
	f.StringVar(&o.report, "report", "", "write a JSON report of the run to `FILE` (- for stdout; also when the command fails)")
}

// lookupEnv reads tent's own environment (os.LookupEnv in a program).
type lookupEnv func(string) (string, bool)

// BuildSpec makes the sandbox spec: the policy file first, then every
// flag the user set. Relative host paths of flags are relative to cwd.
func BuildSpec(f *pflag.FlagSet, o *RunOptions, getenv lookupEnv, cwd string, log *slog.Logger) (sandbox.Spec, error) {
	var spec sandbox.Spec
	// sources maps each variable of tent's environment a secret's value
	// is read from to the secret's name.
	sources := map[string]string{}
	if o.policy != "" {
		p, err := policy.Load(o.policy)
		if err != nil {
			return spec, err
		}
		if err := p.Apply(&spec, getenv); err != nil {
			return spec, err
		}
		warnUnset(log, "policy env_pass", p.EnvPass, getenv)
		for _, sec := range p.Secrets {
			if sec.File == "" {
				sources[cmp.Or(sec.Env, sec.Name)] = sec.Name
			}
		}
	}
	policyEnv := len(spec.Env)
	if err := o.applyMounts(&spec, cwd); err != nil {
		return spec, err
	}
	if err := o.applyLimits(f, &spec.Limits); err != nil {
		return spec, err
	}
	if err := o.applyEnv(f, &spec, getenv, log); err != nil {
		return spec, err
	}
	var err error
	if f.Changed("workdir") {
		spec.Workdir = o.workdir
	}
	if f.Changed("net") {
		if spec.Network.Mode, err = policy.ParseNet(o.net); err != nil {
			return spec, fmt.Errorf("--net: %w", err)
		}
	}
	if err := o.applySecrets(&spec, getenv, sources); err != nil {
		return spec, err
	}
	if err := o.checkSecretEnv(spec, policyEnv, sources); err != nil {
		return spec, err
	}
	if len(o.allowHosts)+len(o.denyHosts)+len(o.secrets) > 0 {
		if !f.Changed("net") && spec.Network.Mode != "host" {
			spec.Network.Mode = "limited" // host rules imply limited
		}
		spec.Network.AllowedHosts = append(spec.Network.AllowedHosts, o.allowHosts...)
		spec.Network.DeniedHosts = append(spec.Network.DeniedHosts, o.denyHosts...)
	}
	if err := spec.Network.Validate(); err != nil {
		return spec, fmt.Errorf("--net/--allow-host/--deny-host/--secret: %w", err)
	}
	if f.Changed("user") {
		if spec.User, err = policy.ParseUser(o.user); err != nil {
			return spec, fmt.Errorf("--user %q: %w", o.user, err)
		}
	}
	if f.Changed("hostname") {
		spec.Hostname = o.hostname
	}
	for _, kv := range o.sysctls {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return spec, fmt.Errorf("--sysctl %q: want K=V", kv)
		}
		if spec.Sysctls == nil {
			spec.Sysctls = map[string]string{}
		}
		spec.Sysctls[k] = v
	}
	if f.Changed("seccomp") {
		if spec.Seccomp, err = policy.LoadSeccomp(o.seccomp, cwd); err != nil {
			return spec, fmt.Errorf("--seccomp: %w", err)
		}
	}
	if f.Changed("best-effort") {
		spec.BestEffort = o.bestEffort
	}
	if f.Changed("rw-git") {
		spec.GitWritable = o.rwGit
	}
	if f.Changed("tier") {
		if spec.Tier, err = policy.ParseTier(o.tier); err != nil {
			return spec, fmt.Errorf("--tier: %w", err)
		}
	}
	return spec, nil
}

// applyMounts adds --ro and --rw mounts. A flag's mount replaces a policy
// mount with the same target; two flags with one target stay an error.
func (o *RunOptions) applyMounts(spec *sandbox.Spec, cwd string) error {
	var mounts []sandbox.Mount
	for _, l := range []struct {
		values []string
		access sandbox.Access
	}{{o.ro, sandbox.ReadOnly}, {o.rw, sandbox.ReadWrite}, {o.cow, sandbox.CopyOnWrite}} {
		for _, v := range l.values {
			m, err := policy.ParseMount(v, l.access, cwd)
			if err != nil {
				return err
			}
			mounts = append(mounts, m)
		}
	}
	if len(mounts) == 0 {
		return nil
	}
	kept := spec.Mounts[:0]
	for _, pm := range spec.Mounts {
		overridden := false
		for _, m := range mounts {
			overridden = overridden || m.Target == pm.Target
		}
		if !overridden {
			kept = append(kept, pm)
		}
	}
	spec.Mounts = append(kept, mounts...)
	return nil
}

func (o *RunOptions) applyLimits(f *pflag.FlagSet, l *sandbox.Limits) error {
	var err error
	if f.Changed("memory") {
		if l.Memory, err = policy.ParseSize(o.memory); err != nil {
			return fmt.Errorf("--memory %q: %w", o.memory, err)
		}
	}
	if f.Changed("pids") {
		// 0 is refused rather than read as "no limit": a cap of zero
		// processes is a mistake, and no limit is leaving the flag out.
		n, err := strconv.ParseInt(o.pids, 10, 64)
		if err != nil || n < 1 {
			return fmt.Errorf("--pids %q: want a whole number of processes of at least 1, e.g. 64 (leave the flag out for no limit)", o.pids)
		}
		l.Pids = n
	}
	if f.Changed("cpus") {
		n, err := strconv.ParseFloat(o.cpus, 64)
		if err != nil || n < 0 || math.IsNaN(n) || math.IsInf(n, 0) {
			return fmt.Errorf("--cpus %q: want a number of cores, e.g. 0.5 or 2 (0: no limit)", o.cpus)
		}
		l.CPUs = n
	}
	if f.Changed("timeout") {
		if l.Timeout, err = policy.ParseDuration(o.timeout); err != nil {
			return fmt.Errorf("--timeout %q: %w", o.timeout, err)
		}
	}
	if f.Changed("nofile") {
		n, err := strconv.ParseUint(o.nofile, 10, 64)
		if err != nil {
			return fmt.Errorf("--nofile %q: want a whole number of file descriptors, e.g. 1024 (0: no limit)", o.nofile)
		}
		l.NoFile = n
	}
	return nil
}

// applyEnv layers --env-file files in order, then --env-pass, then --env
// over what the policy set; later entries win.
func (o *RunOptions) applyEnv(f *pflag.FlagSet, spec *sandbox.Spec, getenv lookupEnv, log *slog.Logger) error {
	for _, path := range o.envFile {
		kvs, err := policy.ReadEnvFile(path)
		if err != nil {
			return fmt.Errorf("--env-file: %w", err)
		}
		spec.Env = append(spec.Env, kvs...)
	}
	for _, name := range o.envPass {
		if !policy.ValidEnvName(name) {
			return fmt.Errorf("--env-pass %q: not a variable name (to set a value, use --env K=V)", name)
		}
		if v, ok := getenv(name); ok {
			spec.Env = append(spec.Env, name+"="+v)
		}
	}
	warnUnset(log, "--env-pass", o.envPass, getenv)
	for _, kv := range o.env {
		if _, err := policy.ParseEnv(kv); err != nil {
			return fmt.Errorf("--env %q: %w (to copy a variable from your environment, use --env-pass NAME)", kv, err)
		}
		spec.Env = append(spec.Env, kv)
	}
	if f.Changed("env-inherit") {
		spec.EnvInherit = o.envInherit
	}
	return nil
}

// warnUnset logs (with -v) the names of env_pass variables that are not
// set: they are not passed.
func warnUnset(log *slog.Logger, what string, names []string, getenv lookupEnv) {
	if log == nil {
		return
	}
	for _, name := range names {
		if _, ok := getenv(name); !ok {
			log.Warn(what+": variable is not set in tent's environment; not passed", "name", name)
		}
	}
}

// applySecrets adds --secret's secrets, their values from --secret-file
// or tent's environment. A --secret replaces a policy secret of the same
// name.
func (o *RunOptions) applySecrets(spec *sandbox.Spec, getenv lookupEnv, sources map[string]string) error {
	values := map[string]string{}
	for _, path := range o.secretFile {
		m, err := policy.ReadSecretFile(path)
		if err != nil {
			return fmt.Errorf("--secret-file: %w", err)
		}
		for k, v := range m {
			values[k] = v
		}
	}
	for _, v := range o.secrets {
		s, err := policy.ParseSecretFlag(v, values, getenv)
		if err != nil {
			shown := v
			if i := strings.IndexByte(v, '='); i >= 0 {
				shown = v[:i] + "=..." // never repeat a value
			}
			return fmt.Errorf("--secret %q: %w", shown, err)
		}
		for i := len(spec.Network.Secrets) - 1; i >= 0; i-- {
			if spec.Network.Secrets[i].Name == s.Name {
				spec.Network.Secrets = slices.Delete(spec.Network.Secrets, i, i+1)
			}
		}
		spec.Network.Secrets = append(spec.Network.Secrets, s)
		if _, fromFile := values[s.Name]; !fromFile {
			sources[s.Name] = s.Name
		}
	}
	return nil
}

// checkSecretEnv refuses an environment option that names a variable a
// secret's value is read from, or a secret's own variable (inside, its
// placeholder): the value never enters the sandbox, and an explicit
// option that would put it (or replace the placeholder) there is a
// mistake to say, not to drop. spec.Env's first policyEnv entries are
// the policy file's. (--env-inherit, which names no variable, leaves them
// out silently: the sandbox drops every inherited variable holding a
// secret's value.)
func (o *RunOptions) checkSecretEnv(spec sandbox.Spec, policyEnv int, sources map[string]string) error {
	secretOf := func(k string) (string, bool) {
		if name, ok := sources[k]; ok {
			return name, true
		}
		for _, sec := range spec.Network.Secrets {
			if sec.Name == k {
				return sec.Name, true
			}
		}
		return "", false
	}
	check := func(what, k string) error {
		name, ok := secretOf(k)
		if !ok {
			return nil
		}
		if k == name {
			return fmt.Errorf("%s %s: %s is secret %s's variable: inside it holds the secret's placeholder and tent never passes its value; leave %s out of the environment options", what, k, k, name, k)
		}
		return fmt.Errorf("%s %s: secret %s's value is read from %s, which never enters the sandbox (inside, %s holds the placeholder); leave %s out of the environment options", what, k, name, k, name, k)
	}
	for _, kv := range spec.Env[:policyEnv] {
		k, _, _ := strings.Cut(kv, "=")
		if err := check("--policy "+o.policy+": env, env_pass or env_file sets", k); err != nil {
			return err
		}
	}
	for _, path := range o.envFile {
		kvs, err := policy.ReadEnvFile(path)
		if err != nil {
			return fmt.Errorf("--env-file: %w", err)
		}
		for _, kv := range kvs {
			k, _, _ := strings.Cut(kv, "=")
			if err := check("--env-file "+path+" sets", k); err != nil {
				return err
			}
		}
	}
	for _, k := range o.envPass {
		if err := check("--env-pass", k); err != nil {
			return err
		}
	}
	for _, kv := range o.env {
		k, _, _ := strings.Cut(kv, "=")
		if err := check("--env", k); err != nil {
			return err
		}
	}
	return nil
}
