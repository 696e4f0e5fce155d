package envd_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"maps"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/tent-sandbox/tent/serve/envd"
	"github.com/tent-sandbox/tent/serve/envd/filesystempb"
)

type uploaded struct {
	Name string `json:"name"`
	Path string `json:"path"`
	Type string `json:"type"`
}

// post uploads body with the content type; it returns the status and the
// body of the answer.
func (e *env) post(query string, contentType string, body io.Reader, header http.Header) (int, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/files?"+query, body)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// get downloads path; it returns the status, the body and the
// Content-Length.
func (e *env) get(path string) (int, string, string) {
	e.t.Helper()
	res, err := e.srv.Client().Get(e.srv.URL + "/files?path=" + url.QueryEscape(path) + "&username=user")
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.Header.Get("Content-Length")
}

func TestFilesUploadDownload(t *testing.T) {
	e := newEnv(t, envd.Options{MaxUploadBytes: 1 << 10}, nil)
	status, body := e.post("path=/tmp/a/b/f.txt&username=user", "application/octet-stream", strings.NewReader("hello"), nil)
	var got []uploaded
	if status != http.StatusOK || json.Unmarshal(body, &got) != nil || len(got) != 1 || got[0] != (uploaded{"f.txt", "/tmp/a/b/f.txt", "file"}) {
		t.Fatalf("octet-stream upload: %d %s", status, body)
	}
	if status, content, length := e.get("/tmp/a/b/f.txt"); status != http.StatusOK || content != "hello" || length != "5" {
		t.Errorf("download: %d %q length %q", status, content, length)
	}
	// A multipart form of two files, named by their file names (the
	// SDK's writeFiles), into parents that do not exist yet.
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	for name, content := range map[string]string{"/tmp/m/one.txt": "1", "/tmp/m/sub/two.txt": "22"} {
		fw, err := mw.CreateFormFile("file", name)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(fw, content)
	}
	mw.Close()
	status, body = e.post("", mw.FormDataContentType(), &form, nil)
	got = nil
	if status != http.StatusOK || json.Unmarshal(body, &got) != nil || len(got) != 2 {
		t.Fatalf("multipart upload: %d %s", status, body)
	}
	for _, f := range []struct{ path, content string }{{"/tmp/m/one.txt", "1"}, {"/tmp/m/sub/two.txt", "22"}} {
		if status, content, _ := e.get(f.path); status != http.StatusOK || content != f.content {
			t.Errorf("%s: %d %q", f.path, status, content)
		}
	}
	// gzip-encoded, as the SDK sends with gzip: true.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("zipped"))
	zw.Close()
	if status, body := e.post("path=/tmp/z", "application/octet-stream", &gz, http.Header{"Content-Encoding": {"gzip"}}); status != http.StatusOK {
		t.Errorf("gzip upload: %d %s", status, body)
	}
	if _, content, _ := e.get("/tmp/z"); content != "zipped" {
		t.Errorf("gzip upload wrote %q", content)
	}
	// Errors: envd's JSON body with the status the SDKs map.
	status, content, _ := e.get("/tmp/nope")
	if status != http.StatusNotFound || !strings.Contains(content, `"code":404`) {
		t.Errorf("download of a missing file: %d %s", status, content)
	}
	if status, content, _ := e.get("/tmp/a"); status != http.StatusBadRequest {
		t.Errorf("download of a directory: %d %s", status, content)
	}
	if status, body := e.post("path=/tmp/big", "application/octet-stream", strings.NewReader(strings.Repeat("x", 2<<10)), nil); status != http.StatusRequestEntityTooLarge {
		t.Errorf("upload past the limit: %d %s", status, body)
	}
	if _, err := e.fs.Stat(e.ctx(), connect.NewRequest(&filesystempb.StatRequest{Path: "/tmp/big"})); code(err) != connect.CodeNotFound {
		t.Errorf("a refused upload left its file: %v", err)
	}
	if status, body := e.post("", "application/octet-stream", strings.NewReader("x"), nil); status != http.StatusBadRequest {
		t.Errorf("octet-stream without a path: %d %s", status, body)
	}
	// File metadata: kept with the file (as envd keeps it, in user.e2b.*
	// extended attributes), reported by the upload, Stat and ListDir,
	// replaced by the next upload.
	status, body = e.post("path=/tmp/meta", "application/octet-stream", strings.NewReader("x"), http.Header{"X-Metadata-Owner": {"me"}, "X-Metadata-Purpose": {"upload"}})
	if status == http.StatusNotImplemented && strings.Contains(string(body), "not supported") {
		t.Skipf("the sandbox's /tmp has no user extended attributes (tmpfs before Linux 6.6): %s", body)
	}
	if status != http.StatusOK || !strings.Contains(string(body), `"metadata":{"owner":"me","purpose":"upload"}`) {
		t.Fatalf("upload with metadata: %d %s", status, body)
	}
	st, err := e.fs.Stat(e.ctx(), connect.NewRequest(&filesystempb.StatRequest{Path: "/tmp/meta"}))
	if err != nil || !maps.Equal(st.Msg.GetEntry().GetMetadata(), map[string]string{"owner": "me", "purpose": "upload"}) {
		t.Errorf("stat of a file with metadata: %v %v", st, err)
	}
	ls, err := e.fs.ListDir(e.ctx(), connect.NewRequest(&filesystempb.ListDirRequest{Path: "/tmp"}))
	if err != nil || !slices.ContainsFunc(ls.Msg.GetEntries(), func(en *filesystempb.EntryInfo) bool { return en.GetMetadata()["owner"] == "me" }) {
		t.Errorf("listing of a file with metadata: %v %v", ls, err)
	}
	if status, body := e.post("path=/tmp/meta", "application/octet-stream", strings.NewReader("y"), nil); status != http.StatusOK || strings.Contains(string(body), "metadata") {
		t.Errorf("an upload without metadata over it: %d %s, want its metadata gone", status, body)
	}
	if status, body := e.post("path=/tmp/meta", "application/octet-stream", strings.NewReader("z"), http.Header{"X-Metadata-" + strings.Repeat("k", 300): {"v"}}); status != http.StatusBadRequest {
		t.Errorf("a metadata name too long: %d %s, want 400", status, body)
	}
}

func TestFilesystemService(t *testing.T) {
	e := newEnv(t, envd.Options{}, nil)
	ctx := e.ctx()
	// Files of the sandbox's user are reported as its $USER's, user and
	// group, whatever the sandbox's /etc/passwd (the host's) calls it.
	who := e.run("echo $USER; echo $USER; echo $HOME", nil).stdout.String()
	user, group, home := strings.Split(who, "\n")[0], strings.Split(who, "\n")[1], strings.Split(who, "\n")[2]
	if status, body := e.post("path=/tmp/d/f.txt", "application/octet-stream", strings.NewReader("12345"), nil); status != http.StatusOK {
		t.Fatalf("upload: %d %s", status, body)
	}
	st, err := e.fs.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: "/tmp/d/f.txt"}))
	if err != nil {
		t.Fatal(err)
	}
	if en := st.Msg.GetEntry(); en.GetName() != "f.txt" || en.GetPath() != "/tmp/d/f.txt" || en.GetType() != filesystempb.FileType_FILE_TYPE_FILE ||
		en.GetSize() != 5 || en.GetMode()&0o777 != 0o644 || en.GetPermissions() != "-rw-r--r--" || en.GetOwner() != user || en.GetGroup() != group || en.GetModifiedTime().AsTime().IsZero() {
		t.Errorf("stat: %v (want owner %s:%s)", en, user, group)
	}
	md, err := e.fs.MakeDir(ctx, connect.NewRequest(&filesystempb.MakeDirRequest{Path: "/tmp/d/x/y"}))
	if err != nil || md.Msg.GetEntry().GetType() != filesystempb.FileType_FILE_TYPE_DIRECTORY || md.Msg.GetEntry().GetPath() != "/tmp/d/x/y" {
		t.Fatalf("mkdir: %v %v", md, err)
	}
	if _, err := e.fs.MakeDir(ctx, connect.NewRequest(&filesystempb.MakeDirRequest{Path: "/tmp/d/x/y"})); code(err) != connect.CodeAlreadyExists {
		t.Errorf("mkdir of an existing directory: %v, want already_exists (the SDK's makeDir then says false)", err)
	}
	mv, err := e.fs.Move(ctx, connect.NewRequest(&filesystempb.MoveRequest{Source: "/tmp/d/f.txt", Destination: "/tmp/d/x/g.txt"}))
	if err != nil || mv.Msg.GetEntry().GetPath() != "/tmp/d/x/g.txt" || mv.Msg.GetEntry().GetSize() != 5 {
		t.Fatalf("move: %v %v", mv, err)
	}
	ls, err := e.fs.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: "/tmp/d"}))
	if err != nil {
		t.Fatal(err)
	}
	if names := entryPaths(ls.Msg.GetEntries()); names != "/tmp/d/x" {
		t.Errorf("list depth 1: %s", names)
	}
	ls, err = e.fs.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: "/tmp/d", Depth: 3}))
	if err != nil {
		t.Fatal(err)
	}
	if names := entryPaths(ls.Msg.GetEntries()); names != "/tmp/d/x /tmp/d/x/g.txt /tmp/d/x/y" {
		t.Errorf("list depth 3: %s", names)
	}
	if _, err := e.fs.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: "/tmp/d/x/g.txt"})); code(err) != connect.CodeInvalidArgument {
		t.Errorf("list of a file: %v, want invalid_argument", err)
	}
	if _, err := e.fs.Remove(ctx, connect.NewRequest(&filesystempb.RemoveRequest{Path: "/tmp/d/x"})); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/tmp/d/x", "/tmp/d/x/g.txt"} {
		if _, err := e.fs.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: p})); code(err) != connect.CodeNotFound {
			t.Errorf("stat of removed %s: %v, want not_found", p, err)
		}
	}
	// Removing what is not there succeeds, as in envd (E2B's SDK tests
	// remove a missing file and expect no error).
	if _, err := e.fs.Remove(ctx, connect.NewRequest(&filesystempb.RemoveRequest{Path: "/tmp/d/x"})); err != nil {
		t.Errorf("remove of a missing path: %v, want success", err)
	}
	if _, err := e.fs.MakeDir(ctx, connect.NewRequest(&filesystempb.MakeDirRequest{Path: "/proc/nope"})); code(err) == 0 || code(err) == connect.CodeInternal {
		t.Errorf("mkdir in /proc: %v, want a mapped error", err)
	}
	// Relative paths and ~ are beneath $HOME, as in E2B.
	if status, body := e.post("path=rel.txt", "application/octet-stream", strings.NewReader("r"), nil); status != http.StatusOK || !strings.Contains(string(body), `"path":"`+strings.TrimSuffix(home, "/")+`/rel.txt"`) {
		t.Fatalf("relative upload: %d %s (home %s)", status, body, home)
	}
	if st, err := e.fs.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: "~/rel.txt"})); err != nil || st.Msg.GetEntry().GetSize() != 1 {
		t.Errorf("stat of ~/rel.txt: %v %v", st, err)
	}
	// A symlink as envd reports it: the type and mode of what it
	// resolves to, links followed, and that path as its target; one that
	// resolves to nothing (dangling, a loop) has no type, mode 0 and its
	// own path.
	e.run("mkdir -p /tmp/sub/dir && touch /tmp/sub/target && chmod 640 /tmp/sub/target && "+
		"ln -s sub/target /tmp/rel && ln -s rel /tmp/chain && ln -s /tmp/sub/dir /tmp/dlink && "+
		"ln -s /tmp/nope /tmp/dangling && ln -s loop2 /tmp/loop1 && ln -s loop1 /tmp/loop2", nil)
	for _, c := range []struct {
		link   string
		typ    filesystempb.FileType
		mode   uint32
		target string
	}{
		{"/tmp/rel", filesystempb.FileType_FILE_TYPE_FILE, 0o640, "/tmp/sub/target"},
		{"/tmp/chain", filesystempb.FileType_FILE_TYPE_FILE, 0o640, "/tmp/sub/target"},
		{"/tmp/dlink", filesystempb.FileType_FILE_TYPE_DIRECTORY, 0o755, "/tmp/sub/dir"},
		{"/tmp/dangling", filesystempb.FileType_FILE_TYPE_UNSPECIFIED, 0, "/tmp/dangling"},
		{"/tmp/loop1", filesystempb.FileType_FILE_TYPE_UNSPECIFIED, 0, "/tmp/loop1"},
	} {
		st, err := e.fs.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: c.link}))
		if err != nil {
			t.Errorf("stat of symlink %s: %v", c.link, err)
			continue
		}
		en := st.Msg.GetEntry()
		if en.GetType() != c.typ || en.GetMode() != c.mode || en.GetSymlinkTarget() != c.target || !strings.HasPrefix(en.GetPermissions(), "L") {
			t.Errorf("stat of symlink %s: type %v mode %o target %q permissions %q, want %v %o %q and a link's permissions",
				c.link, en.GetType(), en.GetMode(), en.GetSymlinkTarget(), en.GetPermissions(), c.typ, c.mode, c.target)
		}
	}
}

