package seccomp

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrInvalidProfile is wrapped by every error that Parse, Load and Compile
// return for a profile that is malformed or asks for something tent cannot
// compile. The message names the offending field, e.g.
// "syscalls[3].args[0].op".
var ErrInvalidProfile = errors.New("invalid seccomp profile")

// MaxErrno is the largest errno a rule may return (the kernel's MAX_ERRNO).
const MaxErrno = 4095

// Action is a seccomp action as spelled in OCI and Docker profiles.
type Action string

// The actions a profile may use. ActNotify parses but does not compile:
// tent runs no user-notification listener.
const (
	ActKill        Action = "SCMP_ACT_KILL" // kills the calling thread, like ActKillThread
	ActKillThread  Action = "SCMP_ACT_KILL_THREAD"
	ActKillProcess Action = "SCMP_ACT_KILL_PROCESS"
	ActTrap        Action = "SCMP_ACT_TRAP"
	ActErrno       Action = "SCMP_ACT_ERRNO"
	ActTrace       Action = "SCMP_ACT_TRACE"
	ActAllow       Action = "SCMP_ACT_ALLOW"
	ActLog         Action = "SCMP_ACT_LOG"
	ActNotify      Action = "SCMP_ACT_NOTIFY"
)

func (a Action) valid() bool {
	switch a {
	case ActKill, ActKillThread, ActKillProcess, ActTrap, ActErrno,
		ActTrace, ActAllow, ActLog, ActNotify:
		return true
	}
	return false
}

// Operator compares a syscall argument in a rule's Arg.
type Operator string

// The comparison operators. All compare the full 64-bit argument.
// OpMaskedEqual matches when arg & Value == ValueTwo (Value is the mask).
const (
	OpNotEqual     Operator = "SCMP_CMP_NE"
	OpLessThan     Operator = "SCMP_CMP_LT"
	OpLessEqual    Operator = "SCMP_CMP_LE"
	OpEqualTo      Operator = "SCMP_CMP_EQ"
	OpGreaterEqual Operator = "SCMP_CMP_GE"
	OpGreaterThan  Operator = "SCMP_CMP_GT"
	OpMaskedEqual  Operator = "SCMP_CMP_MASKED_EQ"
)

func (o Operator) valid() bool {
	switch o {
	case OpNotEqual, OpLessThan, OpLessEqual, OpEqualTo, OpGreaterEqual,
		OpGreaterThan, OpMaskedEqual:
		return true
	}
	return false
}

// Arch is a libseccomp architecture name such as "SCMP_ARCH_X86_64".
type Arch string

var knownArches = map[Arch]bool{
	"SCMP_ARCH_X86": true, "SCMP_ARCH_X86_64": true, "SCMP_ARCH_X32": true,
	"SCMP_ARCH_ARM": true, "SCMP_ARCH_AARCH64": true,
	"SCMP_ARCH_MIPS": true, "SCMP_ARCH_MIPS64": true, "SCMP_ARCH_MIPS64N32": true,
	"SCMP_ARCH_MIPSEL": true, "SCMP_ARCH_MIPSEL64": true, "SCMP_ARCH_MIPSEL64N32": true,
	"SCMP_ARCH_PPC": true, "SCMP_ARCH_PPC64": true, "SCMP_ARCH_PPC64LE": true,
	"SCMP_ARCH_S390": true, "SCMP_ARCH_S390X": true,
	"SCMP_ARCH_PARISC": true, "SCMP_ARCH_PARISC64": true,
	"SCMP_ARCH_RISCV64": true, "SCMP_ARCH_LOONGARCH64": true,
	"SCMP_ARCH_M68K": true, "SCMP_ARCH_SH": true, "SCMP_ARCH_SHEB": true,
}

