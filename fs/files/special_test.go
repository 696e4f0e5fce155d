package files

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The file helper's read of a symlink to /dev/zero or of a FIFO, and its
// write to either, fail at once, sending or taking nothing.
func TestFileHelperOnlyReadsRegularFiles(t *testing.T) {
	dir := t.TempDir()
	zero, fifo := filepath.Join(dir, "zero"), filepath.Join(dir, "fifo")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"read", zero}, {"read", fifo}, {"write", fifo}, {"write", zero}, {"read", dir}} {
		var stdout, stderr bytes.Buffer
		code := RunFileHelper(args, strings.NewReader("data"), &stdout, &stderr)
		want := "EINVAL "
		switch {
		case args[1] == dir:
			want = "EISDIR "
		case args[0] == "write" && args[1] == fifo: // O_NONBLOCK: no reader, no wait
			want = "ENXIO "
		}
		if code != HelperFailed || stdout.Len() != 0 || !strings.HasPrefix(stderr.String(), want) {
			t.Errorf("%v: exit %d, %d bytes out, stderr %q; want %d, nothing, %s", args, code, stdout.Len(), stderr.String(), HelperFailed, want)
		}
	}
	reg := filepath.Join(dir, "reg")
	os.WriteFile(reg, []byte("hello"), 0o644)
	var stdout, stderr bytes.Buffer
	if code := RunFileHelper([]string{"read", reg}, nil, &stdout, &stderr); code != 0 || stdout.String() != "hello" {
		t.Errorf("read of a regular file: %d %q %q", code, stdout.String(), stderr.String())
	}
}
