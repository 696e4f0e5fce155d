package envd

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	tentfs "github.com/tent-sandbox/tent/fs/files"
	"github.com/tent-sandbox/tent/sandbox"
)

// fileEntry is envd's REST EntryInfo, what an upload answers per file.
type fileEntry struct {
	Name     string            `json:"name"`
	Path     string            `json:"path"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// metadataHeader starts the upload headers that carry file metadata
// (X-Metadata-NAME: VALUE, as the SDKs send it).
const metadataHeader = "X-Metadata-"

// uploadMetadata reads the metadata of an upload from its headers: names
// lower-cased (HTTP header names are case-insensitive), bounded as the
// helper bounds them.
func uploadMetadata(h http.Header) (map[string]string, error) {
	meta := map[string]string{}
	n := 0
	for k, vs := range h {
		name, ok := strings.CutPrefix(k, metadataHeader)
		if !ok {
			continue
		}
		name = strings.ToLower(name)
		n++
		switch {
		case name == "" || len(name) > tentfs.MaxMetadataName:
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("metadata %q: a name of 1 to %d bytes", name, tentfs.MaxMetadataName))
		case len(vs) != 1 || len(vs[0]) > tentfs.MaxMetadataValue:
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("metadata %q: one value of at most %d bytes", name, tentfs.MaxMetadataValue))
		case n > tentfs.MaxMetadataEntries:
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("more than %d metadata entries", tentfs.MaxMetadataEntries))
		}
		meta[name] = vs[0]
	}
	return meta, nil
}

// writeError writes err as envd's REST error, with the status of its
// code.
func writeError(w http.ResponseWriter, err error) {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		writeJSONError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf(
			"the upload is larger than %d bytes, the bound of one upload (counted once gzip is decoded), and was not written. tent serve --max-upload SIZE raises it (serve.Options.MaxUploadBytes in Go)", mbe.Limit))
		return
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		writeJSONError(w, httpStatus(ce.Code()), ce.Message())
		return
	}
	writeJSONError(w, httpStatus(errCode(err)), err.Error())
}

// download serves GET /files?path=: the file's bytes, with its length.
func (h *Handler) download(w http.ResponseWriter, r *http.Request) {
	bx, err := h.boxFor(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	if q.Get("path") == "" {
		writeJSONError(w, http.StatusBadRequest, "the path parameter is required")
		return
	}
	p, err := bx.resolve(r.Context(), q.Get("path"))
	if err != nil {
		writeError(w, err)
		return
	}
	dw := &downloadWriter{w: w, name: path.Base(p), size: -1}
	err = bx.files(r.Context(), func(hd sandbox.Handle) error {
		return hd.ReadFile(r.Context(), p, dw, sandbox.ReadOptions{Size: dw.start})
	})
	switch {
	case err != nil && !dw.committed:
		writeError(w, err)
	case err != nil || dw.err != nil || dw.sent != dw.size:
		// The length went out already: cut the response so that the
		// client sees it short, never a complete-looking file.
		h.log.Debug("download cut", "sandbox", bx.id, "path", p, "sent", dw.sent, "size", dw.size, "err", err, "write_err", dw.err)
		panic(http.ErrAbortHandler)
	}
}

// downloadWriter answers a download: the file's size, which it sends as
// Content-Length (start), then its bytes.
type downloadWriter struct {
	w         http.ResponseWriter
	name      string
	size      int64 // -1 until start
	sent      int64
	committed bool
	err       error
}

// start sends the headers for a file of size bytes.
func (d *downloadWriter) start(size int64) error {
	d.size = size
	h := d.w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": d.name}))
	d.w.WriteHeader(http.StatusOK)
	d.committed = true
	return nil
}

func (d *downloadWriter) Write(p []byte) (int, error) {
	if d.err != nil {
		return 0, d.err
	}
	if int64(len(p)) > d.size-d.sent {
		d.err = errors.New("the backend sent more than the file's size")
		return 0, d.err
	}
	m, err := d.w.Write(p)
	d.sent += int64(m)
	if err != nil {
		d.err = err
		return 0, err
	}
	return len(p), nil
}

// errUploadAborted ends an upload's copy when the helper stopped reading.
var errUploadAborted = errors.New("the upload was abandoned")

// limitReader fails past max bytes (a gzip body's decoded size).
type limitReader struct {
	r   io.Reader
	n   int64
	max int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n > l.max {
		return 0, &http.MaxBytesError{Limit: l.max}
	}
	n, err := l.r.Read(p)
	l.n += int64(n)
	if l.n > l.max {
		return n, &http.MaxBytesError{Limit: l.max}
	}
	return n, err
}

// upload serves POST /files: an application/octet-stream body written to
// ?path=, or a multipart form whose "file" parts are each written to
// ?path= or, without it, to their file name. Parents are created; the
// files belong to the sandbox's user. X-Metadata-NAME headers become
// every written file's metadata (replacing what it had; none clears
// it), kept by the file helper as extended attributes.
func (h *Handler) upload(w http.ResponseWriter, r *http.Request) {
	bx, err := h.boxFor(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	meta, err := uploadMetadata(r.Header)
	if err != nil {
		writeError(w, err)
		return
	}
	var body io.Reader = http.MaxBytesReader(w, r.Body, h.opts.MaxUploadBytes)
	switch enc := strings.ToLower(r.Header.Get("Content-Encoding")); enc {
	case "", "identity":
		if r.ContentLength > h.opts.MaxUploadBytes { // refused before any of it reaches the sandbox
			writeError(w, &http.MaxBytesError{Limit: h.opts.MaxUploadBytes})
			return
		}
	case "gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			writeJSONError(w, http.StatusBadRequest, "the gzip body: "+err.Error())
			return
		}
		body = &limitReader{r: zr, max: h.opts.MaxUploadBytes}
	default:
		writeJSONError(w, http.StatusUnsupportedMediaType, "unsupported Content-Encoding "+enc)
		return
	}
	target := r.URL.Query().Get("path")
	mediaType, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var entries []fileEntry
	switch {
	case mediaType == "application/octet-stream":
		if target == "" {
			writeJSONError(w, http.StatusBadRequest, "the path parameter is required for an application/octet-stream upload")
			return
		}
		p, err := bx.resolve(r.Context(), target)
		if err != nil {
			writeError(w, err)
			return
		}
		e, err := h.put(r.Context(), bx, p, body, meta)
		if err != nil {
			writeError(w, err)
			return
		}
		entries = append(entries, e)
	case strings.HasPrefix(mediaType, "multipart/") && params["boundary"] != "":
		mr := multipart.NewReader(body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				writeError(w, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("the multipart form: %w", err)))
				return
			}
			if part.FormName() != "file" {
				continue // NextPart skips what is left of it
			}
			name := target
			if name == "" {
				if name, err = partFileName(part.Header.Get("Content-Disposition")); err != nil {
					writeError(w, connect.NewError(connect.CodeInvalidArgument, err))
					return
				}
			}
			p, err := bx.resolve(r.Context(), name)
			if err != nil {
				writeError(w, err)
				return
			}
			for _, e := range entries {
				if e.Path == p {
					writeError(w, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("the upload writes %s twice", p)))
					return
				}
			}
			e, err := h.put(r.Context(), bx, p, part, meta)
			if err != nil {
				writeError(w, err)
				return
			}
			entries = append(entries, e)
		}
		if len(entries) == 0 {
			writeJSONError(w, http.StatusBadRequest, `the multipart form has no "file" part`)
			return
		}
	default:
		writeJSONError(w, http.StatusBadRequest, "unsupported Content-Type "+r.Header.Get("Content-Type")+": want multipart/form-data or application/octet-stream")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(entries)
}

// partFileName is the file name of a multipart part, from its
// Content-Disposition header, kept whole (a path, unlike
// multipart.Part.FileName's base name). The escapes %0A, %0D and %22
// that browsers and fetch implementations write for a line feed, a
// carriage return and a double quote are decoded.
func partFileName(disposition string) (string, error) {
	_, params, err := mime.ParseMediaType(disposition)
	if err != nil {
		return "", fmt.Errorf("the file part's Content-Disposition %q: %w", disposition, err)
	}
	name := params["filename"]
	if name == "" {
		return "", errors.New("a file part has no file name and the path parameter is not given")
	}
	name = strings.NewReplacer("%0A", "\n", "%0a", "\n", "%0D", "\r", "%0d", "\r", "%22", `"`).Replace(name)
	if strings.ContainsRune(name, 0) {
		return "", errors.New("a file name holds a NUL byte")
	}
	return name, nil
}