func entryPaths(es []*filesystempb.EntryInfo) string {
	var out []string
	for _, en := range es {
		out = append(out, en.GetPath())
	}
	return strings.Join(out, " ")
}

func TestWatchDir(t *testing.T) {
	e := newEnv(t, envd.Options{}, nil)
	ctx := e.ctx()
	if _, err := e.fs.MakeDir(ctx, connect.NewRequest(&filesystempb.MakeDirRequest{Path: "/tmp/w/sub"})); err != nil {
		t.Fatal(err)
	}
	s, err := e.fs.WatchDir(ctx, connect.NewRequest(&filesystempb.WatchDirRequest{Path: "/tmp/w", Recursive: true, IncludeEntry: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Receive() || s.Msg().GetStart() == nil {
		t.Fatalf("first watch event: %v %v", s.Msg(), s.Err())
	}
	if status, body := e.post("path=/tmp/w/sub/new.txt", "application/octet-stream", strings.NewReader("x"), nil); status != http.StatusOK {
		t.Fatalf("upload: %d %s", status, body)
	}
	var fe *filesystempb.FilesystemEvent
	for fe == nil && s.Receive() {
		fe = s.Msg().GetFilesystem()
	}
	if fe.GetType() != filesystempb.EventType_EVENT_TYPE_CREATE || fe.GetName() != "sub/new.txt" || fe.GetEntry().GetPath() != "/tmp/w/sub/new.txt" {
		t.Errorf("watch event: %v (%v)", fe, s.Err())
	}
	w, err := e.fs.WatchDir(ctx, connect.NewRequest(&filesystempb.WatchDirRequest{Path: "/tmp/nowhere"}))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Receive() || code(w.Err()) != connect.CodeNotFound {
		t.Errorf("watch of a missing directory: %v, want not_found", w.Err())
	}
}

func TestPolledWatcher(t *testing.T) {
	e := newEnv(t, envd.Options{}, nil)
	ctx := e.ctx()
	cw, err := e.fs.CreateWatcher(ctx, connect.NewRequest(&filesystempb.CreateWatcherRequest{Path: "/tmp"}))
	if err != nil {
		t.Fatal(err)
	}
	id := cw.Msg.GetWatcherId()
	e.run("mkdir /tmp/polled", nil)
	var got []*filesystempb.FilesystemEvent
	waitFor(t, "the watcher's event", func() bool {
		res, err := e.fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystempb.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, res.Msg.GetEvents()...)
		return len(got) > 0
	})
	if got[0].GetName() != "polled" || got[0].GetType() != filesystempb.EventType_EVENT_TYPE_CREATE {
		t.Errorf("events: %v", got)
	}
	if _, err := e.fs.RemoveWatcher(ctx, connect.NewRequest(&filesystempb.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatal(err)
	}
	if _, err := e.fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystempb.GetWatcherEventsRequest{WatcherId: id})); code(err) != connect.CodeNotFound {
		t.Errorf("events of a removed watcher: %v, want not_found", err)
	}
}
