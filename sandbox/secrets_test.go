//go:build linux

package sandbox_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
)

const sandboxSecret = "ghp_REAL-secret-value-0123456789"

// secretOrigin is an HTTPS server (its certificate covers *.example.com)
// that records the Authorization header of every request by path, and
// serves a git repository under /repo.git through git http-backend.
type secretOrigin struct {
	srv  *httptest.Server
	port string
	mu   sync.Mutex
	auth map[string]string // path -> Authorization
}

func newSecretOrigin(t *testing.T) *secretOrigin {
	t.Helper()
	o := &secretOrigin{auth: map[string]string{}}
	var git http.Handler = http.NotFoundHandler()
	if backend, err := exec.LookPath("/usr/lib/git-core/git-http-backend"); err == nil {
		root := t.TempDir()
		repo := filepath.Join(root, "repo.git")
		for _, args := range [][]string{{"init", "-q", "--bare", repo}, {"-C", repo, "config", "http.receivepack", "false"}} {
			if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
				t.Fatalf("git %v: %v %s", args, err, out)
			}
		}
		git = &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	}
	o.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		key := r.URL.Path
		if strings.HasPrefix(key, "/repo.git/") {
			key = "/repo.git"
		}
		if _, seen := o.auth[key]; !seen || r.Header.Get("Authorization") != "" {
			o.auth[key] = r.Host + " " + r.Header.Get("Authorization")
		}
		o.mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/repo.git/") {
			git.ServeHTTP(w, r)
			return
		}
		fmt.Fprintf(w, "ok %s\n", r.URL.Path)
	}))
	t.Cleanup(o.srv.Close)
	_, o.port, _ = net.SplitHostPort(o.srv.Listener.Addr().String())
	pool := x509.NewCertPool()
	pool.AddCert(o.srv.Certificate())
	t.Cleanup(sandbox.SetTestUpstreamRoots(pool))
	return o
}

func (o *secretOrigin) got(path string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.auth[path]
}

// secretSpec allows api.example.com and other.example.com on the
// origin's port (so that programs ignoring the proxy variables are caught
// on it) and binds TOKEN to api.example.com.
func secretSpec(port string) sandbox.Spec {
	return sandbox.Spec{
		Networking: sandbox.Networking{
			Network: sandbox.NetworkPolicy{
				Mode:         netpolicy.Limited,
				AllowedHosts: []string{"api.example.com:" + port, "other.example.com:" + port, "127.0.0.1"},
				Secrets:      []netpolicy.Secret{{Name: "TOKEN", Hosts: []string{"api.example.com"}, Value: sandboxSecret}},
			},
		},
	}
}

// probeReq is the command line of the probe's "req".
func probeReq(args ...string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + a + "'"
	}
	return probeTarget + "/testprobe req " + strings.Join(q, " ")
}

// realClients are the programs agents use, each sending the placeholder
// to path with its own TLS stack and proxy handling; those the host lacks
// (the test VM has none) are left out, with a log line. node's fetch
// ignores the proxy variables: it is caught transparently.
func realClients(t *testing.T, base string) (lines, paths []string) {
	for _, c := range []struct{ bin, path, line string }{
		{"curl", "/curl", `curl -sS --fail -H "Authorization: Bearer $TOKEN" ` + base + `/curl`},
		{"python3", "/python", `python3 -c 'import os, urllib.request; urllib.request.urlopen(urllib.request.Request("` + base + `/python", headers={"Authorization": "Bearer " + os.environ["TOKEN"]})).read()'`},
		{"node", "/node", `node -e 'fetch("` + base + `/node", {headers: {Authorization: "Bearer " + process.env.TOKEN}}).then(r => { if (!r.ok) process.exit(3) }, e => { console.error(e); process.exit(4) })'`},
		{"git", "/repo.git", `git -c http.extraHeader="Authorization: Bearer $TOKEN" clone -q ` + base + `/repo.git /tmp/repo`},
	} {
		if _, err := exec.LookPath(c.bin); err != nil {
			t.Logf("%s: not on this host, left out", c.bin)
			continue
		}
		lines, paths = append(lines, c.line), append(paths, c.path)
	}
	return lines, paths
}

