package seccomp

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

const dockerProfile = "testdata/docker-default.json"

func TestLoadDockerProfile(t *testing.T) {
	p, err := Load(dockerProfile)
	if err != nil {
		t.Fatal(err)
	}
	if p.DefaultAction != ActErrno || p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != 1 {
		t.Errorf("default = %s/%v, want SCMP_ACT_ERRNO/1", p.DefaultAction, p.DefaultErrnoRet)
	}
	if len(p.ArchMap) != 9 || p.ArchMap[0].Arch != "SCMP_ARCH_X86_64" ||
		!slices.Equal(p.ArchMap[0].SubArches, []Arch{"SCMP_ARCH_X86", "SCMP_ARCH_X32"}) {
		t.Errorf("archMap = %+v", p.ArchMap)
	}
	if len(p.Syscalls) < 20 || !slices.Contains(p.Syscalls[0].Names, "read") {
		t.Fatalf("got %d rules; first = %v", len(p.Syscalls), p.Syscalls[0].Names)
	}
	// The clone rule for s390: an arg, an arch include and a caps exclude.
	var found bool
	for _, s := range p.Syscalls {
		if slices.Equal(s.Names, []string{"clone"}) && len(s.Args) == 1 && s.Args[0].Index == 1 {
			found = true
			if s.Args[0] != (Arg{Index: 1, Value: 2114060288, Op: OpMaskedEqual}) ||
				!slices.Equal(s.Includes.Arches, []string{"s390", "s390x"}) ||
				!slices.Equal(s.Excludes.Caps, []string{"CAP_SYS_ADMIN"}) {
				t.Errorf("s390 clone rule = %+v", s)
			}
		}
		if slices.Contains(s.Names, "ptrace") && s.Includes.MinKernel == "" && len(s.Includes.Caps) == 0 {
			t.Errorf("ptrace rule lost its includes: %+v", s)
		}
	}
	if !found {
		t.Error("s390 clone rule not found")
	}
}