// Profile is an OCI runtime-spec or Docker seccomp profile. The zero value
// is not valid: DefaultAction is required.
//
// Compile builds a filter for the native architecture only; Architectures
// and ArchMap are validated but every other ABI is killed (see the package
// documentation). Unknown JSON fields (flags, listenerPath, ...) are
// ignored.
type Profile struct {
	// DefaultAction applies to every syscall no rule matches.
	DefaultAction Action `json:"defaultAction"`
	// DefaultErrnoRet is the errno of an ActErrno or the message of an
	// ActTrace default action; nil means EPERM (ERRNO) or 0 (TRACE).
	DefaultErrnoRet *uint `json:"defaultErrnoRet,omitempty"`
	// Architectures lists the ABIs the profile was written for (OCI).
	Architectures []Arch `json:"architectures,omitempty"`
	// ArchMap lists ABIs per main architecture (Docker).
	ArchMap []ArchMap `json:"archMap,omitempty"`
	// Syscalls are the rules, applied in order.
	Syscalls []Syscall `json:"syscalls,omitempty"`
}

// ArchMap is one Docker "archMap" entry: a main architecture and the
// sub-architectures a process on it can also use.
type ArchMap struct {
	Arch      Arch   `json:"architecture"`
	SubArches []Arch `json:"subArchitectures"`
}

// Syscall is one rule: the action taken for the named syscalls when every
// Arg matches (Args on the same Index are alternatives, as in runc).
type Syscall struct {
	// Names lists the syscalls (OCI and current Docker format).
	Names []string `json:"names,omitempty"`
	// Name is a single syscall (older Docker format); it adds to Names.
	Name string `json:"name,omitempty"`
	// Action is taken when the rule matches.
	Action Action `json:"action"`
	// ErrnoRet is the errno of ActErrno (nil: EPERM) or the message of
	// ActTrace; it is ignored for other actions.
	ErrnoRet *uint `json:"errnoRet,omitempty"`
	// Args are conditions on the syscall's arguments.
	Args []Arg `json:"args,omitempty"`
	// Comment is free text.
	Comment string `json:"comment,omitempty"`
	// Includes lists conditions that must all hold for the rule to apply.
	Includes Filter `json:"includes,omitzero"`
	// Excludes lists conditions any of which drops the rule.
	Excludes Filter `json:"excludes,omitzero"`
}

// names returns Names plus Name.
func (s *Syscall) names() []string {
	if s.Name == "" {
		return s.Names
	}
	return append(append([]string(nil), s.Names...), s.Name)
}

// Arg is a condition on one syscall argument.
type Arg struct {
	// Index is the argument's position, 0 to 5.
	Index uint `json:"index"`
	// Value is the datum, or the mask for OpMaskedEqual.
	Value uint64 `json:"value"`
	// ValueTwo is the datum for OpMaskedEqual; other operators ignore it.
	ValueTwo uint64 `json:"valueTwo,omitempty"`
	// Op is the comparison.
	Op Operator `json:"op"`
}

// Filter gates a rule on the environment (Docker's includes/excludes).
// Compile evaluates it for the native architecture, the running kernel
// and an empty capability set (tent drops every capability).
type Filter struct {
	// Arches are native architecture names as Docker spells them
	// ("amd64", "x86", "x32", "arm64", "s390x", ...).
	Arches []string `json:"arches,omitempty"`
	// Caps are capability names ("CAP_SYS_ADMIN").
	Caps []string `json:"caps,omitempty"`
	// MinKernel is a kernel version "major.minor".
	MinKernel string `json:"minKernel,omitempty"`
}

