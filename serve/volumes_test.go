package serve

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// newVolume creates volume name through h and returns its id and token.
func (h *harness) newVolume(name string) (string, string) {
	h.t.Helper()
	r := h.do("POST", "/volumes", `{"name":"`+name+`"}`)
	if r.status != http.StatusCreated {
		h.t.Fatalf("POST /volumes %s: %d %s", name, r.status, r.body)
	}
	v := decode[volumeReply](h.t, r)
	if v.VolumeID == "" || v.Name != name || v.Token == "" {
		h.t.Fatalf("POST /volumes answered %+v", v)
	}
	return v.VolumeID, v.Token
}

// content sends a content API request for volume id with token (as the
// SDKs do: the token alone, no API key).
func (h *harness) content(method, id, token, op, p, query, body string) response {
	h.t.Helper()
	q := "?path=" + url.QueryEscape(p)
	if query != "" {
		q += "&" + query
	}
	return h.do(method, "/volumecontent/"+id+"/"+op+q, body, "X-API-Key", "", "Authorization", "Bearer "+token)
}

// TestVolumeAPI: E2B's volume lifecycle and content API, as the SDK's
// volume tests drive them, against a volume directory on disk.
func TestVolumeAPI(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, Options{VolumesDir: dir})
	id, tok := h.newVolume("data-1")
	if r := h.do("POST", "/volumes", `{"name":"data-1"}`); r.status != http.StatusConflict {
		t.Fatalf("a second volume of the same name: %d %s", r.status, r.body)
	}
	for _, bad := range []string{``, `../x`, `a/b`, `-x`, strings.Repeat("a", 129)} {
		if r := h.do("POST", "/volumes", `{"name":"`+bad+`"}`); r.status != http.StatusBadRequest || !strings.Contains(r.errBody(t).Message, "name") {
			t.Fatalf("name %q: %d %s", bad, r.status, r.body)
		}
	}
	if v := decode[[]volumeReply](t, h.do("GET", "/volumes", "")); len(v) != 1 || v[0].VolumeID != id || v[0].Token != "" {
		t.Fatalf("GET /volumes: %+v", v)
	}
	if v := decode[volumeReply](t, h.do("GET", "/volumes/"+id, "")); v.Token != tok || v.Name != "data-1" {
		t.Fatalf("GET /volumes/ID: %+v", v)
	}

	volumeContentOps(t, h, dir, id, tok)
	volumeContentRefusals(t, h, id, tok)
	id2, tok2 := volumeContentAuth(t, h, dir, id, tok)

	var r response
	// A restarted server over the same directory has the volumes.
	h2 := newHarness(t, Options{VolumesDir: dir})
	if v := decode[volumeReply](t, h2.do("GET", "/volumes/"+id2, "")); v.Name != "data-2" || v.Token != tok2 {
		t.Fatalf("after a restart: %+v", v)
	}
	if r = h2.content("GET", id2, tok2, "file", "/k", "", ""); string(r.body) != "k" {
		t.Fatalf("a file after a restart: %d %q", r.status, r.body)
	}
	if r = h.do("DELETE", "/volumes/"+id2, ""); r.status != http.StatusNoContent {
		t.Fatalf("destroy: %d %s", r.status, r.body)
	}
	if r = h.do("DELETE", "/volumes/"+id2, ""); r.status != http.StatusNotFound {
		t.Fatalf("destroy again: %d %s", r.status, r.body)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 || ents[0].Name() != id {
		t.Fatalf("the volumes directory after a destroy: %v", ents)
	}

	// Without a volumes directory the API is E2B's 501.
	h3 := newHarness(t, Options{})
	if r = h3.do("POST", "/volumes", `{"name":"v"}`); r.status != http.StatusNotImplemented {
		t.Errorf("no VolumesDir: %d %s", r.status, r.body)
	}
}

