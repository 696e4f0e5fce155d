//go:build linux

package namespaces

import (
	"os"
	"slices"
	"strconv"
	"testing"
)

// sudoEnv is sudo's env_reset: the caller's variables are dropped but
// for the terminal, locale and proxy ones; -E keeps them all; both set
// root's identity and SUDO_*.
func TestSudoEnv(t *testing.T) {
	cur := []string{"FOO=bar", "PATH=/evil", "HOME=/home/user", "USER=user", "TERM=xterm", "LC_ALL=C", "HTTPS_PROXY=http://127.0.0.1:1", "LD_PRELOAD=/tmp/x.so"}
	uid, gid := strconv.Itoa(os.Getuid()), strconv.Itoa(os.Getgid())
	got := sudoEnv(cur, false)
	for _, want := range []string{"TERM=xterm", "LC_ALL=C", "HTTPS_PROXY=http://127.0.0.1:1", "HOME=/root", "USER=root", "LOGNAME=root",
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SUDO_USER=user", "SUDO_UID=" + uid, "SUDO_GID=" + gid} {
		if !slices.Contains(got, want) {
			t.Errorf("env_reset lacks %s: %q", want, got)
		}
	}
	for _, not := range []string{"FOO=bar", "PATH=/evil", "HOME=/home/user", "LD_PRELOAD=/tmp/x.so"} {
		if slices.Contains(got, not) {
			t.Errorf("env_reset kept %s: %q", not, got)
		}
	}
	got = sudoEnv(cur, true)
	for _, want := range []string{"FOO=bar", "PATH=/evil", "HOME=/home/user", "USER=root", "SUDO_USER=user"} {
		if !slices.Contains(got, want) {
			t.Errorf("-E lacks %s: %q", want, got)
		}
	}
	if slices.Contains(got, "USER=user") {
		t.Errorf("-E kept the caller's USER: %q", got)
	}
}

// Options sudo does not know, and users other than root, are refused
// with status 1 before anything is sent.
func TestSudoRefuses(t *testing.T) {
	for _, args := range [][]string{{"-u", "nobody", "id"}, {"-unobody", "id"}, {"--user=1000", "id"}, {"-X", "id"}, {"--chroot=/", "id"}, {"-u"}, {}} {
		if code := runSudo(args); code != 1 {
			t.Errorf("sudo %q: status %d, want 1", args, code)
		}
	}
	if code := runSudo([]string{"-k"}); code != 0 {
		t.Errorf("sudo -k: status %d, want 0", code)
	}
	if sudoUser("root") != 0 || sudoUser("0") != 0 || sudoUser("#0") != 0 {
		t.Error("root refused")
	}
	if got := shellJoin([]string{"echo", "it's", "$HOME"}); got != `'echo' 'it'\''s' '$HOME'` {
		t.Errorf("shellJoin: %s", got)
	}
}
