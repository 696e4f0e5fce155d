package serve

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tent-sandbox/tent/internal/atomicfile"
	"github.com/tent-sandbox/tent/internal/atomicfile/atomicfiletest"
)

// A killed tent serve leaves the temporaries it was writing its state
// and secrets through (.serve-state.json.tmp-N); the next server's start
// removes them, and never one another writer holds, the files
// themselves, or names of another pattern.
func TestServeStartRemovesKilledTemps(t *testing.T) {
	dir := t.TempDir()
	state, secrets := filepath.Join(dir, "serve-state.json"), filepath.Join(dir, "secrets.json")
	put := func(name string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dead := []string{
		".serve-state.json.tmp-1234567890", // an older server's os.CreateTemp
		stateTemps(state).TempName(),
		secretsTemps(secrets).TempName(),
		".secrets-987654321",
	}
	kept := []string{".serve-state.json.tmp-1.bak", "serve-state.json.tmp-1", ".other.tmp-12"}
	for _, n := range append(dead, kept...) {
		put(n)
	}
	live, err := atomicfile.Create(state, 0o600, stateTemps(state))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Abort()
	h := newHarness(t, Options{StateFile: state, SecretsFile: secrets})
	if r := h.do("POST", "/secrets", `{"name":"gh","value":"ghp_0123456789abcdefghij"}`); r.status != http.StatusCreated {
		t.Fatal(r.status, string(r.body))
	}
	h.s.save()
	// The secret store's file and lock are beside them, as in tent
	// serve's state directory (the harness's store is that directory's).
	want := append(kept, live.TempName(), "serve-state.json", "secrets.json", "secrets", "secrets.lock")
	slices.Sort(want)
	got := dirNames(t, dir)
	if !slices.Equal(got, want) {
		t.Errorf("after the start %s holds %q, want %q", dir, got, want)
	}
	for _, f := range []string{state, secrets, filepath.Join(dir, "secrets")} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want mode 0600", f, fi, err)
		}
	}
}

// The state file is replaced whole or not at all: on a full disk the
// old one stays, whole, mode 0600, and no temporary is left.
func TestServeStateFullDiskKeepsOld(t *testing.T) {
	dir := atomicfiletest.SmallDisk(t, 64<<10, 0o700)
	state := filepath.Join(dir, "serve-state.json")
	h := newHarness(t, Options{StateFile: state})
	h.create(`{"timeout":60}`)
	// The writer saves in the background whenever the state changes: it
	// is stopped (after its last save) so that no save of its own is in
	// flight while the disk fills. One would replace the state file as
	// the disk fills and free the old one's page, which the save below
	// then takes (the test failed so on a loaded machine).
	h.s.stopSaving()
	old, err := os.ReadFile(state)
	if err != nil || len(old) == 0 {
		t.Fatalf("state: %q %v", old, err)
	}
	// Fill the disk, then make the state grow past what is left.
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = filler.Write(bytes.Repeat([]byte("x"), 4096))
	}
	filler.Close()
	for i := range 4 {
		h.create(fmt.Sprintf(`{"timeout":%d}`, 60+i))
	}
	h.s.save()
	b, err := os.ReadFile(state)
	fi, serr := os.Stat(state)
	if err != nil || serr != nil || !bytes.Equal(b, old) || fi.Mode().Perm() != 0o600 {
		t.Errorf("state file after a save on a full disk: %d bytes (%v), mode %v (%v); want the old %d bytes, 0600", len(b), err, fi.Mode().Perm(), serr, len(old))
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Errorf("%d entries on the disk, want the state file and the filler: %v", len(ents), ents)
	}
}