func TestLoadMissingFile(t *testing.T) {
	if _, err := Load("testdata/does-not-exist.json"); err == nil ||
		!strings.Contains(err.Error(), "does-not-exist.json") {
		t.Fatalf("Load = %v, want an error naming the file", err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, json, want string }{
		{"malformed", `{"defaultAction": "SCMP_ACT_ALLOW",`, "malformed JSON"},
		{"wrong type", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "args": [{"index": "zero", "op": "SCMP_CMP_EQ"}]}]}`, "syscalls.args.index"},
		{"missing default", `{"syscalls": []}`, "defaultAction: missing"},
		{"unknown default", `{"defaultAction": "SCMP_ACT_MAYBE"}`, `defaultAction: unknown action "SCMP_ACT_MAYBE"`},
		{"default errno", `{"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 5000}`, "defaultErrnoRet: errno 5000"},
		{"unknown arch", `{"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_Z80"]}`, `architectures[1]: unknown architecture "SCMP_ARCH_Z80"`},
		{"unknown subarch", `{"defaultAction": "SCMP_ACT_ALLOW", "archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["x"]}]}`, "archMap[0].subArchitectures[0]"},
		{"unknown action", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}, {"names": ["write"], "action": "SCMP_ACT_DENY"}]}`, `syscalls[1].action: unknown action "SCMP_ACT_DENY"`},
		{"missing action", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"]}]}`, "syscalls[0].action: missing"},
		{"no names", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"action": "SCMP_ACT_ALLOW"}]}`, "syscalls[0].names: missing"},
		{"empty name", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read", ""], "action": "SCMP_ACT_ALLOW"}]}`, "syscalls[0].names[1]"},
		{"bad op", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_EQ"}, {"index": 1, "value": 1, "op": "SCMP_CMP_LIKE"}]}]}`, `syscalls[0].args[1].op: unknown operator "SCMP_CMP_LIKE"`},
		{"missing op", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 0}]}]}`, "syscalls[0].args[0].op: missing"},
		{"bad index", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ERRNO", "args": [{"index": 6, "op": "SCMP_CMP_EQ"}]}]}`, "syscalls[0].args[0].index: 6 out of range"},
		{"bad errno", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ERRNO", "errnoRet": 4096}]}`, "syscalls[0].errnoRet"},
		{"bad minKernel", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ERRNO", "includes": {"minKernel": "four"}}]}`, "syscalls[0].includes.minKernel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.json))
			if err == nil {
				t.Fatalf("Parse = %+v, want an error", p)
			}
			if !errors.Is(err, ErrInvalidProfile) {
				t.Errorf("error %q does not wrap ErrInvalidProfile", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestParseIgnoresUnknownFieldsAndAcceptsName(t *testing.T) {
	p, err := Parse([]byte(`{"defaultAction": "SCMP_ACT_ERRNO", "flags": ["SECCOMP_FILTER_FLAG_LOG"],
		"listenerPath": "/x", "syscalls": [{"name": "read", "action": "SCMP_ACT_ALLOW", "future": 1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Syscalls[0].names(); !slices.Equal(got, []string{"read"}) {
		t.Errorf("names = %v, want [read]", got)
	}
}

func TestDefaultIsFreshAndValid(t *testing.T) {
	a, b := Default(), Default()
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	*a.DefaultErrnoRet = 1
	a.Syscalls[0].Names[0] = "changed"
	a.Syscalls = a.Syscalls[:1]
	if *b.DefaultErrnoRet != errnoENOSYS || b.Syscalls[0].Names[0] == "changed" || len(b.Syscalls) < 2 {
		t.Error("Default returned shared state")
	}
	if c := Default(); *c.DefaultErrnoRet != errnoENOSYS || c.Syscalls[0].Names[0] == "changed" {
		t.Error("modifying one Default changed a later one")
	}
}

func TestDefaultJSONRoundTrip(t *testing.T) {
	data, err := json.Marshal(Default())
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, Default()) {
		t.Error("Default() changed through JSON")
	}
}

// TestDefaultHasNoShadowedRules checks what libseccomp would silently
// resolve: a syscall with an unconditional rule must have no other rule
// with a different action, since libseccomp keeps only one of them.
func TestDefaultHasNoShadowedRules(t *testing.T) {
	type key struct {
		name, arches string
	}
	uncond := map[key]string{}
	cond := map[key][]string{}
	for _, s := range Default().Syscalls {
		act := string(s.Action)
		if s.ErrnoRet != nil {
			act += fmt.Sprintf("/%d", *s.ErrnoRet)
		}
		arches := strings.Join(s.Includes.Arches, ",") + "-" + strings.Join(s.Excludes.Arches, ",")
		for _, n := range s.names() {
			k := key{n, arches}
			if len(s.Args) == 0 {
				if prev, ok := uncond[k]; ok {
					t.Errorf("%s has two unconditional rules (%s, %s)", n, prev, act)
				}
				uncond[k] = act
			} else {
				cond[k] = append(cond[k], act)
			}
		}
	}
	for k, acts := range cond {
		if _, ok := uncond[k]; ok {
			t.Errorf("%s has an unconditional rule and conditional rules %v", k.name, acts)
		}
	}
}

func TestNotIn(t *testing.T) {
	for _, tc := range []struct {
		width  uint64
		values []uint64
	}{
		{0xf, []uint64{3}},
		{0xff, []uint64{0, 0xff, 7}},
		{0xffffffff, []uint64{0x5412, 0x541c}},
		{0xffffffff, []uint64{0, 8, 0x20000, 0x20008, 0xffffffff}},
		{0xffffffff, nil},
		{0xf0f, []uint64{0x101, 0x101}},
	} {
		cs := notIn(tc.width, tc.values...)
		if limit := len(tc.values) * 64; len(tc.values) > 0 && len(cs) > limit {
			t.Errorf("notIn(%#x, %#x): %d cylinders", tc.width, tc.values, len(cs))
		}
		probe := []uint64{0, 1, ^uint64(0), tc.width, tc.width + 1}
		for _, v := range tc.values {
			for d := uint64(0); d < 3; d++ {
				probe = append(probe, v, v+d, v-d, v|1<<40, v^(1<<d))
			}
		}
		for x := uint64(0); x < 1<<12; x++ {
			probe = append(probe, x, x<<20, x*0x10001)
		}
		for _, x := range probe {
			matches := 0
			for _, c := range cs {
				if x&c.mask == c.value {
					matches++
				}
			}
			excluded := slices.Contains(tc.values, x&tc.width)
			if excluded && matches != 0 || !excluded && matches != 1 {
				t.Fatalf("notIn(%#x, %#x): %#x matches %d cylinders (excluded %v)",
					tc.width, tc.values, x, matches, excluded)
			}
		}
	}
}