// volumeContentOps is TestVolumeAPI's content API with the volume's
// token: writes, directories, reads, lists, modes, removals.
func volumeContentOps(t *testing.T, h *harness, dir, id, tok string) {
	r := h.content("PUT", id, tok, "file", "/docs/a.txt", "", "hello")
	if r.status != http.StatusNotFound {
		t.Fatalf("a write into a missing directory: %d %s", r.status, r.body)
	}
	r = h.content("POST", id, tok, "dir", "/docs/deep/er", "", "")
	if r.status != http.StatusNotFound {
		t.Fatalf("mkdir without force under a missing parent: %d %s", r.status, r.body)
	}
	r = h.content("POST", id, tok, "dir", "/docs/deep/er", "force=true&mode=448&uid=1000&gid=1000", "")
	if e := decode[volumeEntry](t, r); r.status != http.StatusCreated || e.Type != "directory" || e.Mode != 0o700 || e.Path != "/docs/deep/er" || e.UID != 1000 || e.GID != 1000 {
		t.Fatalf("mkdir -p: %d %s", r.status, r.body)
	}
	if r = h.content("POST", id, tok, "dir", "/docs", "", ""); r.status != http.StatusConflict {
		t.Fatalf("mkdir of an existing directory: %d %s", r.status, r.body)
	}
	r = h.content("PUT", id, tok, "file", "docs/a.txt", "mode=0o600", "hello")
	if e := decode[volumeEntry](t, r); r.status != http.StatusCreated || e.Type != "file" || e.Name != "a.txt" || e.Size != 5 || e.Mode != 0o600 || time.Since(e.Mtime) > time.Hour {
		t.Fatalf("write: %d %s", r.status, r.body)
	}
	if r = h.content("PUT", id, tok, "file", "/docs/a.txt", "", "again"); r.status != http.StatusConflict {
		t.Fatalf("overwrite without force: %d %s", r.status, r.body)
	}
	if r = h.content("PUT", id, tok, "file", "/docs/a.txt", "force=true", "hello, again"); r.status != http.StatusCreated {
		t.Fatalf("overwrite with force: %d %s", r.status, r.body)
	}
	if r = h.content("PUT", id, tok, "file", "/docs", "force=true", "x"); r.status != http.StatusConflict {
		t.Fatalf("a write over a directory: %d %s", r.status, r.body)
	}
	if r = h.content("GET", id, tok, "file", "/docs/a.txt", "", ""); r.status != http.StatusOK || string(r.body) != "hello, again" || r.header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("read: %d %q", r.status, r.body)
	}
	if r = h.content("GET", id, tok, "file", "/docs/none", "", ""); r.status != http.StatusNotFound {
		t.Fatalf("read of a missing file: %d %s", r.status, r.body)
	}
	if b, err := os.ReadFile(filepath.Join(dir, id, "data", "docs", "a.txt")); err != nil || string(b) != "hello, again" {
		t.Fatalf("on disk: %q %v", b, err)
	}
	ls := decode[[]volumeEntry](t, h.content("GET", id, tok, "dir", "/docs", "", ""))
	if len(ls) != 2 {
		t.Fatalf("list /docs: %+v", ls)
	}
	ls = decode[[]volumeEntry](t, h.content("GET", id, tok, "dir", "/", "depth=3", ""))
	var paths []string
	for _, e := range ls {
		paths = append(paths, e.Path)
	}
	slices.Sort(paths)
	if strings.Join(paths, " ") != "/docs /docs/a.txt /docs/deep /docs/deep/er" {
		t.Fatalf("list / depth 3: %v", paths)
	}
	r = h.do("PATCH", "/volumecontent/"+id+"/path?path=/docs/a.txt", `{"mode":420}`, "X-API-Key", "", "Authorization", "Bearer "+tok)
	if e := decode[volumeEntry](t, r); r.status != http.StatusOK || e.Mode != 0o644 {
		t.Fatalf("PATCH mode: %d %s", r.status, r.body)
	}
	if fi, err := os.Stat(filepath.Join(dir, id, "data", "docs", "a.txt")); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("the mode on disk: %v %v", fi.Mode(), err)
	}
	if e := decode[volumeEntry](t, h.content("GET", id, tok, "path", "/docs/deep", "", "")); e.Type != "directory" || e.Name != "deep" {
		t.Fatalf("stat: %+v", e)
	}
	if r = h.content("DELETE", id, tok, "path", "/docs", "", ""); r.status != http.StatusNoContent {
		t.Fatalf("remove a tree: %d %s", r.status, r.body)
	}
	if r = h.content("GET", id, tok, "path", "/docs", "", ""); r.status != http.StatusNotFound {
		t.Fatalf("stat after the removal: %d %s", r.status, r.body)
	}
	if r = h.content("DELETE", id, tok, "path", "/", "", ""); r.status != http.StatusBadRequest {
		t.Fatalf("remove the root: %d %s", r.status, r.body)
	}
}

