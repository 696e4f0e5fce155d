package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
)

// Policy is the tent CLI's --policy file: the settings of `tent run`'s
// flags as JSON or YAML. Every key is optional; an unset key leaves the
// spec (and so the default) alone, and flags given on the command line
// override the file. Unknown keys are errors. Relative host paths
// (mount sources, env_file, a seccomp profile) are relative to the
// directory of the policy file.
//
//	mounts:                  # host paths to bind; target defaults to the
//	  - source: ./src        # source's absolute path, access to ro
//	    target: /work
//	    access: rw           # ro | rw
//	ro: ["/data:/data"]      # SRC[:DST], as --ro
//	rw: ["./out:/out"]       # SRC[:DST], as --rw
//	rw_git: false            # as --rw-git: git hooks and config of rw mounts writable
//	workdir: /work           # as --workdir
//	net: none                # none | host
//	memory: 256M             # as --memory; a number is bytes
//	pids: 64
//	cpus: 1.5
//	timeout: 30s             # Go duration; 0 means none
//	nofile: 1024
//	env_file: [.env]         # KEY=VALUE files, layered in order
//	env_pass: [HOME_DIR]     # copied from the caller's environment when set
//	env: {KEY: value}        # or a list ["KEY=value"]
//	env_inherit: false       # true: the caller's whole environment as the base
//	user: "1000:1000"        # UID[:GID]
//	hostname: box
//	sysctls: {kernel.shm_rmid_forced: "1"}  # as --sysctl: the sandbox's own IPC and network ones
//	seccomp: default         # default | unconfined | PATH to an OCI/Docker profile
//	best_effort: false
//	secrets:                 # see Secret: values come from the environment
//	  - name: GITHUB_TOKEN   # or a file, never from the policy itself
//	    hosts: [api.github.com]
//	service:                 # see Service: a command the sandbox keeps running
//	  start: "python3 -m http.server 8000"
//	  ready_port: 8000
//
// The same document in JSON uses the same keys. Sizes, durations and
// the user may be written as strings or numbers. Environment layers
// apply in the order env_file, env_pass, env (later wins); the CLI's
// --env-file, --env-pass and --env come after them.
type Policy struct {
	Mounts     []Mount           `json:"mounts,omitempty" yaml:"mounts,omitempty"`
	RO         []string          `json:"ro,omitempty" yaml:"ro,omitempty"`
	RW         []string          `json:"rw,omitempty" yaml:"rw,omitempty"`
	RWGit      bool              `json:"rw_git,omitempty" yaml:"rw_git,omitempty"`
	Workdir    string            `json:"workdir,omitempty" yaml:"workdir,omitempty"`
	Net        string            `json:"net,omitempty" yaml:"net,omitempty"`
	AllowHosts []string          `json:"allowed_hosts,omitempty" yaml:"allowed_hosts,omitempty"`
	DenyHosts  []string          `json:"denied_hosts,omitempty" yaml:"denied_hosts,omitempty"`
	Secrets    []Secret          `json:"secrets,omitempty" yaml:"secrets,omitempty"`
	Memory     Scalar            `json:"memory,omitempty" yaml:"memory,omitempty"`
	Pids       int64             `json:"pids,omitempty" yaml:"pids,omitempty"`
	CPUs       float64           `json:"cpus,omitempty" yaml:"cpus,omitempty"`
	Timeout    Scalar            `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	NoFile     uint64            `json:"nofile,omitempty" yaml:"nofile,omitempty"`
	EnvFile    []string          `json:"env_file,omitempty" yaml:"env_file,omitempty"`
	EnvPass    []string          `json:"env_pass,omitempty" yaml:"env_pass,omitempty"`
	Env        EnvVars           `json:"env,omitempty" yaml:"env,omitempty"`
	EnvInherit bool              `json:"env_inherit,omitempty" yaml:"env_inherit,omitempty"`
	User       Scalar            `json:"user,omitempty" yaml:"user,omitempty"`
	Hostname   string            `json:"hostname,omitempty" yaml:"hostname,omitempty"`
	Sysctls    map[string]string `json:"sysctls,omitempty" yaml:"sysctls,omitempty"`
	Seccomp    string            `json:"seccomp,omitempty" yaml:"seccomp,omitempty"`
	BestEffort bool              `json:"best_effort,omitempty" yaml:"best_effort,omitempty"`
	Service    *Service          `json:"service,omitempty" yaml:"service,omitempty"`

	// Dir is the directory relative host paths are resolved against;
	// [Load] sets it to the file's directory, "" means the current
	// working directory.
	Dir string `json:"-" yaml:"-"`
}

// Mount is one entry of a policy's mounts.
type Mount struct {
	Source string `json:"source" yaml:"source"`
	// Target defaults to Source's absolute path.
	Target string `json:"target,omitempty" yaml:"target,omitempty"`
	// Access is ro (the default) or rw.
	Access fs.Access `json:"access,omitempty" yaml:"access,omitempty"`
}

// Error is a policy that cannot be read or applied. It matches
// sandbox.ErrInvalidSpec and wraps the cause.
type Error struct {
	// Where is the policy file (for read and syntax errors) or the key,
	// such as "memory" or "mounts[1]".
	Where string
	Err   error
}

func (e *Error) Error() string { return "policy " + e.Where + ": " + e.Err.Error() }

// Unwrap returns sandbox.ErrInvalidSpec and the cause.
func (e *Error) Unwrap() []error { return []error{sandbox.ErrInvalidSpec, e.Err} }

func policyErr(where, value string, err error) error {
	if value != "" {
		err = fmt.Errorf("%q: %w", value, err)
	}
	return &Error{Where: where, Err: err}
}

// maxPolicySize bounds a policy file.
const maxPolicySize = 1 << 20

// Load reads a policy file. The format follows the extension
// (.json, or .yaml/.yml); any other name is JSON when its first
// non-blank character is '{', else YAML. Unknown keys are errors. The
// returned policy's Dir is the file's directory. Errors are
// [*Error]s.
func Load(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &Error{Where: path, Err: err}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPolicySize+1))
	if err != nil {
		return nil, &Error{Where: path, Err: err}
	}
	if len(data) > maxPolicySize {
		return nil, &Error{Where: path, Err: errors.New("larger than 1 MiB")}
	}
	var asJSON bool
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		asJSON = true
	case ".yaml", ".yml":
	default:
		asJSON = bytes.HasPrefix(bytes.TrimSpace(data), []byte("{"))
	}
	p, err := Parse(data, asJSON)
	if err != nil {
		return nil, &Error{Where: path, Err: err}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, &Error{Where: path, Err: err}
	}
	p.Dir = filepath.Dir(abs)
	return p, nil
}

// Parse decodes a policy document, JSON when asJSON is set, else
// YAML. An empty document is an empty policy. It checks syntax and key
// names only; [Policy.Apply] checks the values.
func Parse(data []byte, asJSON bool) (*Policy, error) {
	var p Policy
	if len(bytes.TrimSpace(data)) == 0 {
		return &p, nil
	}
	if asJSON {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		err := dec.Decode(&p)
		if err == nil && dec.More() {
			err = errors.New("unexpected data after the JSON object")
		}
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case err == nil:
			return &p, nil
		case errors.As(err, &se):
			return nil, fmt.Errorf("invalid JSON at byte %d: %v", se.Offset, se)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return nil, errors.New("invalid JSON: unexpected end of file")
		case errors.As(err, &te) && te.Field != "":
			return nil, fmt.Errorf("%s: cannot use a JSON %s as %s", te.Field, te.Value, te.Type)
		}
		if key, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return nil, fmt.Errorf("unknown key %s (%s)", key, knownKeys)
		}
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(&p)
	if errors.Is(err, io.EOF) {
		return &p, nil
	}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs := make([]string, len(te.Errors))
		for i, m := range te.Errors {
			if line, key, ok := yamlUnknownKey(m); ok {
				m = fmt.Sprintf("%s: unknown key %q (%s)", line, key, knownKeys)
			}
			msgs[i] = m
		}
		return nil, errors.New(strings.Join(msgs, "; "))
	}
	if err != nil {
		return nil, fmt.Errorf("invalid YAML: %w", err)
	}
	return &p, nil
}

// yamlUnknownKey picks the line and key out of yaml.v3's message
// "line 3: field bogus not found in type policy.Policy".
func yamlUnknownKey(msg string) (line, key string, ok bool) {
	line, rest, ok := strings.Cut(msg, ": field ")
	if !ok || !strings.HasPrefix(line, "line ") {
		return "", "", false
	}
	key, _, ok = strings.Cut(rest, " not found in type ")
	return line, key, ok
}

const knownKeys = "known keys: mounts (source, target, access), ro, rw, rw_git, workdir, net, memory, pids, cpus, timeout, nofile, env_file, env_pass, env, env_inherit, user, hostname, sysctls, seccomp, best_effort, service (start, command, env, workdir, ready_port, ready_command, ready_timeout)"

// path resolves a host path of the policy against p.Dir.
func (p *Policy) path(name string) (string, error) {
	if filepath.IsAbs(name) {
		return filepath.Clean(name), nil
	}
	if p.Dir != "" {
		return filepath.Join(p.Dir, name), nil
	}
	return filepath.Abs(name)
}

// Apply sets on spec every setting the policy sets, leaving the others
// alone: mounts and env entries are appended (mounts, ro, rw; env_file,
// env_pass, env), the other fields replaced. getenv looks up env_pass
// names in the caller's environment (nil means os.LookupEnv); unset
// names are skipped. Env files
// and seccomp profiles are read now. Errors are [*Error]s naming
// the key; spec may be partly updated when Apply fails.
func (p *Policy) Apply(spec *sandbox.Spec, getenv func(string) (string, bool)) error {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	dir := p.Dir
	if dir == "" {
		var err error
		if dir, err = os.Getwd(); err != nil {
			return &Error{Where: "relative paths", Err: err}
		}
	}
	for i, m := range p.Mounts {
		where := fmt.Sprintf("mounts[%d]", i)
		if m.Source == "" {
			return policyErr(where, "", errors.New("source is missing"))
		}
		src, err := p.path(m.Source)
		if err != nil {
			return policyErr(where, m.Source, err)
		}
		mnt := sandbox.Mount{Source: src, Target: m.Target, Access: m.Access}
		if mnt.Target == "" {
			mnt.Target = src
		}
		switch mnt.Access {
		case "":
			mnt.Access = sandbox.ReadOnly
		case sandbox.ReadOnly, sandbox.ReadWrite:
		default:
			return policyErr(where+".access", string(m.Access), errors.New("want ro or rw"))
		}
		spec.Mounts = append(spec.Mounts, mnt)
	}
	for _, l := range []struct {
		key    string
		access fs.Access
		values []string
	}{{"ro", sandbox.ReadOnly, p.RO}, {"rw", sandbox.ReadWrite, p.RW}} {
		for i, v := range l.values {
			m, err := ParseMount(v, l.access, dir)
			if err != nil {
				return policyErr(fmt.Sprintf("%s[%d]", l.key, i), "", err)
			}
			spec.Mounts = append(spec.Mounts, m)
		}
	}
	if p.Workdir != "" {
		spec.Workdir = p.Workdir
	}
	if p.Net != "" {
		mode, err := ParseNet(p.Net)
		if err != nil {
			return policyErr("net", "", err)
		}
		spec.Network.Mode = mode
	}
	if err := p.applySecrets(&spec.Network.Secrets, getenv); err != nil {
		return err
	}
	if len(p.AllowHosts)+len(p.DenyHosts)+len(p.Secrets) > 0 {
		if p.Net == "" { // host rules imply limited
			spec.Network.Mode = netpolicy.Limited
		}
		spec.Network.AllowedHosts = append(spec.Network.AllowedHosts, p.AllowHosts...)
		spec.Network.DeniedHosts = append(spec.Network.DeniedHosts, p.DenyHosts...)
		if err := spec.Network.Validate(); err != nil {
			return policyErr("allowed_hosts/denied_hosts/secrets", "", err)
		}
	}
	if err := p.applyLimits(&spec.Limits); err != nil {
		return err
	}
	if err := p.applyEnv(spec, getenv); err != nil {
		return err
	}
	if p.User != "" {
		u, err := ParseUser(string(p.User))
		if err != nil {
			return policyErr("user", string(p.User), err)
		}
		spec.User = u
	}
	if p.Hostname != "" {
		spec.Hostname = p.Hostname
	}
	if len(p.Sysctls) > 0 {
		spec.Sysctls = maps.Clone(p.Sysctls)
	}
	if p.Seccomp != "" {
		sc, err := LoadSeccomp(p.Seccomp, dir)
		if err != nil {
			return policyErr("seccomp", "", err)
		}
		spec.Seccomp = sc
	}
	if p.RWGit {
		spec.GitWritable = true
	}
	if p.BestEffort {
		spec.BestEffort = true
	}
	return p.Service.apply(spec)
}

func (p *Policy) applyLimits(l *sandbox.Limits) error {
	if p.Memory != "" {
		n, err := ParseSize(string(p.Memory))
		if err != nil {
			return policyErr("memory", string(p.Memory), err)
		}
		l.Memory = n
	}
	switch {
	case p.Pids < 0:
		return policyErr("pids", strconv.FormatInt(p.Pids, 10), errors.New("must not be negative"))
	case p.Pids > 0:
		l.Pids = p.Pids
	}
	switch {
	case p.CPUs < 0 || math.IsNaN(p.CPUs) || math.IsInf(p.CPUs, 0):
		return policyErr("cpus", fmt.Sprint(p.CPUs), errors.New("want a positive number of cores, e.g. 1.5"))
	case p.CPUs > 0:
		l.CPUs = p.CPUs
	}
	if p.Timeout != "" {
		d, err := ParseDuration(string(p.Timeout))
		if err != nil {
			return policyErr("timeout", string(p.Timeout), err)
		}
		l.Timeout = d
	}
	if p.NoFile > 0 {
		l.NoFile = p.NoFile
	}
	return nil
}

func (p *Policy) applyEnv(spec *sandbox.Spec, getenv func(string) (string, bool)) error {
	for i, name := range p.EnvFile {
		where := fmt.Sprintf("env_file[%d]", i)
		path, err := p.path(name)
		if err != nil {
			return policyErr(where, name, err)
		}
		kvs, err := ReadEnvFile(path)
		if err != nil {
			return policyErr(where, "", err)
		}
		spec.Env = append(spec.Env, kvs...)
	}
	for i, name := range p.EnvPass {
		if !ValidEnvName(name) {
			return policyErr(fmt.Sprintf("env_pass[%d]", i), name, errors.New("not a variable name"))
		}
		if v, ok := getenv(name); ok {
			spec.Env = append(spec.Env, name+"="+v)
		}
	}
	for i, kv := range p.Env {
		if _, err := ParseEnv(kv); err != nil {
			return policyErr(fmt.Sprintf("env[%d]", i), kv, err)
		}
		spec.Env = append(spec.Env, kv)
	}
	if p.EnvInherit {
		spec.EnvInherit = true
	}
	return nil
}
