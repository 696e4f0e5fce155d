package serve

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The volume content API (/volumecontent/ID/...): its paths and entries,
// its tokens, and the handlers that serve a volume's files through a
// volumeFS (volumefs_linux.go).

// Bounds of the content API's work on a volume's behalf.
const (
	// maxVolumeListEntries bounds the entries one list answers.
	maxVolumeListEntries = 100_000
	// maxVolumeListBytes bounds what a list holds and answers (names,
	// paths and link targets, each entry counted volumeEntryOverhead
	// more for the rest).
	maxVolumeListBytes  = 16 << 20
	volumeEntryOverhead = 256
	// maxVolumeListDepth bounds a list's depth.
	maxVolumeListDepth = 64
	// maxVolumePath bounds a path (Linux's PATH_MAX).
	maxVolumePath = 4096
)

// volumeRel turns an API path ("/a/b", "a/b", "/") into one relative to
// the volume's root ("a/b", "."): cleaned, so that ".." stops at the
// root. A NUL or an empty path is refused.
func volumeRel(p string) (string, error) {
	if p == "" {
		return "", errorf(http.StatusBadRequest, "path: empty: want a path in the volume, such as /dir/file")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", errorf(http.StatusBadRequest, "path %q: contains a NUL byte", p)
	}
	if len(p) > maxVolumePath {
		return "", errorf(http.StatusBadRequest, "path: over %d bytes", maxVolumePath)
	}
	rel := strings.TrimPrefix(path.Clean("/"+p), "/")
	if rel == "" {
		rel = "."
	}
	return rel, nil
}

// apiPath is rel as the API names it: "/a/b", "/" for the root.
func apiPath(rel string) string {
	if rel == "." {
		return "/"
	}
	return "/" + rel
}

// volumeEntry is VolumeEntryStat: one entry as the API reports it.
type volumeEntry struct {
	Name   string    `json:"name"`
	Type   string    `json:"type"`
	Path   string    `json:"path"`
	Size   int64     `json:"size"`
	Mode   uint32    `json:"mode"`
	UID    uint32    `json:"uid"`
	GID    uint32    `json:"gid"`
	Atime  time.Time `json:"atime"`
	Mtime  time.Time `json:"mtime"`
	Ctime  time.Time `json:"ctime"`
	Target string    `json:"target,omitempty"`
}

// overflowID is how an id outside a sandbox's user namespace shows
// inside it.
const overflowID = 65534

// checkMode refuses a mode beyond the permission bits: a set-id file
// would be the server's user's (root's, for a root server) on the host.
func checkMode(field string, mode *uint32) error {
	if mode != nil && *mode&^0o777 != 0 {
		return errorf(http.StatusBadRequest, "%s %#o: only permission bits (0-0777): set-id and sticky bits are refused", field, *mode)
	}
	return nil
}

// checkOwner refuses ids a sandbox cannot see: tent maps one id into a
// sandbox, its user, which owns every file of the volume there.
func checkOwner(field string, id *uint32) error {
	if id != nil && *id != e2bUID {
		return errorf(http.StatusBadRequest, "%s %d: a volume's files belong to the sandbox's user (%d) inside every sandbox: tent maps that one id, so no other owner can be given", field, *id, e2bUID)
	}
	return nil
}

// jsonLen is how many bytes s takes in encoding/json's output: what a
// name a sandbox chose costs the answer ('<' is 6 bytes there, and so
// is each byte that is not UTF-8), not what it costs on disk.
func jsonLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1, r < 0x20, r == '<', r == '>', r == '&', r == '\u2028', r == '\u2029':
			n += 6
		case r == '"', r == '\\':
			n += 2
		default:
			n += size
		}
		i += size
	}
	return n
}

// volumeToken is volume id's token for the content API: derived from the
// API key, as sandboxes' access tokens are.
func (s *Server) volumeToken(id string) string {
	m := hmac.New(sha256.New, s.tokenKey)
	m.Write([]byte("volume\x00" + id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// volumeContentID returns the volume id of a content API path.
func volumeContentID(p string) (string, bool) {
	rest, ok := strings.CutPrefix(p, "/volumecontent/")
	if !ok {
		return "", false
	}
	id, _, _ := strings.Cut(rest, "/")
	return id, id != ""
}

// volumeAuthorized reports whether r is a content API request carrying
// its volume's token (Authorization: Bearer TOKEN), checked in constant
// time.
func (s *Server) volumeAuthorized(r *http.Request) bool {
	id, ok := volumeContentID(r.URL.Path)
	return ok && s.volumeTokenFor(r, id)
}

// volumeTokenFor reports whether r carries volume id's token.
func (s *Server) volumeTokenFor(r *http.Request, id string) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || s.vols.dir == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(s.volumeToken(id)), []byte(tok)) == 1
}

// volumeUpload reports whether r uploads a file to a volume: its body is
// bounded by MaxUploadBytes rather than MaxBodyBytes.
func volumeUpload(r *http.Request) bool {
	return r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/volumecontent/") && strings.HasSuffix(r.URL.Path, "/file")
}

// volumeUploadTimeout bounds reading an upload's body (the other
// requests' bodies are bounded by RequestTimeout).
const volumeUploadTimeout = time.Hour

// volumeContent wraps a content API handler: it finds the volume and
// opens its data directory for the request.
func (s *Server) volumeContent(h func(w http.ResponseWriter, r *http.Request, v *volumeFS, rel string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// The token let the request in for the volume its path named
		// first; the volume served must be that one, however the path
		// was escaped.
		if !s.validKey(r.Header.Get("X-API-Key")) && !s.volumeTokenFor(r, r.PathValue("volumeID")) {
			s.writeError(w, r, errorf(http.StatusUnauthorized, "invalid or missing volume token for volume %q", r.PathValue("volumeID")))
			return
		}
		rec, err := s.lookupVolume(r.PathValue("volumeID"))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		rel, err := volumeRel(r.URL.Query().Get("path"))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		v, err := openVolumeFS(s.vols.dataDir(rec.ID))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		defer v.Close()
		h(w, r, v, rel)
	}
}

// queryUint parses query parameter name as a number (decimal, or 0o/0x
// prefixed); nil when absent.
func queryUint(r *http.Request, name string) (*uint32, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return nil, nil
	}
	n, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "%s %q: want a number", name, s)
	}
	u := uint32(n)
	return &u, nil
}