// volumeContentRefusals is TestVolumeAPI's refusals: what tent cannot
// give, named.
func volumeContentRefusals(t *testing.T, h *harness, id, tok string) {
	for _, c := range []struct{ method, op, p, query, body, want string }{
		{"PUT", "file", "/x", "uid=1001", "x", "uid 1001"},
		{"PUT", "file", "/x", "gid=0", "x", "gid 0"},
		{"PUT", "file", "/x", "mode=2541", "x", "set-id"}, // 04755
		{"PUT", "file", "/x", "mode=abc", "x", "mode"},
		{"POST", "dir", "/d", "force=maybe", "", "force"},
		{"GET", "dir", "/", "depth=0", "", "depth"},
		{"GET", "path", "", "", "", "path: empty"},
		{"GET", "path", "/a\x00b", "", "", "NUL"},
	} {
		r := h.content(c.method, id, tok, c.op, c.p, c.query, c.body)
		if r.status != http.StatusBadRequest || !strings.Contains(r.errBody(t).Message, c.want) {
			t.Errorf("%s %s %q %s: %d %s, want 400 naming %q", c.method, c.op, c.p, c.query, r.status, r.body, c.want)
		}
	}
	r := h.do("PATCH", "/volumecontent/"+id+"/path?path=/", `{"uid":1001}`, "X-API-Key", "", "Authorization", "Bearer "+tok)
	if r.status != http.StatusBadRequest || !strings.Contains(r.errBody(t).Message, "uid 1001") {
		t.Errorf("PATCH uid 1001: %d %s", r.status, r.body)
	}
}

// volumeContentAuth is TestVolumeAPI's authentication: the volume's own
// token, or the API key; another volume's token, none, or a wrong one
// is 401 and touches nothing. It returns a second volume, data-2.
func volumeContentAuth(t *testing.T, h *harness, dir, id, tok string) (id2, tok2 string) {
	id2, tok2 = h.newVolume("data-2")
	for _, hdr := range [][]string{
		{"X-API-Key", "", "Authorization", "Bearer " + tok2},
		{"X-API-Key", ""},
		{"X-API-Key", "", "Authorization", "Bearer " + tok + "x"},
		{"X-API-Key", "", "Authorization", tok},
	} {
		r := h.do("PUT", "/volumecontent/"+id+"/file?path=/intruder", "x", hdr...)
		if r.status != http.StatusUnauthorized {
			t.Errorf("headers %q: %d %s", hdr, r.status, r.body)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, id, "data", "intruder")); !os.IsNotExist(err) {
		t.Errorf("an unauthorised write reached the disk: %v", err)
	}
	if r := h.do("PUT", "/volumecontent/"+id2+"/file?path=/k", "k"); r.status != http.StatusCreated {
		t.Fatalf("a content request with the API key: %d %s", r.status, r.body)
	}
	// A token for one volume, a path that escapes its way to another.
	if r := h.content("PUT", id, tok, "file", "/private", "", "private data"); r.status != http.StatusCreated {
		t.Fatalf("write: %d %s", r.status, r.body)
	}
	for _, p := range []string{"/volumecontent/" + id2 + "%2F..%2F" + id + "/file?path=/private", "/volumecontent/" + id2 + "/../" + id + "/file?path=/private"} {
		r := h.do("GET", p, "", "X-API-Key", "", "Authorization", "Bearer "+tok2)
		if r.status == http.StatusOK || strings.Contains(string(r.body), "private data") {
			t.Errorf("%s with the other volume's token: %d %s", p, r.status, r.body)
		}
	}
	// The token of a volume does not open the control plane.
	if r := h.do("GET", "/volumes", "", "X-API-Key", "", "Authorization", "Bearer "+tok); r.status != http.StatusUnauthorized {
		t.Errorf("GET /volumes with a volume token: %d %s", r.status, r.body)
	}
	return id2, tok2
}

