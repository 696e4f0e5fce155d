package namespaces

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The C holder and the Go side agree on the holder's argv[0].
func TestHolderArg0(t *testing.T) {
	if holderArg0 != IdleArg0 {
		t.Fatalf("the C holder answers to %q, Go execs %q", holderArg0, IdleArg0)
	}
	if supervisorHolderArg0 != IdleSupervisorArg0 {
		t.Fatalf("the C supervisor holder answers to %q, Go execs %q", supervisorHolderArg0, IdleSupervisorArg0)
	}
}

// stateFD returns a memfd holding b, as handOff leaves it.
func stateFD(t *testing.T, b string) string {
	t.Helper()
	fd, err := unix.MemfdCreate("state", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Pwrite(fd, []byte(b), 0); err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(fd)
}

func TestResumeStateRefusesBadState(t *testing.T) {
	for _, tc := range []struct{ name, arg, want string }{
		{"not a number", "x", "bad state descriptor"},
		{"stdio", "0", "bad state descriptor"},
		{"not JSON", stateFD(t, "{"), "decoding the state"},
		{"no config", stateFD(t, `{"control":4,"self":5,"host_view":-1}`), "incomplete"},
		{"no control socket", stateFD(t, `{"config":{},"control":0,"self":5,"host_view":-1}`), "incomplete"},
	} {
		if _, err := resumeState(tc.arg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	st, err := resumeState(stateFD(t, `{"config":{"landlock_abi":7},"control":4,"self":5,"host_view":6}`))
	if err != nil || st.Config.LandlockABI != 7 || st.Control != 4 || st.Self != 5 || st.HostView != 6 {
		t.Fatalf("%+v %v", st, err)
	}
}

// The idle timer's phases: trim first, then the hand-off, put off while
// busy; never a hand-off when disabled or without a holder.
func TestIdleTimerPhases(t *testing.T) {
	if !holderAvailable {
		t.Skip("built without cgo: no holder")
	}
	i := NewIdleTimer(0, true) // DefaultIdleAfter, longer than IdleTrimAfter
	defer i.Stop()
	if i.Fired(false) {
		t.Fatal("the first delivery (IdleTrimAfter) allowed the hand-off")
	}
	if !i.trimmed {
		t.Fatal("the first delivery did not trim")
	}
	if i.Fired(true) {
		t.Fatal("hand-off allowed while busy")
	}
	if !i.Fired(false) {
		t.Fatal("hand-off refused once due and idle")
	}
	i.Reset()
	if i.trimmed || i.Fired(false) {
		t.Fatal("after Reset the trim comes first again")
	}

	short := NewIdleTimer(IdleTrimAfter/10, true) // due before the trim
	defer short.Stop()
	if !short.Fired(false) || short.trimmed {
		t.Fatal("a hand-off delay shorter than the trim's: hand off at once, untrimmed")
	}
	short.HandOffFailed()
	if !short.trimmed {
		t.Fatal("a failed hand-off leaves the process untrimmed")
	}

	for _, off := range []*IdleTimer{NewIdleTimer(-1, true), NewIdleTimer(0, false)} {
		for n := 0; n < 3; n++ {
			if off.Fired(false) {
				t.Fatal("hand-off allowed while disabled")
			}
		}
		off.Stop()
	}
}

// The supervisor holder's wake-up message (C) is the init's msgWake, and
// an init does nothing with it but close what came with it.
func TestHolderWake(t *testing.T) {
	b, err := json.Marshal(message{Type: msgWake})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != holderWake {
		t.Fatalf("the C holder sends %s, the init knows %s", holderWake, b)
	}
	var m message
	if err := json.Unmarshal([]byte(holderWake), &m); err != nil || m.Type != msgWake {
		t.Fatalf("%s decodes as %+v (%v)", holderWake, m, err)
	}
	fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	in := &initLoop{hostGone: ExitProtocol, execs: map[int]string{}, hostView: -1}
	if code, done := in.handle(control{m: m, fds: []int{fd}}); done || code != 0 {
		t.Fatalf("handle(wake) = %d, %v; want 0, false", code, done)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
		t.Errorf("the descriptor sent with the wake-up is still open (%v)", err)
	}
}
