//go:build linux

package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// fsHelperEnv selects a helper mode of this test binary when it runs
// inside a sandbox (see TestHostsideFSHelper).
const fsHelperEnv = "TENT_HOSTSIDE_FS_HELPER"

// TestHostsideFSHelper is not a test: run inside a sandbox with
// $TENT_HOSTSIDE_FS_HELPER set, it plays the hostile command.
//
//	swap:A:B:STOP  renameat2(A, B, RENAME_EXCHANGE) until STOP exists
//	deep:DIR:N     creates N nested directories "d" in DIR, file "f" at the bottom
//	readdeep:DIR:N prints that file
func TestHostsideFSHelper(t *testing.T) {
	mode := os.Getenv(fsHelperEnv)
	if mode == "" {
		return
	}
	f := strings.Split(mode, ":")
	switch f[0] {
	case "swap":
		n := 0
		for ; ; n++ {
			if _, err := os.Lstat(f[3]); err == nil {
				break
			}
			if err := unix.Renameat2(unix.AT_FDCWD, f[1], unix.AT_FDCWD, f[2], unix.RENAME_EXCHANGE); err != nil {
				fmt.Println("renameat2:", err)
				os.Exit(1)
			}
		}
		fmt.Println("swaps", n)
	case "deep", "readdeep":
		n, _ := strconv.Atoi(f[2])
		fd, err := unix.Open(f[1], unix.O_RDONLY|unix.O_DIRECTORY, 0)
		for i := 0; err == nil && i < n; i++ {
			if f[0] == "deep" {
				err = unix.Mkdirat(fd, "d", 0o755)
			}
			var next int
			if err == nil {
				next, err = unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
				unix.Close(fd)
				fd = next
			}
		}
		if err == nil && f[0] == "deep" {
			var w int
			if w, err = unix.Openat(fd, "f", unix.O_WRONLY|unix.O_CREAT, 0o644); err == nil {
				unix.Write(w, []byte("bottom"))
				unix.Close(w)
			}
		} else if err == nil {
			var r int
			if r, err = unix.Openat(fd, "f", unix.O_RDONLY, 0); err == nil {
				b := make([]byte, 64)
				k, _ := unix.Read(r, b)
				fmt.Print(string(b[:max(k, 0)]))
			}
		}
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
	}
	os.Exit(0)
}

// helperSpec mounts a copy of this test binary at /opt/hostside.
func helperSpec(t *testing.T) Spec {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "tent-hostside-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "helper"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	return Spec{Filesystem: Filesystem{Mounts: []Mount{{Source: dir, Target: "/opt/hostside", Access: ReadOnly}}}}
}

func helperExec(ctx context.Context, sb *Sandbox, mode string) (string, error) {
	var out bytes.Buffer
	res, err := sb.Exec(ctx, ExecRequest{
		Args:   []string{"/opt/hostside/helper", "-test.run=^TestHostsideFSHelper$"},
		Env:    []string{fsHelperEnv + "=" + mode},
		Stdout: &out, Stderr: &out,
	})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("helper %s: exit %d: %s", mode, res.ExitCode, out.String())
	}
	return out.String(), err
}

func shell(t *testing.T, sb *Sandbox, script string) string {
	t.Helper()
	var out bytes.Buffer
	res, err := sb.Exec(context.Background(), ExecRequest{Args: []string{"sh", "-c", script}, Stdout: &out, Stderr: &out})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%s: %v %+v: %s", script, err, res, out.String())
	}
	return strings.TrimSpace(out.String())
}

// tarEntries decompresses a snapshot part and calls fn for each entry.
func tarEntries(t *testing.T, path string, fn func(h *tar.Header, data []byte)) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := zstd.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		data, _ := io.ReadAll(io.LimitReader(tr, 1<<20))
		fn(h, data)
	}
}