// put writes one uploaded file, at the resolved path p, through the helper's put op. The body is
// read in this goroutine (never in the backend's, after the handler
// returned); a body that fails (too large, cut) fails the upload, and
// the file it was to replace is left as it was (one it was to make is
// not made).
func (h *Handler) put(ctx context.Context, bx *box, p string, body io.Reader, meta map[string]string) (fileEntry, error) {
	// Whether the upload makes the file, or replaces one: a failed
	// upload removes a file it made, never one it was to replace.
	serr := bx.files(ctx, func(hd sandbox.Handle) error {
		_, err := hd.Stat(ctx, p)
		return err
	})
	made := errors.Is(serr, fs.ErrNotExist)
	pr, pw := io.Pipe()
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(pw, body)
		copied <- err // before the helper can see the end of its input
		// A body that failed (over the bound, cut) ends the helper's
		// input with its error: the backend then sends no end mark (see
		// sandbox.Sandbox.WriteFile), and the helper leaves the file it
		// was to replace as it was.
		pw.CloseWithError(err) // nil: EOF
	}()
	if meta == nil {
		meta = map[string]string{} // an upload replaces the file's metadata
	}
	var fi sandbox.FileInfo
	err := bx.files(ctx, func(hd sandbox.Handle) error {
		var err error
		fi, err = hd.WriteFile(ctx, p, pr, sandbox.WriteOptions{Parents: true, Metadata: meta})
		return err
	})
	pr.CloseWithError(errUploadAborted)
	var cerr error
	if err == nil {
		cerr = <-copied // the helper read its input to the end: the copy is over
	} else {
		select {
		case cerr = <-copied:
		default: // the helper failed first; the copy ends with the request
		}
	}
	if errors.Is(cerr, errUploadAborted) {
		// Our own close of the helper's input, after it failed: the
		// copy met it, not a fault of the body (the helper's error is
		// the answer).
		cerr = nil
	}
	if err != nil || cerr != nil {
		if made {
			rctx := context.WithoutCancel(ctx)
			_ = bx.files(rctx, func(hd sandbox.Handle) error { return hd.Remove(rctx, p, false) })
		}
		var mbe *http.MaxBytesError
		switch {
		case errors.As(cerr, &mbe):
			return fileEntry{}, cerr
		case cerr != nil:
			return fileEntry{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("reading the upload: %w", cerr))
		}
		return fileEntry{}, rpcError(err)
	}
	return fileEntry{Name: fi.Name, Path: fi.Path, Type: "file", Metadata: fi.Metadata}, nil
}
