package supervised

import (
	"bytes"
	"context"
	"crypto/x509"
	"net/netip"
	"os"
	"testing"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/internal/testhooks"
)

// The test binary is the supervisors' program too: Provision re-executes
// it (/proc/self/exe) in the supervisor's mode, which sandbox.Init runs.
func TestMain(m *testing.M) {
	originHooks() // in the supervisors too: they are this binary
	sandbox.Init()
	os.Exit(sandboxtest.Run(m))
}

// probeTarget is where the test probe is mounted inside sandboxes.
const probeTarget = sandboxtest.ProbeTarget

// probeDir holds the static testprobe binary (see sandboxtest.ProbeDir).
var probeDir = sandboxtest.ProbeDir

// open returns a backend on a fresh state directory whose sandboxes are
// terminated when the test ends.
func open(t *testing.T) *Backend {
	t.Helper()
	b, err := Open(t.TempDir(), Options{IdleAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		all, _ := b.List(context.Background())
		for _, i := range all {
			if err := sbOf(t, b, i.ID).Terminate(context.Background()); err != nil {
				t.Errorf("terminate %s: %v", i.ID, err)
			}
		}
	})
	return b
}

func provision(t *testing.T, b *Backend, spec sandbox.Spec) sandbox.Info {
	t.Helper()
	info, err := b.Provision(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// execOut runs argv in sandbox id and returns its stdout.
func execOut(t *testing.T, b *Backend, id string, argv ...string) (string, *sandbox.ExecResult) {
	t.Helper()
	var out bytes.Buffer
	res, err := sbOf(t, b, id).Exec(context.Background(), sandbox.ExecRequest{Args: argv, Stdout: &out})
	if err != nil {
		t.Fatalf("exec %q: %v", argv, err)
	}
	return out.String(), res
}

// sbOf opens the sandbox ref names in b, failing the test otherwise.
func sbOf(t testing.TB, b *Backend, ref string) *Sandbox {
	t.Helper()
	s, err := b.Sandbox(context.Background(), ref)
	if err != nil {
		t.Fatalf("open %s: %v", ref, err)
	}
	return s
}

// infoOf describes the sandbox ref names in b.
func infoOf(ctx context.Context, b *Backend, ref string) (sandbox.Info, error) {
	s, err := b.Sandbox(ctx, ref)
	if err != nil {
		return sandbox.Info{}, err
	}
	return s.Info(ctx)
}

// originCertEnv names the PEM file of a test origin's certificate: the
// supervisors a test starts inherit it, and their proxies trust that
// certificate and resolve every name to 127.0.0.1 (see originHooks).
const originCertEnv = "TENT_TEST_ORIGIN_CERT"

// originHooks points the proxies of this process's sandboxes at the test
// origin that originCertEnv names, if any.
func originHooks() {
	data, err := os.ReadFile(os.Getenv(originCertEnv))
	if err != nil {
		return
	}
	pool := x509.NewCertPool()
	if pool.AppendCertsFromPEM(data) {
		testhooks.UpstreamRoots, testhooks.Resolver = pool, loopback{}
	}
}

type loopback struct{}

func (loopback) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}