func TestSecretReachesOnlyItsHost(t *testing.T) {
	o := newSecretOrigin(t)
	base := "https://api.example.com:" + o.port
	clients, paths := realClients(t, base)
	script := strings.Join(append([]string{
		`set -e`,
		probeReq("GET", base+"/probe", "Authorization=Bearer $TOKEN"),
		probeReq("-noproxy", "GET", base+"/caught", "Authorization=Bearer $TOKEN"),
		probeReq("-k", "GET", "https://other.example.com:"+o.port+"/other", "Authorization=Bearer $TOKEN"),
		`echo "env=$TOKEN"`,
		`cat /proc/self/environ | tr '\0' '\n' | grep '^TOKEN='`,
		`grep -rl "` + sandboxSecret + `" /proc/self/environ /run/tent/ca /tmp /etc/hostname 2>/dev/null || echo "value nowhere"`,
	}, clients...), "\n")
	cmd := sandbox.Command(context.Background(), withProbe(t, secretSpec(o.port)), "/bin/sh", "-c", script)
	var out, errOut bytes.Buffer
	audit := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr, cmd.Resolver, cmd.NetLog = &out, &errOut, &fakeResolver{}, audit
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
	}
	if strings.Contains(out.String()+errOut.String(), sandboxSecret) {
		t.Fatalf("the value reached the sandbox:\n%s%s", out.String(), errOut.String())
	}
	var placeholder string
	for _, line := range strings.Split(out.String(), "\n") {
		if v, ok := strings.CutPrefix(line, "env="); ok {
			placeholder = v
		}
	}
	if !strings.HasPrefix(placeholder, "tent_") || !strings.Contains(out.String(), "TOKEN="+placeholder+"\n") || !strings.Contains(out.String(), "value nowhere") {
		t.Fatalf("placeholder %q; output:\n%s", placeholder, out.String())
	}
	want := "api.example.com:" + o.port + " Bearer " + sandboxSecret
	for _, path := range append([]string{"/probe", "/caught"}, paths...) {
		if got := o.got(path); got != want {
			t.Errorf("%s: the origin received %q, want %q (stderr: %s)", path, got, want, errOut.String())
		}
	}
	if got := o.got("/other"); got != "other.example.com:"+o.port+" Bearer "+placeholder {
		t.Errorf("other.example.com received %q, want the placeholder", got)
	}
	if strings.Contains(audit.String(), sandboxSecret) || strings.Contains(fmt.Sprintf("%+v", cmd.Report), sandboxSecret) {
		t.Error("the audit log or the report holds the value")
	}
	if !strings.Contains(audit.String(), `"secrets":["TOKEN"]`) {
		t.Errorf("no audit record of the injection:\n%s", audit.String())
	}
	if !strings.Contains(audit.String(), `"event":"decision","proto":"transparent","host":"api.example.com"`) {
		t.Errorf("no caught connection to api.example.com in the audit log:\n%s", audit.String())
	}
}

func TestHTTPRuleInSandbox(t *testing.T) {
	o := newSecretOrigin(t)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "plain") }))
	defer plain.Close()
	_, plainPort, _ := net.SplitHostPort(plain.Listener.Addr().String())
	rule := "GET api.example.com:" + o.port + "/repos/org/"
	spec := sandbox.Spec{
		Networking: sandbox.Networking{
			Network: sandbox.NetworkPolicy{Mode: netpolicy.Limited,
				AllowedHosts: []string{rule, "GET api.example.com:" + plainPort + "/repos/org/", "127.0.0.1"}},
		},
	}
	base := "https://api.example.com:" + o.port
	// The last two: plain HTTP from a program that ignores the proxy
	// variables, caught transparently, is held to the rules too.
	script := strings.Join([]string{
		probeReq("GET", base+"/repos/org/x"),
		probeReq("POST", base+"/repos/org/x"),
		probeReq("GET", base+"/repos/org/%2e%2e/other"),
		probeReq("GET", base+"/repos/other"),
		probeReq("-noproxy", "GET", "http://api.example.com:"+plainPort+"/repos/org/x"),
		probeReq("-noproxy", "GET", "http://api.example.com:"+plainPort+"/other"),
	}, "\n")
	out, _ := runNetScript(t, withProbe(t, spec), script)
	lines := strings.Split(out, "\n")
	want := []string{"200  ok /repos/org/x", "403 ", "403 ", "403 " + netpolicy.ReasonHTTPRule + "; rule=" + rule + " tent: blocked GET /repos/other", "200  plain", "403 "}
	if len(lines) != len(want) {
		t.Fatalf("output:\n%s", out)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: %q, want it to start with %q", i, lines[i], w)
		}
	}
}

