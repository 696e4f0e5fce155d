package envd_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
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

// Uploads and downloads at their bounds and under faults: large files, a
// gzip bomb, a full disk, a body cut midway.

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
