//go:build linux && cgo

package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// target is what a profile's includes/excludes are evaluated against.
type target struct {
	arch   string        // native architecture as Docker names it ("amd64")
	kernel kernelVersion // running kernel
	caps   []string      // capabilities held; tent's sandboxed commands hold none
}

// goToNative maps GOARCH to the architecture names Docker profiles use in
// includes/excludes.
var goToNative = map[string]string{
	"386": "x86", "amd64": "amd64", "arm": "arm", "arm64": "arm64",
	"loong64": "loong64", "mips": "mips", "mipsle": "mipsel",
	"mips64": "mips64", "mips64le": "mips64el", "ppc64": "ppc64",
	"ppc64le": "ppc64le", "riscv64": "riscv64", "s390x": "s390x",
}

// hostTarget describes the running process: native architecture, running
// kernel, no capabilities.
func hostTarget() (target, error) {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return target{}, os.NewSyscallError("uname", err)
	}
	release := unix.ByteSliceToString(uts.Release[:])
	k, err := parseKernelVersion(release)
	if err != nil {
		return target{}, fmt.Errorf("failed to read kernel version: %w", err)
	}
	return target{arch: goToNative[runtime.GOARCH], kernel: k}, nil
}

// applies reports whether a rule's includes and excludes admit it on t.
func (s *Syscall) applies(t target) bool {
	in, ex := s.Includes, s.Excludes
	if len(in.Arches) > 0 && !slices.Contains(in.Arches, t.arch) {
		return false
	}
	for _, c := range in.Caps {
		if !slices.Contains(t.caps, c) {
			return false
		}
	}
	if in.MinKernel != "" {
		if want, err := parseKernelVersion(in.MinKernel); err != nil || t.kernel.less(want) {
			return false
		}
	}
	if slices.Contains(ex.Arches, t.arch) {
		return false
	}
	for _, c := range ex.Caps {
		if slices.Contains(t.caps, c) {
			return false
		}
	}
	if ex.MinKernel != "" {
		if want, err := parseKernelVersion(ex.MinKernel); err == nil && !t.kernel.less(want) {
			return false
		}
	}
	return true
}

// Compile turns p into a classic-BPF filter for the native architecture,
// using libseccomp.
//
// Rules are selected as Docker and runc select them, for a process that
// holds no capabilities (tent drops them all) on the running kernel
// (uname): a rule whose includes need a capability is dropped, one whose
// excludes name a capability is kept. Syscall names libseccomp does not
// know are skipped. A rule whose action equals the default action is
// skipped too (libseccomp refuses it; the outcome is the same). Several
// Args on the same Index are alternatives: each becomes its own rule, as
// in runc.
//
// Only the native ABI is allowed in: the filter's bad-architecture action
// is KILL_PROCESS, so a 64-bit process making i386 (int 0x80) or x32
// syscalls is killed with SIGSYS. libseccomp's no-new-privileges and
// TSYNC attributes are left off: the filter is only exported, and Install
// loads it on one thread.
//
// Errors for profile content wrap ErrInvalidProfile.
func Compile(p *Profile) (Program, error) {
	t, err := hostTarget()
	if err != nil {
		return nil, err
	}
	return compileFor(p, t)
}

func compileFor(p *Profile, t target) (Program, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	def, err := scmpAction("defaultAction", p.DefaultAction, p.DefaultErrnoRet)
	if err != nil {
		return nil, err
	}
	f, err := libseccomp.NewFilter(def)
	if err != nil {
		return nil, fmt.Errorf("failed to create seccomp filter: %w", err)
	}
	defer f.Release()
	if err := f.SetBadArchAction(libseccomp.ActKillProcess); err != nil {
		return nil, fmt.Errorf("failed to set bad-architecture action: %w", err)
	}
	// A binary tree of syscall numbers instead of a linear scan; it only
	// changes speed, so a libseccomp too old for it (< 2.5) keeps the
	// linear layout.
	_ = f.SetOptimize(2)
	if err := f.SetNoNewPrivsBit(false); err != nil {
		return nil, fmt.Errorf("failed to clear no-new-privileges attribute: %w", err)
	}

	for i := range p.Syscalls {
		s := &p.Syscalls[i]
		if !s.applies(t) {
			continue
		}
		field := fmt.Sprintf("syscalls[%d]", i)
		act, err := scmpAction(field+".action", s.Action, s.ErrnoRet)
		if err != nil {
			return nil, err
		}
		if act == def {
			continue
		}
		condSets, err := conditions(field, s.Args)
		if err != nil {
			return nil, err
		}
		for _, name := range s.names() {
			nr, err := libseccomp.GetSyscallFromName(name)
			if err != nil {
				continue // unknown to libseccomp: skipped, as Docker and runc do
			}
			for _, conds := range condSets {
				if len(conds) == 0 {
					err = f.AddRule(nr, act)
				} else {
					err = f.AddRuleConditional(nr, act, conds)
				}
				if err != nil {
					return nil, fmt.Errorf("failed to add seccomp rule %s for %q: %w", field, name, err)
				}
			}
		}
	}
	raw, err := exportBPF(f)
	if err != nil {
		return nil, err
	}
	return decodeNative(raw)
}

