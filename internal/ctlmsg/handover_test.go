package ctlmsg

import (
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// State written for the next image reads back whole, from a descriptor
// the exec keeps; Dup's copy survives exec too.
func TestStateHandover(t *testing.T) {
	type state struct {
		Name string `json:"name"`
		FD   int    `json:"fd"`
	}
	a, _ := pair(t)
	fd, err := Dup(a)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	mfd, err := WriteState("test", state{Name: "x", FD: fd})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []int{fd, mfd} {
		if flags, err := unix.FcntlInt(uintptr(d), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC != 0 {
			t.Errorf("descriptor %d: flags %#x %v, want no close-on-exec", d, flags, err)
		}
	}
	var got state
	if err := ReadState(strconv.Itoa(mfd), &got); err != nil || got != (state{Name: "x", FD: fd}) {
		t.Fatalf("ReadState: %+v %v", got, err)
	}
	if _, err := unix.FcntlInt(uintptr(mfd), unix.F_GETFD, 0); err != unix.EBADF {
		t.Errorf("ReadState left the state descriptor open: %v", err)
	}
	for _, arg := range []string{"", "x", "2", "-1"} {
		if err := ReadState(arg, &got); err == nil || !strings.Contains(err.Error(), "bad state descriptor") {
			t.Errorf("ReadState(%q): %v", arg, err)
		}
	}
}
