package secretstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSecretStoreSetLookupDelete(t *testing.T) {
	dir := t.TempDir()
	s := Open(dir)
	if _, ok := s.LookupSecret("TOKEN"); ok {
		t.Fatal("an empty store has TOKEN")
	}
	if err := s.Set("TOKEN", "first-value-0123"); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("store file: %v %v, want mode 0600", fi, err)
	}
	// A second reader (another supervisor of the directory) sees each write.
	other := Open(dir)
	for _, v := range []string{"first-value-0123", "rotated-value-0123"} {
		if err := s.Set("TOKEN", v); err != nil {
			t.Fatal(err)
		}
		if got, ok := other.LookupSecret("TOKEN"); !ok || got != v {
			t.Fatalf("after Set %q: %q %v", v, got, ok)
		}
	}
	if names, err := other.List(); err != nil || fmt.Sprint(names) != "[TOKEN]" {
		t.Fatalf("List: %v %v", names, err)
	}
	if held, err := s.Delete("TOKEN"); !held || err != nil {
		t.Fatalf("Delete: %v %v", held, err)
	}
	if _, ok := other.LookupSecret("TOKEN"); ok {
		t.Fatal("a deleted secret is still there")
	}
	for _, bad := range []struct{ name, v, want string }{
		{"TOKEN", "short", "secret TOKEN: value shorter than 8 bytes: too short to tell apart from other text in responses, where the proxy replaces it"},
		{"TOKEN", "a\r\nInjected: 1", "secret TOKEN: value holds CR, LF or NUL, which no header may carry"},
		{"a/b", "value-0123456789", `secret name "a/b": want 1 to 128 letters, digits, '_', '.' or '-'`},
	} {
		if err := s.Set(bad.name, bad.v); err == nil || err.Error() != bad.want {
			t.Errorf("Set(%q): %v, want %q", bad.name, err, bad.want)
		}
	}
}

func TestSecretStoreRefusesUnsafeFiles(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, path string)
		want  func(path string) string
	}{
		{"symlink", func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "elsewhere")
			if err := os.WriteFile(target, []byte(`{"TOKEN":"planted-value-0123"}`), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}, func(path string) string { return "secret store refused: " + path + " is a symbolic link" }},
		{"foreign", func(t *testing.T, path string) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to give a file away")
			}
			if err := os.WriteFile(path, []byte(`{"TOKEN":"planted-value-0123"}`), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(path, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, func(path string) string {
			return fmt.Sprintf("secret store refused: %s is owned by uid 65534, not %d", path, os.Geteuid())
		}},
		{"group-readable", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte(`{"TOKEN":"planted-value-0123"}`), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, 0o640); err != nil {
				t.Fatal(err)
			}
		}, func(path string) string {
			return "secret store refused: " + path + " has mode 0640: it must be readable by its owner only (0600)"
		}},
		{"fifo", func(t *testing.T, path string) {
			if err := unix.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}, func(path string) string { return "secret store refused: " + path + " is not a regular file" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			tc.plant(t, path)
			s := Open(dir)
			want := tc.want(path)
			if _, _, err := s.Get("TOKEN"); !errors.Is(err, ErrRefused) || err.Error() != want {
				t.Errorf("Get: %v, want %q", err, want)
			}
			if v, ok := s.LookupSecret("TOKEN"); ok {
				t.Errorf("LookupSecret gave %q from a refused store", v)
			}
			if err := s.Set("TOKEN", "new-value-0123456"); !errors.Is(err, ErrRefused) || err.Error() != want {
				t.Errorf("Set: %v, want %q", err, want)
			}
		})
	}
}

func TestSecretStoreConcurrentWriters(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := Open(dir) // a store per writer, as separate processes have
			if err := s.Set(fmt.Sprintf("S%d", i), fmt.Sprintf("value-%d-0123456", i)); err != nil {
				t.Error(err)
			}
			_, _ = s.LookupSecret("S0")
		}()
	}
	wg.Wait()
	names, err := Open(dir).List()
	if err != nil || len(names) != 8 {
		t.Fatalf("after 8 concurrent writers: %v %v", names, err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Errorf("the directory holds %d files, want the store and its lock: %v", len(ents), ents)
	}
}

// A reader parses the file again only when its identity changed.
func TestSecretStoreCachesByIdentity(t *testing.T) {
	dir := t.TempDir()
	w, r := Open(dir), Open(dir)
	if err := w.Set("TOKEN", "first-value-0123"); err != nil {
		t.Fatal(err)
	}
	m1, err1 := r.read()
	m2, err2 := r.read()
	if err1 != nil || err2 != nil || fmt.Sprintf("%p", m1) != fmt.Sprintf("%p", m2) {
		t.Fatalf("two reads of an unchanged file parsed it twice (%p, %p) or failed: %v %v", m1, m2, err1, err2)
	}
	if err := w.Set("TOKEN", "second-value-4567"); err != nil {
		t.Fatal(err)
	}
	if m3, err := r.read(); err != nil || fmt.Sprintf("%p", m3) == fmt.Sprintf("%p", m1) || m3["TOKEN"] != "second-value-4567" {
		t.Fatalf("after a write: %v %v", m3["TOKEN"], err)
	}
}
