package serve

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

// TestSudo: the server's sandboxes have sudo, as E2B's user does, found
// by the login shell the SDKs run commands with (bash -l -c): it runs
// the command as root (whoami, id -u), with sudo's clean environment
// (plain sudo drops a variable, -E keeps it), and can do nothing the
// sandbox's user cannot: /usr stays read-only (EROFS), mount(8) fails.
func TestSudo(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts sandboxes")
	}
	if fi, err := os.Stat("/usr/local/bin"); err != nil || !fi.IsDir() {
		t.Skip("this host has no /usr/local/bin, where sudo appears")
	}
	h, local := newLocalHarness(t, Options{})
	id := decode[sandboxResponse](t, h.do("POST", "/sandboxes", pythonCreateBody)).SandboxID
	bash := func(script string) (string, string, int) {
		t.Helper()
		res, err := handleOf(t, local, id).Exec(context.Background(), sandbox.ExecRequest{Args: []string{"/bin/bash", "-l", "-c", script}, Env: []string{"FOO=bar"}})
		if err != nil {
			t.Fatalf("%s: %v", script, err)
		}
		return strings.TrimSpace(string(res.Stdout)), strings.TrimSpace(string(res.Stderr)), res.ExitCode
	}
	if out, errs, code := bash(`sudo echo "$FOO"; sudo whoami; sudo id -u; id -u; sudo sh -c 'echo "[$FOO]"'; sudo -E sh -c 'echo "[$FOO]"'`); code != 0 || out != "bar\nroot\n0\n1000\n[]\n[bar]" {
		t.Errorf("sudo in the SDKs' login shell: %q (stderr %q, exit %d)", out, errs, code)
	}
	if out, errs, _ := bash(`sudo touch /usr/x 2>&1; sudo mkdir /m && sudo mount -t tmpfs none /m 2>&1; sudo touch /made-by-root && stat -c %u /made-by-root`); !strings.Contains(out, "Read-only file system") || !strings.Contains(out, "ermission denied") || !strings.HasSuffix(out, "\n1000") {
		t.Errorf("sudo's limits: %q (stderr %q): want EROFS on /usr, mount refused, and root's files the sandbox user's", out, errs)
	}
}
