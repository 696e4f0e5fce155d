package oci_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// These tests run containers through containerd's stock runc shim with
// tent-runc as its runtime binary: a containerd of the test's own (root,
// state and socket in a temporary directory), an image built here (a
// static busybox; no registry is reachable) and ctr. They need root,
// containerd and ctr (Debian's containerd), busybox-static, and
// TENT_BINARY: a static tent (make build; the rlimit trampoline runs the
// binary inside the image, which has no ld.so). They skip without
// them, unless TENT_REQUIRE_OCI is set (make test-oci), then fail.

// need skips (or fails under TENT_REQUIRE_OCI) with why.
func need(t *testing.T, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("TENT_REQUIRE_OCI") != "" {
		t.Fatalf("TENT_REQUIRE_OCI is set, but %s", why)
	}
	t.Skip(why)
}

// env is one containerd and the paths a test needs.
type env struct {
	t       *testing.T
	dir     string
	sock    string
	ns      string
	runc    string // the tent-runc symlink
	runRoot string // tent-runc's --root, as the shim passes it
	image   string
}

func lookPath(name string) bool { _, err := exec.LookPath(name); return err == nil }

func newEnv(t *testing.T) *env {
	need(t, os.Geteuid() == 0, "containerd tests need root")
	need(t, lookPath("containerd") && lookPath("ctr") && lookPath("containerd-shim-runc-v2"), "containerd, ctr or containerd-shim-runc-v2 missing (apt-get install containerd)")
	tent := os.Getenv("TENT_BINARY")
	need(t, tent != "", "TENT_BINARY (a static tent, make build) is not set")
	bb, err := exec.LookPath("busybox")
	need(t, err == nil, "busybox missing (apt-get install busybox-static)")
	if out, _ := exec.Command("file", "-L", bb).Output(); !bytes.Contains(out, []byte("statically linked")) && !bytes.Contains(out, []byte("static-pie")) {
		need(t, false, bb+" is not static (apt-get install busybox-static)")
	}

	// A short directory: unix socket paths are at most 107 bytes.
	dir, err := os.MkdirTemp("", "tent-oci-")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir, sock: filepath.Join(dir, "c.sock"), ns: "tent-test-" + filepath.Base(dir)[len("tent-oci-"):], image: "docker.io/library/tent-busybox:test"}
	e.runRoot = "/run/containerd/runc/" + e.ns
	tentAbs, err := filepath.Abs(tent)
	if err != nil {
		t.Fatal(err)
	}
	e.runc = filepath.Join(dir, "tent-runc")
	if err := os.Symlink(tentAbs, e.runc); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[ttrpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), e.sock, e.sock+".ttrpc")
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logf.Close()
		if t.Failed() {
			if data, err := os.ReadFile(filepath.Join(dir, "containerd.log")); err == nil && len(data) > 0 {
				t.Logf("containerd's log (last 3000 bytes):\n%s", tail(data, 3000))
			}
		}
		// containerd's snapshots are mounts beneath dir: gone with it.
		_ = exec.Command("umount", "-R", "-l", filepath.Join(dir, "root")).Run()
		_ = os.RemoveAll(dir)
	})
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, _, code := e.ctr("version"); code == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("containerd did not come up in 30 s")
		}
	}
	tarball := buildImage(t, dir, bb, e.image)
	if out, errOut, code := e.ctr("image", "import", "--all-platforms", tarball); code != 0 {
		t.Fatalf("ctr image import: %d\n%s%s", code, out, errOut)
	}
	return e
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// ctr runs ctr against this containerd, in the test's namespace.
func (e *env) ctr(args ...string) (stdout, stderr string, code int) {
	cmd := exec.Command("ctr", append([]string{"--address", e.sock, "--namespace", e.ns}, args...)...)
	var o, s bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &s
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		code = -1
		s.WriteString(err.Error())
	}
	return o.String(), s.String(), code
}

// run is `ctr run --rm` of cmd in the image with tent-runc; extra are
// ctr flags.
func (e *env) run(id string, extra []string, cmd ...string) (string, string, int) {
	args := append([]string{"run", "--rm", "--runc-binary", e.runc}, extra...)
	args = append(append(args, e.image, id), cmd...)
	return e.ctr(args...)
}

// buildImage writes an OCI image archive (oci-layout, index.json, blobs)
// of one layer: busybox at /bin/busybox with its applets linked, and the
// directories an image has.
func buildImage(t *testing.T, dir, busybox, name string) string {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	add := func(h *tar.Header, data []byte) {
		h.ModTime = time.Unix(0, 0)
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"bin/", "dev/", "etc/", "proc/", "root/", "run/", "sys/", "tmp/", "var/", "home/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		add(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: mode}, nil)
	}
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/passwd", Mode: 0o644, Size: 50}, []byte(fmt.Sprintf("%-49s\n", "root:x:0:0:root:/root:/bin/sh")))
	data, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(data))}, data)
	for _, applet := range []string{"sh", "echo", "cat", "ls", "sleep", "touch", "chmod", "id", "mount", "unshare", "kill", "true", "false", "ps", "stat", "hostname", "mkdir", "wc", "seq"} {
		add(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", Mode: 0o777}, nil)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(dir, "image.tar")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ot := tar.NewWriter(f)
	put := func(name string, b []byte) {
		if err := ot.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: time.Unix(0, 0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := ot.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	blob := func(b []byte) (string, int) {
		sum := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(sum[:])
		put("blobs/sha256/"+hex.EncodeToString(sum[:]), b)
		return d, len(b)
	}
	js := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	put("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	layerDigest, layerSize := blob(layer.Bytes())
	cfgDigest, cfgSize := blob(js(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Env": []string{"PATH=/bin"}, "Cmd": []string{"sh"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	}))
	manDigest, manSize := blob(js(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfgDigest, "size": cfgSize},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layerDigest, "size": layerSize}},
	}))
	put("index.json", js(map[string]any{
		"schemaVersion": 2,
		"manifests": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manDigest, "size": manSize,
			"platform":    map[string]string{"architecture": "amd64", "os": "linux"},
			"annotations": map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": "test"},
		}},
	}))
	if err := ot.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestContainerd(t *testing.T) {
	e := newEnv(t)

	t.Run("echo", func(t *testing.T) {
		out, errOut, code := e.run("echo", nil, "echo", "hello from tent")
		if code != 0 || out != "hello from tent\n" {
			t.Fatalf("ctr run echo: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})
	t.Run("exit codes", func(t *testing.T) {
		if _, errOut, code := e.run("exit7", nil, "sh", "-c", "exit 7"); code != 7 {
			t.Errorf("exit 7: ctr exited %d (%s)", code, errOut)
		}
		if _, errOut, code := e.run("term", nil, "sh", "-c", "kill -TERM $$"); code != 143 {
			t.Errorf("SIGTERM: ctr exited %d, want 143 (%s)", code, errOut)
		}
	})
}