// scmpAction converts an action and its errno/trace value.
func scmpAction(field string, a Action, ret *uint) (libseccomp.ScmpAction, error) {
	var act libseccomp.ScmpAction
	switch a {
	case ActKill, ActKillThread:
		act = libseccomp.ActKillThread
	case ActKillProcess:
		act = libseccomp.ActKillProcess
	case ActTrap:
		act = libseccomp.ActTrap
	case ActAllow:
		act = libseccomp.ActAllow
	case ActLog:
		act = libseccomp.ActLog
	case ActErrno:
		code := uint(errnoEPERM)
		if ret != nil {
			code = *ret
		}
		return libseccomp.ActErrno.SetReturnCode(int16(code)), nil
	case ActTrace:
		var code uint
		if ret != nil {
			code = *ret
		}
		return libseccomp.ActTrace.SetReturnCode(int16(uint16(code))), nil
	case ActNotify:
		return 0, invalid(field, "%s is not supported: tent runs no seccomp notification listener", a)
	default:
		return 0, invalid(field, "unknown action %q", a)
	}
	return act, nil
}

var scmpOps = map[Operator]libseccomp.ScmpCompareOp{
	OpNotEqual:     libseccomp.CompareNotEqual,
	OpLessThan:     libseccomp.CompareLess,
	OpLessEqual:    libseccomp.CompareLessOrEqual,
	OpEqualTo:      libseccomp.CompareEqual,
	OpGreaterEqual: libseccomp.CompareGreaterEqual,
	OpGreaterThan:  libseccomp.CompareGreater,
	OpMaskedEqual:  libseccomp.CompareMaskedEqual,
}

// conditions converts a rule's Args into the condition sets to add, one
// rule per set. Args on distinct indexes form one set (all must match).
// libseccomp cannot AND two conditions on the same argument, so when an
// index repeats every Arg becomes a rule of its own (any may match), which
// is what runc does with such profiles.
func conditions(field string, args []Arg) ([][]libseccomp.ScmpCondition, error) {
	if len(args) == 0 {
		return [][]libseccomp.ScmpCondition{nil}, nil
	}
	conds := make([]libseccomp.ScmpCondition, 0, len(args))
	var seen [6]bool
	repeated := false
	for j, a := range args {
		op, ok := scmpOps[a.Op]
		if !ok {
			return nil, invalid(fmt.Sprintf("%s.args[%d].op", field, j), "unknown operator %q", a.Op)
		}
		c, err := libseccomp.MakeCondition(a.Index, op, a.Value, a.ValueTwo)
		if err != nil {
			return nil, invalid(fmt.Sprintf("%s.args[%d]", field, j), "%v", err)
		}
		if seen[a.Index] {
			repeated = true
		}
		seen[a.Index] = true
		conds = append(conds, c)
	}
	if !repeated {
		return [][]libseccomp.ScmpCondition{conds}, nil
	}
	sets := make([][]libseccomp.ScmpCondition, len(conds))
	for i, c := range conds {
		sets[i] = []libseccomp.ScmpCondition{c}
	}
	return sets, nil
}

// exportBPF returns the filter as raw struct sock_filter bytes.
// seccomp_export_bpf_mem needs libseccomp 2.6; older libraries (Debian 12
// ships 2.5.4) export through a memfd instead.
func exportBPF(f *libseccomp.ScmpFilter) ([]byte, error) {
	raw, err := f.ExportBPFMem()
	if err == nil {
		return raw, nil
	}
	if !errors.Is(err, unix.EOPNOTSUPP) {
		return nil, fmt.Errorf("failed to export seccomp filter: %w", err)
	}
	fd, err := unix.MemfdCreate("tent-seccomp-bpf", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("memfd_create", err)
	}
	file := os.NewFile(uintptr(fd), "tent-seccomp-bpf")
	defer file.Close()
	if err := f.ExportBPF(file); err != nil {
		return nil, fmt.Errorf("failed to export seccomp filter: %w", err)
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("failed to read exported seccomp filter: %w", err)
	}
	raw, err = io.ReadAll(file)
	if err != nil {
		return nil, fmt.Errorf("failed to read exported seccomp filter: %w", err)
	}
	return raw, nil
}

// decodeNative decodes struct sock_filter records in host byte order.
func decodeNative(raw []byte) (Program, error) {
	if len(raw) == 0 || len(raw)%instructionSize != 0 {
		return nil, fmt.Errorf("libseccomp exported %d bytes, not a whole number of BPF instructions", len(raw))
	}
	return decode(raw, binary.NativeEndian), nil
}
