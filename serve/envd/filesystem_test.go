package envd_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"connectrpc.com/connect"

	"github.com/tent-sandbox/tent/sandbox"
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
	// A symlink is described, not followed; a relative target is
	// reported absolute, as envd reports it.
	e.run("ln -s /tmp/target /tmp/link && ln -s sub/target /tmp/rel", nil)
	for link, target := range map[string]string{"/tmp/link": "/tmp/target", "/tmp/rel": "/tmp/sub/target"} {
		if st, err := e.fs.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: link})); err != nil ||
			st.Msg.GetEntry().GetType() != filesystempb.FileType_FILE_TYPE_SYMLINK || st.Msg.GetEntry().GetSymlinkTarget() != target {
			t.Errorf("stat of symlink %s: %v %v, want target %s", link, st, err, target)
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

// Files larger than any pipe stream both ways, byte for byte.
func TestFilesLarge(t *testing.T) {
	e := newEnv(t, envd.Options{}, nil)
	data := make([]byte, 3<<20+17)
	for i := range data {
		data[i] = byte(i*7 + i/4096)
	}
	if status, body := e.post("path=/tmp/large.bin", "application/octet-stream", bytes.NewReader(data), nil); status != http.StatusOK {
		t.Fatalf("upload: %d %s", status, body)
	}
	status, content, length := e.get("/tmp/large.bin")
	if status != http.StatusOK || length != strconv.Itoa(len(data)) || content != string(data) {
		t.Errorf("download: %d, length %s, %d bytes (equal: %v)", status, length, len(content), content == string(data))
	}
	// A procfs file reports size 0: it is read whole, with its length.
	status, content, length = e.get("/proc/self/status")
	if status != http.StatusOK || length != strconv.Itoa(len(content)) || !strings.Contains(content, "Name:") {
		t.Errorf("download of a procfs file: %d, length %s, %q", status, length, content)
	}
}

// gzipBomb is a gzip stream of n zero bytes, made as it is read (a few
// KiB of it per MiB decoded; nothing of size n is ever held).
func gzipBomb(n int64) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		zw, _ := gzip.NewWriterLevel(pw, gzip.BestCompression)
		zero := make([]byte, 64<<10)
		var err error
		for left := n; left > 0 && err == nil; left -= int64(len(zero)) {
			_, err = zw.Write(zero[:min(left, int64(len(zero)))])
		}
		if err == nil {
			err = zw.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr
}

// TestUploadGzipBomb: an upload whose gzip body decodes past the bound
// (a bomb of 64 times the bound), octet-stream or multipart, is a 413
// naming the bound and how to raise it, and leaves nothing in the
// sandbox: no file, no temporary.
func TestUploadGzipBomb(t *testing.T) {
	const bound = 1 << 20
	e := newEnv(t, envd.Options{MaxUploadBytes: bound}, nil)
	if status, body := e.post("path=/tmp/bomb/ok", "application/octet-stream", gzipBomb(bound), http.Header{"Content-Encoding": {"gzip"}}); status != http.StatusOK {
		t.Fatalf("a gzip upload of the bound exactly: %d %s", status, body)
	}
	wantMsg := func(what string, status int, body []byte) {
		t.Helper()
		if status != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "1048576 bytes") || !strings.Contains(string(body), "--max-upload") {
			t.Errorf("%s: %d %s; want 413 naming the bound and --max-upload", what, status, body)
		}
	}
	status, body := e.post("path=/tmp/bomb/f", "application/octet-stream", gzipBomb(64*bound), http.Header{"Content-Encoding": {"gzip"}})
	wantMsg("an octet-stream gzip bomb", status, body)

	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		fw, err := mw.CreateFormFile("file", "/tmp/bomb/m")
		if err == nil {
			_, err = io.Copy(fw, io.LimitReader(zeros{}, 64*bound))
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	zr, zw := io.Pipe()
	go func() {
		gw := gzip.NewWriter(zw)
		_, err := io.Copy(gw, pr)
		if err == nil {
			err = gw.Close()
		}
		zw.CloseWithError(err)
	}()
	status, body = e.post("", mw.FormDataContentType(), zr, http.Header{"Content-Encoding": {"gzip"}})
	wantMsg("a multipart gzip bomb", status, body)

	// Over a file it was to replace: the helper's input ends without
	// its end mark, and the file is left as it was.
	status, body = e.post("path=/tmp/bomb/ok", "application/octet-stream", gzipBomb(64*bound), http.Header{"Content-Encoding": {"gzip"}})
	wantMsg("a gzip bomb over a file", status, body)

	// Plain, with a length over the bound: refused before any byte is read.
	status, body = e.post("path=/tmp/bomb/plain", "application/octet-stream", io.LimitReader(zeros{}, 2*bound), nil)
	wantMsg("a plain upload over the bound", status, body)

	ls, err := e.fs.ListDir(e.ctx(), connect.NewRequest(&filesystempb.ListDirRequest{Path: "/tmp/bomb"}))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, en := range ls.Msg.GetEntries() {
		names = append(names, en.GetName())
	}
	if !slices.Equal(names, []string{"ok"}) {
		t.Errorf("left in /tmp/bomb: %v; want only ok", names)
	}
}

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// fullDisk is a backend whose file helper writes the first 4 KiB of a
// put and then fails as on a full disk.
type fullDisk struct{ sandbox.Backend }

func (b fullDisk) Open(ctx context.Context, ref string) (sandbox.Handle, error) {
	h, err := b.Backend.Open(ctx, ref)
	if err != nil {
		return nil, err
	}
	return fullDiskHandle{h}, nil
}

type fullDiskHandle struct{ sandbox.Handle }

func (h fullDiskHandle) WriteFile(ctx context.Context, path string, r io.Reader, opts sandbox.WriteOptions) (sandbox.FileInfo, error) {
	if !opts.Parents {
		return h.Handle.WriteFile(ctx, path, r, opts)
	}
	if _, err := h.Handle.WriteFile(ctx, path, io.LimitReader(r, 4<<10), opts); err != nil {
		return sandbox.FileInfo{}, err
	}
	return sandbox.FileInfo{}, &os.PathError{Op: "put", Path: path, Err: syscall.ENOSPC}
}

// TestUploadFailedMidwayLeavesNoFile: an upload the sandbox's disk
// cannot take whole is a 507 and leaves no partial file it made (it was
// a 500 that left one); a file it was to replace is not removed.
func TestUploadFailedMidwayLeavesNoFile(t *testing.T) {
	e := newEnv(t, envd.Options{}, func(b sandbox.Backend) sandbox.Backend { return fullDisk{b} })
	e.run("mkdir -p /tmp/full && echo old > /tmp/full/old", nil)
	for _, p := range []string{"/tmp/full/new", "/tmp/full/old"} {
		status, body := e.post("path="+p, "application/octet-stream", io.LimitReader(zeros{}, 64<<10), nil)
		if status != http.StatusInsufficientStorage || !strings.Contains(string(body), "no space left") {
			t.Errorf("%s: %d %s; want 507 (no space left)", p, status, body)
		}
	}
	ls, err := e.fs.ListDir(e.ctx(), connect.NewRequest(&filesystempb.ListDirRequest{Path: "/tmp/full"}))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, en := range ls.Msg.GetEntries() {
		names = append(names, en.GetName())
	}
	if !slices.Equal(names, []string{"old"}) {
		t.Errorf("left in /tmp/full: %v; want only old", names)
	}
}

// TestUploadCutMidwayKeepsOld: an upload whose body fails after 1 MiB
// over a file — the client's connection ends short of the 4 MiB it
// announced, or a chunk of a chunked body is malformed — fails, 400, and
// leaves the file as it was, content and mode, and nothing beside it
// after the next upload (issue 36: the helper took the end of what came
// for the end of the file). The backend frames the helper's input (see
// sandbox.Sandbox.WriteFile): the upload needs no care of its own. (A
// connection that ends also cancels the request, which may kill the
// helper first: the malformed chunk fails the body with the request
// still on.)
func TestUploadCutMidwayKeepsOld(t *testing.T) {
	e := newEnv(t, envd.Options{}, nil)
	const mib = 1 << 20
	for _, c := range []struct {
		name       string
		head, tail string
		closeWrite bool
	}{
		{"the connection ends", "Content-Length: 4194304\r\n", "", true},
		{"a malformed chunk", "Transfer-Encoding: chunked\r\n", "\r\nzz\r\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.run("rm -rf /tmp/cut && mkdir -p /tmp/cut && printf old > /tmp/cut/f && chmod 640 /tmp/cut/f", nil)
			conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			head := "POST /files?path=/tmp/cut/f&username=user HTTP/1.1\r\nHost: envd\r\nContent-Type: application/octet-stream\r\n" + c.head + "\r\n"
			if !c.closeWrite {
				head += fmt.Sprintf("%x\r\n", mib)
			}
			if _, err := io.Copy(conn, io.MultiReader(strings.NewReader(head), io.LimitReader(zeros{}, mib), strings.NewReader(c.tail))); err != nil {
				t.Fatal(err)
			}
			if c.closeWrite {
				if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
					t.Fatal(err)
				}
			}
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer to the cut upload: %v", err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "reading the upload") {
				t.Errorf("the cut upload: %d %s; want 400 (reading the upload: ...)", res.StatusCode, body)
			}
			if status, content, _ := e.get("/tmp/cut/f"); status != http.StatusOK || content != "old" {
				t.Errorf("after the cut upload: %d, %.40q (%d bytes); want the old content", status, content, len(content))
			}
			// The helper may have been killed with the request (its
			// temporary left until the next write in the directory
			// removes it).
			if status, body := e.post("path=/tmp/cut/g&username=user", "application/octet-stream", strings.NewReader("g"), nil); status != http.StatusOK {
				t.Fatalf("the next upload: %d %s", status, body)
			}
			ls, err := e.fs.ListDir(e.ctx(), connect.NewRequest(&filesystempb.ListDirRequest{Path: "/tmp/cut"}))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, en := range ls.Msg.GetEntries() {
				names = append(names, en.GetName())
				if en.GetName() == "f" && en.GetMode()&0o777 != 0o640 {
					t.Errorf("after the cut upload, f has mode %o; want 640", en.GetMode()&0o777)
				}
			}
			if !slices.Equal(names, []string{"f", "g"}) {
				t.Errorf("left in /tmp/cut: %v; want f and g alone", names)
			}
		})
	}
}