// Parse decodes and validates a JSON profile.
func Parse(data []byte) (*Profile, error) {
	var p Profile
	if err := json.Unmarshal(data, &p); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return nil, fmt.Errorf("%w: malformed JSON at byte %d: %v", ErrInvalidProfile, se.Offset, se)
		case errors.As(err, &te):
			return nil, fmt.Errorf("%w: %s: cannot use JSON %s as %s", ErrInvalidProfile, te.Field, te.Value, te.Type)
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalidProfile, err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Load reads and parses the profile at path.
func Load(path string) (*Profile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("failed to read seccomp profile: %w", err)
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Validate checks the profile without compiling it. Errors wrap
// ErrInvalidProfile and name the field.
func (p *Profile) Validate() error {
	if p.DefaultAction == "" {
		return invalid("defaultAction", "missing")
	}
	if !p.DefaultAction.valid() {
		return invalid("defaultAction", "unknown action %q", p.DefaultAction)
	}
	if err := checkErrno("defaultErrnoRet", p.DefaultAction, p.DefaultErrnoRet); err != nil {
		return err
	}
	for i, a := range p.Architectures {
		if !knownArches[a] {
			return invalid(fmt.Sprintf("architectures[%d]", i), "unknown architecture %q", a)
		}
	}
	for i, m := range p.ArchMap {
		if !knownArches[m.Arch] {
			return invalid(fmt.Sprintf("archMap[%d].architecture", i), "unknown architecture %q", m.Arch)
		}
		for j, a := range m.SubArches {
			if !knownArches[a] {
				return invalid(fmt.Sprintf("archMap[%d].subArchitectures[%d]", i, j), "unknown architecture %q", a)
			}
		}
	}
	for i := range p.Syscalls {
		if err := p.Syscalls[i].validate(fmt.Sprintf("syscalls[%d]", i)); err != nil {
			return err
		}
	}
	return nil
}

func (s *Syscall) validate(field string) error {
	names := s.names()
	if len(names) == 0 {
		return invalid(field+".names", "missing")
	}
	for j, n := range names {
		if n == "" {
			return invalid(fmt.Sprintf("%s.names[%d]", field, j), "empty syscall name")
		}
	}
	if s.Action == "" {
		return invalid(field+".action", "missing")
	}
	if !s.Action.valid() {
		return invalid(field+".action", "unknown action %q", s.Action)
	}
	if err := checkErrno(field+".errnoRet", s.Action, s.ErrnoRet); err != nil {
		return err
	}
	for j, a := range s.Args {
		f := fmt.Sprintf("%s.args[%d]", field, j)
		if a.Index > 5 {
			return invalid(f+".index", "%d out of range 0-5", a.Index)
		}
		if a.Op == "" {
			return invalid(f+".op", "missing")
		}
		if !a.Op.valid() {
			return invalid(f+".op", "unknown operator %q", a.Op)
		}
	}
	for _, fl := range []struct {
		name string
		f    Filter
	}{{"includes", s.Includes}, {"excludes", s.Excludes}} {
		if fl.f.MinKernel == "" {
			continue
		}
		if _, err := parseKernelVersion(fl.f.MinKernel); err != nil {
			return invalid(field+"."+fl.name+".minKernel", "%v", err)
		}
	}
	return nil
}

func checkErrno(field string, a Action, v *uint) error {
	if v == nil {
		return nil
	}
	switch a {
	case ActErrno:
		if *v > MaxErrno {
			return invalid(field, "errno %d exceeds %d", *v, MaxErrno)
		}
	case ActTrace:
		if *v > 0xffff {
			return invalid(field, "trace message %d exceeds 65535", *v)
		}
	}
	return nil
}

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidProfile, field, fmt.Sprintf(format, args...))
}

// kernelVersion is a kernel release reduced to major and minor.
type kernelVersion struct{ major, minor int }

func (k kernelVersion) less(o kernelVersion) bool {
	return k.major < o.major || (k.major == o.major && k.minor < o.minor)
}

// parseKernelVersion accepts "6", "6.1", and uname releases such as
// "6.1.0-18-amd64" (anything after major.minor is ignored).
func parseKernelVersion(s string) (kernelVersion, error) {
	var k kernelVersion
	parts := strings.SplitN(s, ".", 3)
	major, err := strconv.Atoi(parts[0])
	if err != nil || major < 0 {
		return k, fmt.Errorf("bad kernel version %q: want major.minor", s)
	}
	k.major = major
	if len(parts) > 1 {
		minor := parts[1]
		if i := strings.IndexFunc(minor, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
			minor = minor[:i]
		}
		if k.minor, err = strconv.Atoi(minor); err != nil {
			return k, fmt.Errorf("bad kernel version %q: want major.minor", s)
		}
	}
	return k, nil
}
