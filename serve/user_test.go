package serve

import (
	"encoding/json"
	"net/http"
	"testing"
)

// TestE2BUserAndHome: a sandbox of the server runs as E2B's user (uid
// 1000, "user"), with HOME and its working directory /home/user, which
// is writable, the sandbox's own, kept by a fork and private to it; the
// files API resolves relative paths from it.
func TestE2BUserAndHome(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts sandboxes")
	}
	h, local := newLocalHarness(t, Options{})

	created := decode[sandboxResponse](t, h.do("POST", "/sandboxes", pythonCreateBody))
	id := created.SandboxID
	sh := func(id, script string) string { t.Helper(); return shIn(t, local, id, script) }
	if got := sh(id, `echo $(id -u) $USER $HOME $(pwd)`); got != "1000 user /home/user /home/user" {
		t.Errorf("identity, home and working directory: %q, want E2B's: 1000 user /home/user /home/user", got)
	}
	// A relative path of the files API is beneath /home/user.
	r := h.do("POST", "/files?path=notes.txt", "from the files API", headerSandboxID, id,
		headerAccessToken, created.EnvdAccessToken, "Content-Type", "application/octet-stream")
	var entries []struct{ Path string }
	if r.status != http.StatusOK || json.Unmarshal(r.body, &entries) != nil || len(entries) != 1 || entries[0].Path != "/home/user/notes.txt" {
		t.Fatalf("upload of a relative path: %d %s, want /home/user/notes.txt", r.status, r.body)
	}
	if got := sh(id, `stat -c %u ~/notes.txt && cat notes.txt`); got != "1000\nfrom the files API" {
		t.Errorf("the uploaded file: %q, want it the user's, with its content", got)
	}
	// The files API names its owner "user", whatever the host's
	// /etc/passwd calls uid 1000.
	r = h.do("POST", "/filesystem.Filesystem/Stat", `{"path":"notes.txt"}`, headerSandboxID, id,
		headerAccessToken, created.EnvdAccessToken, "Content-Type", "application/json")
	var st struct{ Entry struct{ Owner, Group string } }
	if r.status != http.StatusOK || json.Unmarshal(r.body, &st) != nil || st.Entry.Owner != "user" || st.Entry.Group != "user" {
		t.Errorf("stat of the uploaded file: %d %s, want owner and group user", r.status, r.body)
	}
	// A fork starts with the home as it was, and changes stay its own.
	forks := decode[[]forkResult](t, h.do("POST", "/sandboxes/"+id+"/fork", `{}`))
	if len(forks) != 1 || forks[0].Sandbox == nil {
		t.Fatalf("fork: %+v", forks)
	}
	fork := forks[0].Sandbox.SandboxID
	if got := sh(fork, `cat ~/notes.txt; echo changed > ~/notes.txt`); got != "from the files API" {
		t.Errorf("the fork's home: %q", got)
	}
	if got := sh(id, `cat ~/notes.txt`); got != "from the files API" {
		t.Errorf("the fork's change reached the original: %q", got)
	}

	// deleteSnapshot: DELETE /templates/{id} removes a snapshot taken
	// through the server; then nothing starts from it, and it is gone.
	snap := decode[snapshotInfo](t, h.do("POST", "/sandboxes/"+id+"/snapshots", `{"name":"to-delete"}`))
	h.create(`{"templateID":"to-delete"}`)
	if r := h.do("DELETE", "/templates/to-delete", ""); r.status != http.StatusNoContent {
		t.Fatalf("deleteSnapshot: %d %s", r.status, r.body)
	}
	if r := h.do("POST", "/sandboxes", `{"templateID":"`+snap.SnapshotID+`"}`); r.status != http.StatusNotFound {
		t.Errorf("create from a deleted snapshot: %d %s, want 404", r.status, r.body)
	}
	if r := h.do("DELETE", "/templates/"+snap.SnapshotID, ""); r.status != http.StatusNotFound {
		t.Errorf("deleting it again: %d %s, want 404 (the SDK's false)", r.status, r.body)
	}
	if r := h.do("DELETE", "/templates/base", ""); r.status != http.StatusNotImplemented {
		t.Errorf("deleting a template: %d %s, want 501", r.status, r.body)
	}
}