// queryBool parses query parameter name: absent is false.
func queryBool(r *http.Request, name string) (bool, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, errorf(http.StatusBadRequest, "%s %q: want true or false", name, s)
	}
	return b, nil
}

// newEntryOptions reads a write's or a mkdir's uid, gid, mode and force.
func newEntryOptions(r *http.Request, defMode uint32) (mode uint32, force bool, err error) {
	uid, err := queryUint(r, "uid")
	if err == nil {
		err = checkOwner("uid", uid)
	}
	var gid, m *uint32
	if err == nil {
		if gid, err = queryUint(r, "gid"); err == nil {
			err = checkOwner("gid", gid)
		}
	}
	if err == nil {
		if m, err = queryUint(r, "mode"); err == nil {
			err = checkMode("mode", m)
		}
	}
	if err == nil {
		force, err = queryBool(r, "force")
	}
	mode = defMode
	if m != nil {
		mode = *m
	}
	return mode, force, err
}

// handleVolumeRead serves GET .../file: the file's bytes.
func (s *Server) handleVolumeRead(w http.ResponseWriter, r *http.Request, v *volumeFS, rel string) {
	f, size, err := v.openFile(rel)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	// What the file held when it was opened: a file a sandbox keeps
	// growing is cut at that size.
	_, _ = io.CopyN(w, f, size)
}

// handleVolumeWrite serves PUT .../file: the body becomes the file.
func (s *Server) handleVolumeWrite(w http.ResponseWriter, r *http.Request, v *volumeFS, rel string) {
	mode, force, err := newEntryOptions(r, 0o644)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	e, err := v.writeFile(rel, r.Body, mode, force)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, e)
}

// handleVolumeList1 serves GET .../dir: a directory's entries, depth
// levels down (default 1).
func (s *Server) handleVolumeList1(w http.ResponseWriter, r *http.Request, v *volumeFS, rel string) {
	depth := 1
	if d := r.URL.Query().Get("depth"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 1 || n > maxVolumeListDepth {
			s.writeError(w, r, errorf(http.StatusBadRequest, "depth %q: want 1 to %d", d, maxVolumeListDepth))
			return
		}
		depth = n
	}
	select {
	case s.vols.lists <- struct{}{}:
		defer func() { <-s.vols.lists }()
	default:
		w.Header().Set("Retry-After", "1")
		s.writeError(w, r, errorf(http.StatusTooManyRequests, "%d lists of volume content are being answered already (the limit)", maxVolumeLists))
		return
	}
	out, err := v.list(rel, depth)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// handleVolumeMakeDir serves POST .../dir.
func (s *Server) handleVolumeMakeDir(w http.ResponseWriter, r *http.Request, v *volumeFS, rel string) {
	mode, force, err := newEntryOptions(r, 0o755)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	e, err := v.makeDir(rel, mode, force)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, e)
}

// handleVolumeStat serves GET .../path: one entry, links not followed.
func (s *Server) handleVolumeStat(w http.ResponseWriter, r *http.Request, v *volumeFS, rel string) {
	e, err := v.stat(rel)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, e)
}

// handleVolumeSetMeta serves PATCH .../path: {"uid", "gid", "mode"}.
func (s *Server) handleVolumeSetMeta(w http.ResponseWriter, r *http.Request, v *volumeFS, rel string) {
	var req struct {
		UID  *uint32 `json:"uid"`
		GID  *uint32 `json:"gid"`
		Mode *uint32 `json:"mode"`
	}
	err := readJSON(r, &req)
	if err == nil {
		err = checkOwner("uid", req.UID)
	}
	if err == nil {
		err = checkOwner("gid", req.GID)
	}
	if err == nil {
		err = checkMode("mode", req.Mode)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	e, err := v.setMode(rel, req.Mode)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, e)
}

// handleVolumeRemove serves DELETE .../path: a file, a link, or a
// directory with everything in it.
func (s *Server) handleVolumeRemove(w http.ResponseWriter, r *http.Request, v *volumeFS, rel string) {
	if err := v.remove(rel); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