// runNetScript runs a shell script in a sandbox with the fake resolver.
func runNetScript(t *testing.T, spec sandbox.Spec, script string) (string, string) {
	t.Helper()
	cmd := sandbox.Command(context.Background(), spec, "/bin/sh", "-c", script)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Resolver = &out, &errOut, &fakeResolver{}
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s%s", err, out.String(), errOut.String())
	}
	return strings.TrimSpace(out.String()), errOut.String()
}

func TestSecretRefusals(t *testing.T) {
	// CA directories are looked for in a TMPDIR of this test's own, as
	// other packages' tests make theirs in /tmp at the same time.
	t.Setenv("TMPDIR", t.TempDir())
	ok := netpolicy.Secret{Name: "TOKEN", Hosts: []string{"api.example.com"}, Value: sandboxSecret}
	for _, tc := range []struct {
		name string
		spec sandbox.Spec
		want string
	}{
		{"mode none", sandbox.Spec{Networking: sandbox.Networking{Network: sandbox.NetworkPolicy{Secrets: []netpolicy.Secret{ok}}}}, "limited"},
		{"env conflict", sandbox.Spec{Identity: sandbox.Identity{Env: []string{"TOKEN=x"}}, Networking: sandbox.Networking{Network: sandbox.NetworkPolicy{Mode: netpolicy.Limited, Secrets: []netpolicy.Secret{ok}}}}, "TOKEN is a secret"},
		{"no value", sandbox.Spec{Networking: sandbox.Networking{Network: sandbox.NetworkPolicy{Mode: netpolicy.Limited, Secrets: []netpolicy.Secret{{Name: "T", Hosts: []string{"a.example"}}}}}}, "has no value"},
	} {
		err := sandbox.Command(context.Background(), tc.spec, "/bin/true").Run()
		if !errors.Is(err, sandbox.ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalidSpec naming %q", tc.name, err, tc.want)
		}
	}
	// Nothing of a refused or finished sandbox's CA directory is left.
	if m, _ := filepath.Glob(filepath.Join(os.TempDir(), "tent-ca-*")); len(m) > 0 {
		t.Errorf("left behind: %v", m)
	}
}

// A long-lived sandbox: execs see the placeholder, and neither the
// snapshot nor anything else written of it holds the value.
func TestSecretNotInSnapshot(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir()) // see TestSecretRefusals
	o := newSecretOrigin(t)
	sb, err := sandbox.Provision(context.Background(), withProbe(t, secretSpec(o.port)), sandbox.ProvisionOptions{Resolver: &fakeResolver{}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(context.Background())
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c",
		`echo "$TOKEN" > /tmp/token; echo "$TOKEN" > "$HOME/token"; ` + probeReq("GET", "https://api.example.com:"+o.port+"/exec", "Authorization=Bearer $TOKEN")}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, res.Stderr)
	}
	if got := o.got("/exec"); !strings.HasSuffix(got, "Bearer "+sandboxSecret) {
		t.Errorf("the origin received %q", got)
	}
	dir := filepath.Join(t.TempDir(), "snap")
	if _, err := sb.Snapshot(context.Background(), dir, sandbox.SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	files := 0
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files++
		b, err := os.ReadFile(path)
		if err == nil && bytes.Contains(b, []byte(sandboxSecret)) {
			t.Errorf("%s holds the value", path)
		}
		return err
	})
	if err != nil || files == 0 {
		t.Fatalf("walked %d files: %v", files, err)
	}
	if err := sb.Terminate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(os.TempDir(), "tent-ca-*")); len(m) > 0 {
		t.Errorf("left behind: %v", m)
	}
}