// While the sandbox's command swaps a directory of its /tmp with an
// absolute symlink to a host directory (renameat2 RENAME_EXCHANGE), the
// snapshot's archiving of /tmp (the code that runs unfrozen when there is
// no freezer) must never hold the host file: before, it walked
// /proc/PID/root/tmp by path, and the host resolved the link against its
// own root. The race runs until the archive has caught each side of the
// swap 20 times (at most 3000 tries) and fails if it could not be staged;
// the host file is also watched with inotify for any open.
func TestSnapshotArchiveNeverLeavesTheSandbox(t *testing.T) {
	ctx := context.Background()
	secret := []byte("SECRET-host-only-" + strconv.Itoa(os.Getpid()))
	victim := filepath.Join(t.TempDir(), "victim")
	os.Mkdir(victim, 0o700)
	if err := os.WriteFile(filepath.Join(victim, "f"), secret, 0o600); err != nil {
		t.Fatal(err)
	}
	sb, err := Provision(ctx, helperSpec(t), ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(ctx)
	shell(t, sb, "mkdir -p /tmp/d/sub && echo inside > /tmp/d/f && ln -s "+victim+" /tmp/s")

	ifd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ifd)
	for _, p := range []string{victim, filepath.Join(victim, "f")} {
		if _, err := unix.InotifyAddWatch(ifd, p, unix.IN_OPEN|unix.IN_ACCESS); err != nil {
			t.Fatal(err)
		}
	}

	swapDone := make(chan string, 1)
	go func() {
		out, err := helperExec(ctx, sb, "swap:/tmp/d:/tmp/s:/tmp/stop")
		if err != nil {
			out += err.Error()
		}
		swapDone <- out
	}()
	root, err := openSandboxRoot(sb.Info().InitPID)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	store := t.TempDir()
	sawDir, sawLink, tries := 0, 0, 0
	for ; tries < 3000 && (sawDir < 20 || sawLink < 20); tries++ {
		name := "tmp-" + strconv.Itoa(tries) + ".tar.zst"
		if _, err := archiveInSandbox(store, name, root, "/tmp"); err != nil {
			t.Fatalf("archive of /tmp: %v", err)
		}
		tarEntries(t, filepath.Join(store, name), func(h *tar.Header, data []byte) {
			switch {
			case h.Name == "d/f" && string(data) == "inside\n":
				sawDir++
			case h.Name == "d" && h.Typeflag == tar.TypeSymlink:
				sawLink++
			}
			if bytes.Contains(data, secret) {
				t.Errorf("the archive holds the host's file, as %s", h.Name)
			}
		})
		os.Remove(filepath.Join(store, name))
		if t.Failed() {
			break
		}
	}
	if _, err := sb.WriteFile(ctx, "/tmp/stop", strings.NewReader(""), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	out := <-swapDone
	buf := make([]byte, 4096)
	if n, err := unix.Read(ifd, buf); err != unix.EAGAIN {
		t.Errorf("the host file was opened or read (%d bytes of inotify events, %v)", n, err)
	}
	t.Logf("%d tries; the archive caught d as a directory %d times, as a link %d times; helper: %s", tries, sawDir, sawLink, strings.TrimSpace(out))
	if !strings.HasPrefix(out, "swaps ") {
		t.Fatalf("the swap loop failed: %s", out)
	}
	if sawDir < 20 || sawLink < 20 {
		t.Fatalf("the race was not staged: d archived as a directory %d and as a link %d times in %d tries", sawDir, sawLink, tries)
	}
}

// A sandbox's /tmp holding a FIFO, a 1 GiB sparse file and a 2100-level
// tree (paths beyond PATH_MAX) snapshots without hanging or failing, and
// forks into a sandbox that has the sparse file at its size but not its
// disk cost, and the deep file.
func TestSnapshotOfFIFOSparseAndDeepTrees(t *testing.T) {
	ctx := context.Background()
	sb, err := Provision(ctx, helperSpec(t), ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(ctx)
	shell(t, sb, "mkfifo /tmp/p && truncate -s 1G /tmp/big && printf tail >> /tmp/big && mkdir /tmp/deep")
	if _, err := helperExec(ctx, sb, "deep:/tmp/deep:2100"); err != nil {
		t.Fatal(err)
	}
	snap, err := sb.Snapshot(ctx, t.TempDir(), SnapshotOptions{})
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	var size int64
	for _, p := range snap.Parts {
		size += p.Size
	}
	if size > 1<<20 {
		t.Errorf("the snapshot takes %d bytes, want at most 1 MiB", size)
	}
	loaded, err := LoadSnapshot(snap.Dir)
	if err != nil {
		t.Fatal(err)
	}
	fork, err := Fork(ctx, loaded, ProvisionOptions{})
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	defer fork.Terminate(ctx)
	// du -k counts allocated KiB.
	got := shell(t, fork, "stat -c %s /tmp/big; tail -c 4 /tmp/big; echo; du -k /tmp/big | cut -f1; test -e /tmp/p && echo fifo || echo nofifo")
	lines := strings.Split(got, "\n")
	if len(lines) != 4 || lines[0] != strconv.Itoa(1<<30+4) || lines[1] != "tail" || lines[3] != "nofifo" {
		t.Errorf("the fork's /tmp: %q", got)
	} else if kb, _ := strconv.Atoi(lines[2]); kb > 1024 {
		t.Errorf("the fork's 1 GiB sparse file takes %d KiB", kb)
	}
	if out, err := helperExec(ctx, fork, "readdeep:/tmp/deep:2100"); err != nil || out != "bottom" {
		t.Errorf("the fork's deep file: %q, %v", out, err)
	}
}
