package serve

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

func TestStateFileTakesUpSandboxes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "serve-state.json")
	f := newFake()
	start := func() *Server {
		s, err := New(f, Options{APIKey: testKey, SandboxAPI: &fakeAPI{}, StateFile: path})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := start()
	h := &harness{t: t, f: f, s: s}
	srv := newTestHTTP(t, s)
	h.url = srv
	kept := h.create(`{"timeout":60,"autoPause":true,"metadata":{"a":"b"}}`)
	soon := h.create(`{"timeout":2}`)
	gone := h.create(`{"timeout":60}`)
	if err := s.Close(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file: %v, mode %v", err, fi.Mode().Perm())
	}
	var saved savedState
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &saved); err != nil || len(saved.Sandboxes) != 3 || !saved.Sandboxes[kept.SandboxID].Created || saved.Sandboxes[kept.SandboxID].OnTimeout != "pause" {
		t.Fatalf("state file holds %s (%v)", b, err)
	}
	// Meanwhile, one sandbox goes away (tent rm) and one's timeout ends.
	if err := f.Terminate(context.Background(), gone.SandboxID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2100 * time.Millisecond)

	s = start()
	t.Cleanup(func() { _ = s.Close(context.Background(), false) })
	waitFor(t, 5*time.Second, func() bool { return !f.has(soon.SandboxID) })
	v := s.view(kept.SandboxID)
	if !v.created || v.onTimeout != onTimeoutPause || time.Until(v.endAt) < 50*time.Second {
		t.Fatalf("the kept sandbox's settings were not taken up: %+v", v)
	}
	s.mu.Lock()
	_, stale := s.boxes[gone.SandboxID]
	s.mu.Unlock()
	if stale {
		t.Error("a sandbox the backend no longer has was taken up")
	}
	// Its timeout runs again: made short, it pauses the sandbox.
	s.mu.Lock()
	s.armLocked(s.boxLocked(kept.SandboxID), 10*time.Millisecond)
	s.mu.Unlock()
	waitFor(t, 5*time.Second, func() bool { return f.state(kept.SandboxID) == sandbox.StateSuspended })

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(f, Options{APIKey: testKey, SandboxAPI: &fakeAPI{}, StateFile: path}); err == nil || !strings.Contains(err.Error(), "others may read it") {
		t.Fatalf("a state file others may read: %v", err)
	}
}
