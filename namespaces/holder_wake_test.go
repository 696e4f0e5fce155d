//go:build cgo

package namespaces

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// supervisorHolderEnv makes this test binary call ExecSupervisorHolder
// (TestSupervisorHolderHelper): "WAKE,WATCH" are the descriptors.
const supervisorHolderEnv = "TENT_TEST_SUPERVISOR_HOLDER"

// TestSupervisorHolderHelper is not a test: with $TENT_TEST_SUPERVISOR_HOLDER
// set it becomes the supervisor's idle holder, which then runs this
// binary again with no test.
func TestSupervisorHolderHelper(t *testing.T) {
	v := os.Getenv(supervisorHolderEnv)
	if v == "" {
		return
	}
	f := strings.Split(v, ",")
	wake, _ := strconv.Atoi(f[0])
	watch, _ := strconv.Atoi(f[1])
	err := ExecSupervisorHolder(time.Time{}, []int{wake, watch}, wake, []string{os.Args[0], "-test.run=^$"})
	t.Fatal(err)
}

// holderSends runs the supervisor holder watching the init's control
// socket (its wake descriptor) and a pipe, wakes it through one of them
// (the pipe, or the socket with viaControl), and returns what the holder
// sent on the control socket before it exec'd the Go supervisor.
func holderSends(t *testing.T, viaControl bool) string {
	t.Helper()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	host := os.NewFile(uintptr(pair[0]), "supervisor-end")
	initEnd := os.NewFile(uintptr(pair[1]), "init-end")
	defer host.Close()
	defer initEnd.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSupervisorHolderHelper$")
	cmd.Env = append(os.Environ(), supervisorHolderEnv+"=3,4")
	cmd.ExtraFiles = []*os.File{host, r} // fds 3 (wake) and 4
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The holder is up once the helper's exec replaced it: give it time
	// to block in poll (waking it earlier only wakes it sooner).
	time.Sleep(300 * time.Millisecond)
	if viaControl {
		if _, err := initEnd.Write([]byte(`{"type":"exit"}`)); err != nil {
			t.Fatal(err)
		}
	} else if _, err := w.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("holder: %v\n%s", err, out.String())
	}
	buf := make([]byte, 256)
	n, _, err := unix.Recvfrom(int(initEnd.Fd()), buf, unix.MSG_DONTWAIT)
	if err == unix.EAGAIN {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

// Woken by another of its descriptors (a client of the supervisor), the
// supervisor's holder first sends the init the wake-up message; woken by
// the init's own control socket it sends nothing.
func TestSupervisorHolderWakesTheInit(t *testing.T) {
	if got := holderSends(t, false); got != holderWake {
		t.Errorf("woken by a client, the holder sent the init %q, want %q", got, holderWake)
	}
	if got := holderSends(t, true); got != "" {
		t.Errorf("woken by the init, the holder sent it %q, want nothing", got)
	}
}
