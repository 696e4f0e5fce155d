package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

func TestSandboxFiles(t *testing.T) {
	ctx := context.Background()
	dir := rwDir(t)
	os.Chmod(dir, 0o777)
	ro := t.TempDir()
	os.Chmod(ro, 0o755)
	os.WriteFile(filepath.Join(ro, "given"), []byte("input"), 0o644)
	sb := provision(t, sandbox.Spec{
		Filesystem: sandbox.Filesystem{
			Mounts: []sandbox.Mount{
				{Source: dir, Target: "/work", Access: sandbox.ReadWrite},
				{Source: ro, Target: "/in", Access: sandbox.ReadOnly},
			},
		},
	})

	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB, streamed
	if _, err := sb.WriteFile(ctx, "/work/out.txt", bytes.NewReader(big), sandbox.WriteOptions{Mode: 0o600}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "out.txt")); err != nil || !bytes.Equal(b, big) {
		t.Fatalf("host copy of the written file: %d bytes, %v", len(b), err)
	}
	var got bytes.Buffer
	if err := sb.ReadFile(ctx, "/in/given", &got, sandbox.ReadOptions{}); err != nil || got.String() != "input" {
		t.Fatalf("ReadFile: %q, %v", got.String(), err)
	}
	fi, err := sb.Stat(ctx, "/work/out.txt")
	if err != nil || fi.Size != int64(len(big)) || fi.Mode.Perm() != 0o600 || fi.IsDir {
		t.Fatalf("Stat: %+v, %v", fi, err)
	}
	ents, err := sb.ReadDir(ctx, "/work", 1)
	if err != nil || len(ents) != 1 || ents[0].Name != "out.txt" {
		t.Fatalf("ReadDir: %+v, %v", ents, err)
	}
	// The sandbox's own restrictions hold for file operations.
	if _, err := sb.WriteFile(ctx, "/in/x", strings.NewReader("x"), sandbox.WriteOptions{}); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write into a ro mount: %v, want EROFS", err)
	}
	if err := sb.ReadFile(ctx, "/etc/shadow", &got, sandbox.ReadOptions{}); !errors.Is(err, syscall.EACCES) {
		t.Errorf("read /etc/shadow: %v, want EACCES", err)
	}
	if _, err := sb.Stat(ctx, "/work/../../etc/missing"); !errors.Is(err, iofs.ErrNotExist) {
		t.Errorf("stat of a missing path: %v, want ErrNotExist", err)
	}
	if err := os.Symlink("/proc/1/root/etc/passwd", filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := sb.ReadFile(ctx, "/work/escape", &got, sandbox.ReadOptions{}); !errors.Is(err, syscall.EACCES) {
		t.Errorf("read through a symlink into the init's root: %v, want EACCES", err)
	}
	if err := sb.Remove(ctx, "/work/out.txt", false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "out.txt")); !errors.Is(err, iofs.ErrNotExist) {
		t.Errorf("removed file still on the host: %v", err)
	}
}
