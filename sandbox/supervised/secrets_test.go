//go:build linux

package supervised

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/secretstore"
)

// authOrigin is an HTTPS origin on loopback recording the Authorization
// header it received, by path.
type authOrigin struct {
	port string
	mu   sync.Mutex
	auth map[string]string
}

func newAuthOrigin(t *testing.T) *authOrigin {
	o := &authOrigin{auth: map[string]string{}}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.auth[r.URL.Path] = r.Header.Get("Authorization")
		o.mu.Unlock()
		fmt.Fprintf(w, "ok %s\n", r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	_, o.port, _ = net.SplitHostPort(srv.Listener.Addr().String())
	cert := filepath.Join(t.TempDir(), "origin.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(originCertEnv, cert)
	return o
}

func (o *authOrigin) got(path string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.auth[path]
}

func randomValue(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "sv_" + hex.EncodeToString(b)
}

// A secret's value lives in the backend's store only: a write to the
// store reaches the next request of a running sandbox, of its fork and of
// a sandbox resumed from a files-only pause (Stop, then Resume from its
// snapshot), all naming the secret with one placeholder; a deletion
// revokes it. No process, record, snapshot or launch ever holds a value.
func TestSecretRotationReachesRunningForkedAndResumed(t *testing.T) {
	ctx := context.Background()
	o := newAuthOrigin(t)
	b := open(t)
	store := b.Secrets()
	var values []string
	set := func() string {
		v := randomValue(t)
		if err := store.Set("TOKEN", v); err != nil {
			t.Fatal(err)
		}
		values = append(values, v)
		return v
	}
	set()
	probe, err := probeDir()
	if err != nil {
		t.Fatal(err)
	}
	base := "https://api.example.com:" + o.port
	spec := sandbox.Spec{
		Filesystem: sandbox.Filesystem{
			Mounts: []sandbox.Mount{{Source: probe, Target: probeTarget, Access: sandbox.ReadOnly}},
		},
		Networking: sandbox.Networking{
			Network: sandbox.NetworkPolicy{Mode: netpolicy.Limited,
				AllowedHosts: []string{"api.example.com:" + o.port, "127.0.0.1"},
				Secrets:      []netpolicy.Secret{{Name: "TOKEN", Hosts: []string{"api.example.com"}}}},
		},
	}
	run := provision(t, b, spec)
	// request sends $TOKEN from sandbox id to path and returns what the
	// origin received, and the placeholder the sandbox holds.
	request := func(id, path string) (got, placeholder string) {
		t.Helper()
		out, _ := execOut(t, b, id, "sh", "-c", probeTarget+"/testprobe req GET "+base+path+" 'Authorization=Bearer $TOKEN'; echo $TOKEN")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "200 ") {
			t.Fatalf("%s %s: %q", id, path, out)
		}
		return strings.TrimPrefix(o.got(path), "Bearer "), lines[1]
	}
	check := func(id, path, want string) string {
		t.Helper()
		got, ph := request(id, path)
		if got != want {
			t.Errorf("%s: the origin received %q, want %q", path, got, want)
		}
		return ph
	}
	ph := check(run.ID, "/running", values[0])
	if !strings.HasPrefix(ph, "tent_") {
		t.Fatalf("the sandbox's TOKEN is %q, want a placeholder", ph)
	}
	check(run.ID, "/running-rotated", set())

	snap, err := sbOf(t, b, run.ID).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fork, err := b.Fork(ctx, snap.ID, sandbox.ForkOverrides{})
	if err != nil {
		t.Fatal(err)
	}
	if got := check(fork.ID, "/fork", values[1]); got != ph {
		t.Errorf("the fork's placeholder is %q, its origin's %q", got, ph)
	}
	check(fork.ID, "/fork-rotated", set())
	check(run.ID, "/running-again", values[2])

	if err := sbOf(t, b, run.ID).Stop(ctx); err != nil {
		t.Fatal(err)
	}
	set()
	if _, err := sbOf(t, b, run.ID).Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if got := check(run.ID, "/resumed", values[3]); got != ph {
		t.Errorf("the resumed sandbox's placeholder is %q, before %q", got, ph)
	}
	check(run.ID, "/resumed-rotated", set())

	// Revoked: the next request goes out with the placeholder as sent.
	if held, err := store.Delete("TOKEN"); !held || err != nil {
		t.Fatalf("Delete: %v %v", held, err)
	}
	check(run.ID, "/revoked", ph)
	check(fork.ID, "/fork-revoked", ph)

	noValueHeld(t, b, values)
	fi, err := os.Lstat(store.Path())
	if err != nil || fi.Mode() != 0o600 {
		t.Errorf("the store: %v %v, want a file of mode 0600", fi, err)
	}
}

// noValueHeld fails t if a value is in a file of b's state directory
// (records, snapshots, logs; the store aside) or in any process's
// command line or environment (the sandboxes', the supervisors', tent's).
func noValueHeld(t *testing.T, b *Backend, values []string) {
	t.Helper()
	holds := func(data []byte) string {
		for _, v := range values {
			if bytes.Contains(data, []byte(v)) {
				return v
			}
		}
		return ""
	}
	err := filepath.WalkDir(b.Dir(), func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || path == filepath.Join(b.Dir(), secretstore.FileName) {
			return err
		}
		if data, err := os.ReadFile(path); err == nil && holds(data) != "" {
			t.Errorf("%s holds a secret's value", path)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		for _, f := range []string{"cmdline", "environ"} {
			if data, err := os.ReadFile(filepath.Join(p, f)); err == nil && holds(data) != "" {
				t.Errorf("%s/%s holds a secret's value", p, f)
			}
		}
	}
}

// A planted store the caller does not own, or a symbolic link in its
// place, is refused, and the proxy sends no value from it.
func TestSecretStorePlantedIsRefused(t *testing.T) {
	b := open(t)
	target := filepath.Join(t.TempDir(), "planted")
	if err := os.WriteFile(target, []byte(`{"TOKEN":"planted-value-0123"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(b.Dir(), 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(b.Dir(), secretstore.FileName)
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	want := "secret store refused: " + path + " is a symbolic link"
	if _, _, err := b.Secrets().Get("TOKEN"); !errors.Is(err, secretstore.ErrRefused) || err.Error() != want {
		t.Errorf("Get through a symlink: %v, want %q", err, want)
	}
	if err := b.Secrets().Set("TOKEN", "another-value-0123"); !errors.Is(err, secretstore.ErrRefused) || err.Error() != want {
		t.Errorf("Set through a symlink: %v, want %q", err, want)
	}
	if data, _ := os.ReadFile(target); string(data) != `{"TOKEN":"planted-value-0123"}` {
		t.Errorf("the symlink's target was written: %q", data)
	}
	if os.Geteuid() != 0 {
		return
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(`{"TOKEN":"planted-value-0123"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	want = "secret store refused: " + path + " is owned by uid 65534, not 0"
	if _, ok := b.Secrets().LookupSecret("TOKEN"); ok {
		t.Error("a value from a foreign store")
	}
	if _, _, err := b.Secrets().Get("TOKEN"); !errors.Is(err, secretstore.ErrRefused) || err.Error() != want {
		t.Errorf("Get of a foreign store: %v, want %q", err, want)
	}
}

// Header transforms (E2B's rules) given to two sandboxes under one name
// are each sandbox's own: each sends its value, a fork its snapshot's,
// and a removed sandbox's leaves the store.
func TestSecretHeaderTransformsAreEachSandboxs(t *testing.T) {
	ctx := context.Background()
	o := newAuthOrigin(t)
	b := open(t)
	probe, err := probeDir()
	if err != nil {
		t.Fatal(err)
	}
	base := "https://api.example.com:" + o.port
	spec := func(v string) sandbox.Spec {
		return sandbox.Spec{
			Filesystem: sandbox.Filesystem{
				Mounts: []sandbox.Mount{{Source: probe, Target: probeTarget, Access: sandbox.ReadOnly}},
			},
			Networking: sandbox.Networking{
				Network: sandbox.NetworkPolicy{Mode: netpolicy.Limited,
					AllowedHosts: []string{"api.example.com:" + o.port, "127.0.0.1"},
					Secrets:      []netpolicy.Secret{{Name: "E2B_RULE_1", Hosts: []string{"api.example.com"}, Header: "Authorization", Value: v}}},
			},
		}
	}
	va, vb := randomValue(t), randomValue(t)
	a, bb := provision(t, b, spec(va)), provision(t, b, spec(vb))
	check := func(id, path, want string) {
		t.Helper()
		out, _ := execOut(t, b, id, probeTarget+"/testprobe", "req", "GET", base+path)
		if !strings.HasPrefix(out, "200 ") || o.got(path) != want {
			t.Errorf("%s: %q, the origin received %q, want %q", path, out, o.got(path), want)
		}
	}
	check(a.ID, "/a", va)
	check(bb.ID, "/b", vb)
	snap, err := sbOf(t, b, a.ID).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fork, err := b.Fork(ctx, snap.ID, sandbox.ForkOverrides{})
	if err != nil {
		t.Fatal(err)
	}
	check(fork.ID, "/fork", va)
	vc := randomValue(t)
	p := spec(vc).Network
	if err := sbOf(t, b, bb.ID).SetNetworkPolicy(ctx, p); err != nil {
		t.Fatal(err)
	}
	check(bb.ID, "/b-rotated", vc)
	check(a.ID, "/a-again", va)
	if err := sbOf(t, b, bb.ID).Terminate(ctx); err != nil {
		t.Fatal(err)
	}
	names, err := b.Secrets().List()
	if err != nil || strings.Contains(strings.Join(names, " "), bb.ID) || len(names) != 2 {
		t.Errorf("the store after %s's end: %v %v, want the scopes of %s and %s", bb.ID, names, err, a.ID, fork.ID)
	}
	noValueHeld(t, b, []string{va, vb, vc})
}
