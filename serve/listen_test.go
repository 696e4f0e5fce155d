package serve

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadOrCreateAPIKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	key, path, created, err := LoadOrCreateAPIKey(dir)
	if err != nil || !created || !strings.HasPrefix(key, "e2b_") || len(key) != 44 {
		t.Fatalf("first call: key %q created %v err %v", key, created, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	if di, _ := os.Stat(dir); di.Mode().Perm() != 0o700 {
		t.Errorf("state directory mode %v, want 0700", di.Mode().Perm())
	}
	again, _, created, err := LoadOrCreateAPIKey(dir)
	if err != nil || created || again != key {
		t.Fatalf("second call: key %q created %v err %v, want the same key", again, created, err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := LoadOrCreateAPIKey(dir); err == nil || !strings.Contains(err.Error(), "others may read it") {
		t.Fatalf("a key file readable by others: %v", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/hostname", path); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := LoadOrCreateAPIKey(dir); err == nil {
		t.Fatal("a symlinked key file was read")
	}
}

func TestCheckListenAddr(t *testing.T) {
	for _, c := range []struct {
		addr          string
		tls, insecure bool
		ok            bool
	}{
		{"127.0.0.1:49982", false, false, true},
		{"[::1]:0", false, false, true},
		{"localhost:80", false, false, true},
		{"0.0.0.0:49982", false, false, false},
		{":49982", false, false, false},
		{"192.168.1.5:49982", true, false, true},
		{"192.168.1.5:49982", false, true, true},
		{"nonsense", false, true, false},
	} {
		err := CheckListenAddr(c.addr, c.tls, c.insecure)
		if (err == nil) != c.ok {
			t.Errorf("CheckListenAddr(%q, tls %v, insecure %v) = %v", c.addr, c.tls, c.insecure, err)
		}
	}
}