// The policy of a running sandbox can change; its secrets stay, and
// neither new secrets nor (without a CA from the start) HTTP rules come.
func TestSecretSurvivesPolicyChange(t *testing.T) {
	o := newSecretOrigin(t)
	spec := withProbe(t, secretSpec(o.port))
	sb, err := sandbox.Provision(context.Background(), spec, sandbox.ProvisionOptions{Resolver: &fakeResolver{}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(context.Background())
	p := spec.Network
	p.Secrets = nil
	p.AllowedHosts = []string{"api.example.com:" + o.port, "127.0.0.1", "GET other.example.com:" + o.port + "/only/"}
	if err := sb.SetNetworkPolicy(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c",
		probeReq("GET", "https://api.example.com:"+o.port+"/after", "Authorization=Bearer $TOKEN") + "; " +
			probeReq("GET", "https://other.example.com:"+o.port+"/not-only")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := o.got("/after"); !strings.HasSuffix(got, "Bearer "+sandboxSecret) {
		t.Errorf("after the change the origin received %q (exit %d, %s)", got, res.ExitCode, res.Stderr)
	}
	if lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], "403 "+netpolicy.ReasonHTTPRule) {
		t.Errorf("the new HTTP rule: %q", res.Stdout)
	}
	p.Secrets = []netpolicy.Secret{{Name: "OTHER", Hosts: []string{"api.example.com"}, Value: sandboxSecret}}
	if err := sb.SetNetworkPolicy(context.Background(), p); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("a new secret at run time: %v, want ErrUnsupported", err)
	}
	plain, err := sandbox.Provision(context.Background(), limited(), sandbox.ProvisionOptions{Resolver: &fakeResolver{}})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Terminate(context.Background())
	err = plain.SetNetworkPolicy(context.Background(), sandbox.NetworkPolicy{Mode: netpolicy.Limited, AllowedHosts: []string{"GET a.example/x/"}})
	if !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("an HTTP rule for a sandbox without a CA: %v, want ErrUnsupported", err)
	}
}

// A caught connection to a secret's host that is not TLS (git over SSH,
// say) is tunnelled untouched; to a host with HTTP rules it is read as
// HTTP, and anything else is refused.
func TestSecretHostOtherProtocols(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	spec := sandbox.Spec{
		Networking: sandbox.Networking{
			Network: sandbox.NetworkPolicy{Mode: netpolicy.Limited,
				AllowedHosts: []string{"api.example.com:" + port, "GET rules.example.com:" + port + "/x/", "127.0.0.1"},
				Secrets:      []netpolicy.Secret{{Name: "TOKEN", Hosts: []string{"api.example.com", "rules.example.com"}, Value: sandboxSecret}}},
		},
	}
	out, _ := runNetScript(t, withProbe(t, spec),
		probeTarget+"/testprobe say api.example.com:"+port+" SSH-2.0-probe; "+probeTarget+"/testprobe say rules.example.com:"+port+" SSH-2.0-probe")
	if want := "SSH-2.0-probe\nHTTP/1.1 400 Bad Request"; out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
}

// TestHeaderTransformInSandbox: a header transform (Secret.Header, E2B's
// network rules) reaches its host's requests from inside, whatever the
// sandbox sends, and gives the sandbox no variable and no value.
func TestHeaderTransformInSandbox(t *testing.T) {
	o := newSecretOrigin(t)
	spec := secretSpec(o.port)
	spec.Network.Secrets = []netpolicy.Secret{{Name: "E2B_RULE_1", Hosts: []string{"api.example.com"}, Header: "Authorization", Value: "Bearer " + sandboxSecret}}
	script := strings.Join([]string{
		`set -e`,
		probeReq("GET", "https://api.example.com:"+o.port+"/plain"),
		probeReq("GET", "https://api.example.com:"+o.port+"/overridden", "Authorization=Bearer from-inside"),
		`env | grep -c E2B_RULE || true`,
		`grep -rl "` + sandboxSecret + `" /proc/self/environ /run/tent/ca /tmp 2>/dev/null || echo "value nowhere"`,
	}, "\n")
	cmd := sandbox.Command(context.Background(), withProbe(t, spec), "/bin/sh", "-c", script)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Resolver = &out, &errOut, &fakeResolver{}
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
	}
	if strings.Contains(out.String()+errOut.String(), sandboxSecret) || !strings.Contains(out.String(), "\n0\nvalue nowhere") {
		t.Fatalf("inside, the variable or the value:\n%s%s", out.String(), errOut.String())
	}
	want := "api.example.com:" + o.port + " Bearer " + sandboxSecret
	for _, path := range []string{"/plain", "/overridden"} {
		if got := o.got(path); got != want {
			t.Errorf("%s: the origin received %q, want %q", path, got, want)
		}
	}
}

