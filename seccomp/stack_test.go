//go:build linux

package seccomp

import (
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
)

// A stack round-trips; one program is encoded as Marshal does; a cut or
// padded stack, and one of no programs, are refused.
func TestStackRoundTrip(t *testing.T) {
	a := Program{{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW}}
	b := Program{{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, {Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | 1}}
	got, err := UnmarshalStack(MarshalStack(a, b))
	if err != nil || !reflect.DeepEqual(got, []Program{a, b}) {
		t.Fatalf("stack: %v, %v", got, err)
	}
	if one := MarshalStack(b); string(one) != string(b.Marshal()) {
		t.Errorf("one program: %x, want Marshal's %x", one, b.Marshal())
	}
	if got, err := UnmarshalStack(b.Marshal()); err != nil || !reflect.DeepEqual(got, []Program{b}) {
		t.Errorf("a lone program: %v, %v", got, err)
	}
	full := MarshalStack(a, b)
	for name, bad := range map[string][]byte{
		"cut":    full[:len(full)-3],
		"padded": append(append([]byte(nil), full...), 0),
		"empty":  MarshalStack(),
	} {
		if _, err := UnmarshalStack(bad); err == nil {
			t.Errorf("%s stack accepted", name)
		}
	}
}
