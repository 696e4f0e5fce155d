package manager_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// newLocal returns a Local backend closed when the test ends.
func newLocal(t testing.TB, opts sandbox.LocalOptions) *sandbox.Local {
	t.Helper()
	l, err := sandbox.NewLocal(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

// eventually polls cond every 5 ms for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// assertGone checks that a sandbox's init and cgroups no longer exist.
func assertGone(t *testing.T, s sandbox.Info) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for pidAlive(s.InitPID) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if pidAlive(s.InitPID) {
		t.Errorf("init %d of %s outlived it", s.InitPID, s.ID)
	}
	for _, c := range s.CgroupPaths {
		if _, err := os.Stat(c); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s of %s left behind (%v)", c, s.ID, err)
		}
	}
}

// pidAlive reports whether pid exists and is not a zombie.
func pidAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(after, "Z")
}

// assertNoProcess fails when a process with exactly argv as its command
// line still runs a second from now.
func assertNoProcess(t *testing.T, argv ...string) {
	t.Helper()
	want := []byte(strings.Join(argv, "\x00") + "\x00")
	deadline := time.Now().Add(time.Second)
	for {
		found := ""
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err != nil {
				continue
			}
			b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if bytes.Equal(b, want) {
				found = e.Name()
			}
		}
		if found == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %s (%v) outlived its sandbox", found, argv)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