// TestHeaderTransformChangesAtRunTime: a running sandbox's header
// transforms are rules like the others: SetNetworkPolicy rotates their
// value (the next request carries the new one), and a policy without
// them removes them (the request goes out as the sandbox sent it), while
// the sandbox's variables stay. Info follows, and a sandbox that does
// not trust the proxy's CA cannot gain one.
func TestHeaderTransformChangesAtRunTime(t *testing.T) {
	o := newSecretOrigin(t)
	spec := withProbe(t, secretSpec(o.port))
	const rotated = "ghp_ROTATED-value-9876543210"
	header := func(v string) netpolicy.Secret {
		return netpolicy.Secret{Name: "E2B_RULE_1", Hosts: []string{"other.example.com"}, Header: "Authorization", Value: "Bearer " + v}
	}
	spec.Network.Secrets = append(spec.Network.Secrets, header(sandboxSecret))
	sb, err := sandbox.Provision(context.Background(), spec, sandbox.ProvisionOptions{Resolver: &fakeResolver{}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(context.Background())
	request := func(path string) {
		t.Helper()
		res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c",
			probeReq("GET", "https://other.example.com:"+o.port+path, "Authorization=Bearer from-inside") + "; " +
				probeReq("GET", "https://api.example.com:"+o.port+path+"-var", "Authorization=Bearer $TOKEN")}})
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		t.Logf("%s: exit %d\n%s%s", path, res.ExitCode, res.Stdout, res.Stderr)
	}
	base := spec.Network
	base.Secrets = []netpolicy.Secret{header(rotated)}
	request("/first")
	// A policy whose ports cannot all be caught is refused and changes
	// nothing: the header keeps its value.
	tooMany := base
	for port := 2000; port < 2260; port++ {
		tooMany.AllowedHosts = append(slices.Clip(tooMany.AllowedHosts), fmt.Sprintf("p.example.com:%d", port))
	}
	if err := sb.SetNetworkPolicy(context.Background(), tooMany); !errors.Is(err, sandbox.ErrInvalidSpec) || !strings.Contains(err.Error(), "ports caught") {
		t.Fatalf("a policy needing 260 more ports caught: %v, want ErrInvalidSpec", err)
	}
	request("/refused")
	if err := sb.SetNetworkPolicy(context.Background(), base); err != nil {
		t.Fatal(err)
	}
	request("/rotated")
	base.Secrets = nil
	if err := sb.SetNetworkPolicy(context.Background(), base); err != nil {
		t.Fatal(err)
	}
	request("/removed")
	// Without the transform, other.example.com, which received its
	// values, stays intercepted (its answers are scrubbed of them): the
	// request goes out as the sandbox sent it.
	for path, want := range map[string]string{
		"/first": "Bearer " + sandboxSecret, "/refused": "Bearer " + sandboxSecret, "/rotated": "Bearer " + rotated, "/removed": "Bearer from-inside",
		"/first-var": "Bearer " + sandboxSecret, "/rotated-var": "Bearer " + sandboxSecret, "/removed-var": "Bearer " + sandboxSecret,
	} {
		if got := o.got(path); !strings.HasSuffix(got, want) || want == "" && got != "" {
			t.Errorf("%s: the origin received %q, want %q", path, got, want)
		}
	}
	info := sb.Info()
	if s := info.Spec.Network.Secrets; len(s) != 1 || s[0].Name != "TOKEN" || s[0].Value != sandboxSecret {
		t.Errorf("Info's secrets after the changes: %+v, want the variable only", s)
	}
	base.Secrets = []netpolicy.Secret{{Name: "TOKEN", Hosts: []string{"api.example.com"}, Value: rotated}}
	if err := sb.SetNetworkPolicy(context.Background(), base); !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "secret TOKEN") {
		t.Errorf("a variable at run time: %v, want ErrUnsupported naming it", err)
	}
	plain, err := sandbox.Provision(context.Background(), withProbe(t, limited()), sandbox.ProvisionOptions{Resolver: &fakeResolver{}})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Terminate(context.Background())
	p := limited().Network
	p.Secrets = []netpolicy.Secret{header(rotated)}
	if err := plain.SetNetworkPolicy(context.Background(), p); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("a header transform for a sandbox without a CA: %v, want ErrUnsupported", err)
	}
}
