package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/sandbox/secretstore"
)

// tent secret set/ls/rm write the state directory's store, the one the
// supervisors' proxies ask per request (sandbox/supervised's
// TestSecretRotationReachesRunningForkedAndResumed shows a write there
// reaching running, forked and resumed sandboxes): a value from tent's
// environment, a 0600 file or stdin, never from argv; ls names only.
func TestSecretCommandWritesTheStore(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	st := secretstore.Open(l.dir)
	value := func(name string) string {
		v, _, err := st.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	id := strings.TrimSpace(invocation{args: []string{"--state-dir", l.dir, "create", "--secret", "TOKEN@api.example.com"},
		env: []string{"TOKEN=first-value-0123"}}.run(t).stdout)
	if v := value("TOKEN"); v != "first-value-0123" {
		t.Fatalf("after create: %q", v)
	}
	invocation{args: []string{"--state-dir", l.dir, "secret", "set", "TOKEN"}, env: []string{"TOKEN=second-value-0123"}}.run(t).expect(t, 0)
	if v := value("TOKEN"); v != "second-value-0123" {
		t.Errorf("set from the environment: %q", v)
	}
	file := filepath.Join(t.TempDir(), "values")
	if err := os.WriteFile(file, []byte("TOKEN=third-value-0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l.tent(t, "secret", "set", "TOKEN", "--from-file", file).expect(t, 0)
	if v := value("TOKEN"); v != "third-value-0123" {
		t.Errorf("set --from-file: %q", v)
	}
	invocation{args: []string{"--state-dir", l.dir, "secret", "set", "OTHER", "--stdin"}, stdin: strings.NewReader("fourth-value-0123\nignored\n")}.run(t).expect(t, 0)
	if v := value("OTHER"); v != "fourth-value-0123" {
		t.Errorf("set --stdin: %q", v)
	}
	// Refusals name what is wrong and change nothing.
	invocation{args: []string{"--state-dir", l.dir, "secret", "set", "TOKEN"}, env: []string{"TOKEN=short"}}.run(t).expect(t, 125, "secret TOKEN", "shorter than 8")
	l.tent(t, "secret", "set", "MISSING_FROM_ENV").expect(t, 125, "tent's environment has no MISSING_FROM_ENV")
	l.tent(t, "secret", "set", "TOKEN", "--from-file", file, "--stdin").expect(t, 125, "give one")
	if v := value("TOKEN"); v != "third-value-0123" {
		t.Errorf("a refused set changed the value: %q", v)
	}
	ls := l.tent(t, "secret", "ls")
	ls.expect(t, 0)
	if ls.stdout != "OTHER\nTOKEN\n" {
		t.Errorf("ls: %q", ls.stdout)
	}
	js := l.tent(t, "secret", "ls", "-o", "json")
	js.expect(t, 0)
	var names []string
	if err := json.Unmarshal([]byte(js.stdout), &names); err != nil || strings.Join(names, ",") != "OTHER,TOKEN" || strings.Contains(js.stdout, "value-0123") {
		t.Errorf("ls -o json: %q", js.stdout)
	}
	l.tent(t, "secret", "rm", "OTHER", "NOPE").expect(t, 1, "no such secret: NOPE")
	if _, ok, _ := st.Get("OTHER"); ok {
		t.Error("rm left OTHER")
	}
	storeOnlyValue(t, l.dir, "third-value-0123")
	l.tent(t, "rm", id).expect(t, 0)
}

// storeOnlyValue checks that the store of dir is a 0600 file holding v.
func storeOnlyValue(t *testing.T, dir, v string) {
	t.Helper()
	path := filepath.Join(dir, secretstore.FileName)
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode() != 0o600 {
		t.Fatalf("the secret store: %v %v, want a file of mode 0600", fi, err)
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), v) {
		t.Errorf("the secret store does not hold %q", v)
	}
}