// TestVolumeUploadBounded: an upload over MaxUploadBytes is 413 and
// leaves nothing behind, not even its temporary file.
func TestVolumeUploadBounded(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, Options{VolumesDir: dir, MaxUploadBytes: 1000})
	id, tok := h.newVolume("v")
	if r := h.content("PUT", id, tok, "file", "/big", "", strings.Repeat("x", 1001)); r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("1001 bytes: %d %s", r.status, r.body)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, id, "data")); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
	if r := h.content("PUT", id, tok, "file", "/ok", "", strings.Repeat("x", 1000)); r.status != http.StatusCreated {
		t.Fatalf("1000 bytes: %d %s", r.status, r.body)
	}
}

// TestVolumeMountedInSandbox: a real sandbox created with volumeMounts
// sees the volume's files as its user's and writes there; the API sees
// what it wrote, refuses to follow the link it planted to the host, and
// refuses to destroy the volume while the sandbox lives.
func TestVolumeMountedInSandbox(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts sandboxes")
	}
	dir := t.TempDir()
	h, local := newLocalHarness(t, Options{VolumesDir: dir})
	id, tok := h.newVolume("work")
	if r := h.content("PUT", id, tok, "file", "/from-api.txt", "", "from the API"); r.status != http.StatusCreated {
		t.Fatalf("write: %d %s", r.status, r.body)
	}
	if r := h.do("POST", "/v2/sandboxes", `{"templateID":"base","volumeMounts":[{"name":"nope","path":"/mnt/v"}]}`); r.status != http.StatusNotFound {
		t.Fatalf("a missing volume: %d %s", r.status, r.body)
	}
	if r := h.do("POST", "/v2/sandboxes", `{"templateID":"base","volumeMounts":[{"name":"work","path":"mnt"}]}`); r.status != http.StatusBadRequest {
		t.Fatalf("a relative mount path: %d %s", r.status, r.body)
	}
	sr := h.create(`{"templateID":"base","volumeMounts":[{"name":"work","path":"/mnt/work"}]}`)
	got := shIn(t, local, sr.SandboxID, `cat /mnt/work/from-api.txt; echo; stat -c '%u %g' /mnt/work/from-api.txt; echo inside > /mnt/work/from-sandbox.txt; ln -s /etc/shadow /mnt/work/shadow; id -u`)
	if got != "from the API\n1000 1000\n1000" {
		t.Fatalf("inside: %q", got)
	}
	if r := h.content("GET", id, tok, "file", "/from-sandbox.txt", "", ""); string(r.body) != "inside\n" {
		t.Fatalf("the sandbox's file through the API: %d %q", r.status, r.body)
	}
	if r := h.content("GET", id, tok, "file", "/shadow", "", ""); r.status != http.StatusBadRequest {
		t.Fatalf("the sandbox's link to /etc/shadow: %d %s", r.status, r.body)
	}
	d := decode[sandboxDetail](t, h.do("GET", "/sandboxes/"+sr.SandboxID, ""))
	if len(d.VolumeMounts) != 1 || d.VolumeMounts[0] != (volumeMount{Name: "work", Path: "/mnt/work"}) {
		t.Fatalf("getInfo's volumeMounts: %+v", d.VolumeMounts)
	}
	if r := h.do("DELETE", "/volumes/"+id, ""); r.status != http.StatusConflict {
		t.Fatalf("destroy while mounted: %d %s", r.status, r.body)
	}
	if r := h.do("DELETE", "/sandboxes/"+sr.SandboxID, ""); r.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", r.status, r.body)
	}
	if r := h.do("DELETE", "/volumes/"+id, ""); r.status != http.StatusNoContent {
		t.Fatalf("destroy: %d %s", r.status, r.body)
	}
	if _, err := os.Stat("/etc/shadow"); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left in the volumes directory: %v", ents)
	}
}
