//go:build linux

package transfer

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
)

// The tree helpers the transfer and CLI tests share.
var (
	hostTree = sandboxtest.HostTree
	sameTree = sandboxtest.SameTree
)

// archive makes a tar archive of entries, each regular file holding "x".
func archive(t *testing.T, entries ...*tar.Header) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range entries {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte(strings.Repeat("x", int(h.Size)))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &b
}

// The host side of a directory copy treats the sandbox's archive as
// hostile: an entry through a planted symlink, a name leaving the
// directory, devices, FIFOs and set-id bits never reach the host, and a
// failed extraction leaves nothing (not even the temporary directory).
func TestExtractsHostileArchivesBeneathTheDestination(t *testing.T) {
	victim := t.TempDir()
	host := t.TempDir()
	for _, tc := range []struct {
		name    string
		entries []*tar.Header
		err     string
	}{
		{"through a symlink", []*tar.Header{
			{Typeflag: tar.TypeSymlink, Name: "esc", Linkname: victim},
			{Typeflag: tar.TypeReg, Name: "esc/pwned", Size: 1, Mode: 0o644},
		}, "too many levels of symbolic links"},
		{"leaving", []*tar.Header{{Typeflag: tar.TypeReg, Name: "../pwned", Size: 1, Mode: 0o644}}, "leaves the directory"},
		{"absolute", []*tar.Header{{Typeflag: tar.TypeReg, Name: victim + "/pwned", Size: 1, Mode: 0o644}}, "leaves the directory"},
		{"special files and set-id bits", []*tar.Header{
			{Typeflag: tar.TypeFifo, Name: "fifo", Mode: 0o644},
			{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3, Mode: 0o666},
			{Typeflag: tar.TypeChar, Name: "whiteout", Mode: 0o666},
			{Typeflag: tar.TypeReg, Name: "suid", Size: 1, Mode: 0o4755},
			{Typeflag: tar.TypeLink, Name: "hard", Linkname: "/etc/passwd"},
		}, ""},
	} {
		b := archive(t, tc.entries...)
		dst := filepath.Join(host, strings.ReplaceAll(tc.name, " ", "-"))
		target, err := openHostTarget(dst, "d", true)
		if err != nil {
			t.Fatal(err)
		}
		err = target.dir(0o755, func(w io.Writer) error {
			return sanitizeTar(b, w, "/src", 1<<20)
		})
		target.close()
		if tc.err == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			sameTree(t, tc.name, hostTree(t, dst), map[string]string{"suid": "f -rwxr-xr-x x"})
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.err)
		}
		if _, err := os.Lstat(dst); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the destination exists after a failed copy: %v", tc.name, err)
		}
	}
	sameTree(t, "the victim", hostTree(t, victim), map[string]string{})
	sameTree(t, "the host directory", hostTree(t, host), map[string]string{"special-files-and-set-id-bits": "d -rwxr-xr-x", "special-files-and-set-id-bits/suid": "f -rwxr-xr-x x"})
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(host, "special-files-and-set-id-bits/suid"), &st); err == nil && st.Mode&syscall.S_ISUID != 0 {
		t.Errorf("a set-uid bit reached the host: %o", st.Mode)
	}
}

// sanitizeTar keeps permission bits, link targets and the sparse size
// record, drops owners and other records, and stops at the limit with
// ErrTooLarge naming the entry.
func TestSanitizeTar(t *testing.T) {
	in := archive(t,
		&tar.Header{Typeflag: tar.TypeDir, Name: "d/", Mode: 0o2750, Uid: 7, Uname: "x"},
		&tar.Header{Typeflag: tar.TypeReg, Name: "d/f", Size: 3, Mode: 0o6644, Uid: 7,
			PAXRecords: map[string]string{sparseSizeKey: "1000", "SCHILY.xattr.user.x": "v"}},
		&tar.Header{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "/etc/passwd", Mode: 0o777},
		&tar.Header{Typeflag: tar.TypeFifo, Name: "p", Mode: 0o644},
	)
	var out bytes.Buffer
	if err := sanitizeTar(bytes.NewReader(in.Bytes()), &out, "/src", 3); err != nil {
		t.Fatal(err)
	}
	var got []string
	tr := tar.NewReader(&out)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, strings.Join([]string{h.Name, string(h.Typeflag), os.FileMode(h.Mode).String(), h.Linkname, h.Uname,
			h.PAXRecords[sparseSizeKey], h.PAXRecords["SCHILY.xattr.user.x"]}, "|"))
	}
	want := []string{"d/|5|-rwxr-x---||||", "d/f|0|-rw-r--r--|||1000|", "l|2|-rwxrwxrwx|/etc/passwd|||"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("sanitized archive:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	err := sanitizeTar(bytes.NewReader(in.Bytes()), io.Discard, "/src", 2)
	if !errors.Is(err, ErrTooLarge) || err.Error() != "d/f: the copy is larger than 2 bytes" {
		t.Errorf("over the limit: %v, want ErrTooLarge naming d/f", err)
	}
}

// A file copied out replaces a symlink planted at the destination (it
// is never written through), and a failed copy leaves neither the
// destination changed nor a temporary file.
func TestHostTargetFileReplacesASymlink(t *testing.T) {
	host, victim := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(victim, "v"), []byte("victim"), 0o600); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(host, "out")
	if err := os.Symlink(filepath.Join(victim, "v"), dst); err != nil {
		t.Fatal(err)
	}
	fail := errors.New("the sandbox went away")
	target, err := openHostTarget(dst, "f", false)
	if err != nil {
		t.Fatal(err)
	}
	err = target.file(0o640, func(w io.Writer) error {
		_, _ = io.WriteString(w, "part")
		return fail
	})
	if !errors.Is(err, fail) {
		t.Errorf("failed fill: %v, want %v", err, fail)
	}
	sameTree(t, "after a failed copy", hostTree(t, host), map[string]string{"out": "l " + filepath.Join(victim, "v")})
	if err := target.file(0o4750, func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }); err != nil {
		t.Fatal(err)
	}
	target.close()
	sameTree(t, "after a copy", hostTree(t, host), map[string]string{"out": "f -rwxr-x--- new"})
	sameTree(t, "the victim", hostTree(t, victim), map[string]string{"v": "f -rw------- victim"})
}
