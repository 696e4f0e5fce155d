package serve

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

// E2B's volumes: named directories that outlive sandboxes, mounted
// read-write into the sandboxes that name them at creation
// (volumeMounts), with a content API of their own (/volumecontent/ID/...,
// volumecontent.go)
// that a client reaches with the volume's token. Each lives in
// Options.VolumesDir/ID: volume.json (its id, name and creation time)
// and data/, the directory sandboxes mount (as every tent rw mount: its
// on-disk owner's files are the sandbox user's inside, and what a
// sandbox creates there is the owner's on disk).

// volumeRec is a volume, as volume.json keeps it.
type volumeRec struct {
	ID      string    `json:"volumeID"`
	Name    string    `json:"name"`
	Created time.Time `json:"createdAt"`
	// destroying is set while a destroy removes the volume's files: its
	// name stays taken (a destroy that fails puts the volume back) and
	// nothing mounts or serves it.
	destroying bool
}

// volumes is the server's volume store.
type volumes struct {
	dir string // Options.VolumesDir; "" when volumes are not served
	mu  sync.Mutex
	// byID holds every volume.
	byID map[string]*volumeRec
	// provisioning counts the sandboxes being provisioned (see
	// Server.acquireProvision).
	provisioning int
	// lists bounds the lists answered at once (each may hold up to
	// maxVolumeListBytes, twice: the entries and their JSON).
	lists chan struct{}
}

// maxVolumeLists bounds the content API's lists in flight.
const maxVolumeLists = 4

// loadVolumes opens the store in dir (made, mode 0700, if missing) and
// reads every volume in it; one it cannot read is logged and left alone.
func loadVolumes(dir string, log *slog.Logger) (*volumes, error) {
	v := &volumes{dir: dir, byID: map[string]*volumeRec{}, lists: make(chan struct{}, maxVolumeLists)}
	if dir == "" {
		return v, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("volumes directory: %w", err)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("volumes directory %s: not a directory", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("volumes directory: %w", err)
	}
	for _, e := range ents {
		if aside, ok := strings.CutPrefix(e.Name(), ".destroyed-"); ok && e.IsDir() && validVolumeID(aside) {
			// A destroy that did not finish: finish it.
			if err := v.removeAside(e.Name()); err != nil {
				log.Warn("a destroyed volume's files could not all be removed", "dir", filepath.Join(dir, e.Name()), "err", err)
			}
			continue
		}
		if !e.IsDir() || !validVolumeID(e.Name()) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "volume.json"))
		var rec volumeRec
		if err == nil {
			err = json.Unmarshal(b, &rec)
		}
		if err == nil && (rec.ID != e.Name() || !policy.ValidName(rec.Name)) {
			err = errors.New("its record names another volume, or no valid name")
		}
		if err != nil {
			log.Warn("a volume could not be read: left alone", "dir", filepath.Join(dir, e.Name()), "err", err)
			continue
		}
		v.byID[rec.ID] = &rec
	}
	return v, nil
}

// validVolumeID reports whether id has the form newVolumeID makes.
func validVolumeID(id string) bool {
	if len(id) != 36 {
		return false
	}
	for i, c := range []byte(id) {
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
		default:
			return false
		}
	}
	return true
}

// newVolumeID is a random id in UUID form, as E2B's.
func newVolumeID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// dataDir is where volume id's files are.
func (v *volumes) dataDir(id string) string { return filepath.Join(v.dir, id, "data") }

// byName returns the volume named name.
func (v *volumes) byName(name string) *volumeRec {
	for _, rec := range v.byID {
		if rec.Name == name {
			return rec
		}
	}
	return nil
}

// volumeRoutes adds the volume API to m.
func (s *Server) volumeRoutes(m *http.ServeMux) {
	m.HandleFunc("POST /volumes", s.handleVolumeCreate)
	m.HandleFunc("GET /volumes", s.handleVolumeList)
	m.HandleFunc("GET /volumes/{volumeID}", s.handleVolumeGet)
	m.HandleFunc("DELETE /volumes/{volumeID}", s.handleVolumeDestroy)
	m.HandleFunc("GET /volumecontent/{volumeID}/file", s.volumeContent(s.handleVolumeRead))
	m.HandleFunc("PUT /volumecontent/{volumeID}/file", s.volumeContent(s.handleVolumeWrite))
	m.HandleFunc("GET /volumecontent/{volumeID}/dir", s.volumeContent(s.handleVolumeList1))
	m.HandleFunc("POST /volumecontent/{volumeID}/dir", s.volumeContent(s.handleVolumeMakeDir))
	m.HandleFunc("GET /volumecontent/{volumeID}/path", s.volumeContent(s.handleVolumeStat))
	m.HandleFunc("PATCH /volumecontent/{volumeID}/path", s.volumeContent(s.handleVolumeSetMeta))
	m.HandleFunc("DELETE /volumecontent/{volumeID}/path", s.volumeContent(s.handleVolumeRemove))
}

// volumeReply is Volume / VolumeAndToken.
type volumeReply struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	Token    string `json:"token,omitempty"`
}

// servesVolumes refuses when the server has no volume store.
func (s *Server) servesVolumes() error {
	if s.vols.dir == "" {
		return notImplemented("volumes (this server has no volumes directory)")
	}
	return nil
}

// handleVolumeCreate serves POST /volumes: {"name": NAME} makes an empty
// volume; a name is unique.
func (s *Server) handleVolumeCreate(w http.ResponseWriter, r *http.Request) {
	if err := s.servesVolumes(); err != nil {
		s.writeError(w, r, err)
		return
	}
	var req struct {
		Name string `json:"name"`
	}
	if err := readJSON(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if !policy.ValidName(req.Name) {
		s.writeError(w, r, errorf(http.StatusBadRequest, "name %q: a volume name is 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or a digit", req.Name))
		return
	}
	rec, err := s.vols.create(req.Name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.Info("volume created", "id", rec.ID, "name", rec.Name)
	writeJSON(w, http.StatusCreated, volumeReply{VolumeID: rec.ID, Name: rec.Name, Token: s.volumeToken(rec.ID)})
}

// create makes volume name on disk, then records it.
func (v *volumes) create(name string) (*volumeRec, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.byName(name) != nil {
		return nil, errorf(http.StatusConflict, "a volume named %q exists already", name)
	}
	if len(v.byID) >= maxVolumes {
		return nil, errorf(http.StatusConflict, "the server holds %d volumes already (its limit)", maxVolumes)
	}
	rec := &volumeRec{ID: newVolumeID(), Name: name, Created: time.Now().UTC()}
	dir := filepath.Join(v.dir, rec.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the volume: %w", err)
	}
	b, _ := json.Marshal(rec)
	err := os.Mkdir(filepath.Join(dir, "data"), 0o755)
	if err == nil {
		err = os.Chmod(filepath.Join(dir, "data"), 0o755) // whatever the umask
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "volume.json"), b, 0o600)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("creating the volume: %w", err)
	}
	v.byID[rec.ID] = rec
	return rec, nil
}

// handleVolumeList serves GET /volumes: every volume, by name.
func (s *Server) handleVolumeList(w http.ResponseWriter, r *http.Request) {
	if err := s.servesVolumes(); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.vols.mu.Lock()
	out := make([]volumeReply, 0, len(s.vols.byID))
	for _, rec := range s.vols.byID {
		out = append(out, volumeReply{VolumeID: rec.ID, Name: rec.Name})
	}
	s.vols.mu.Unlock()
	slices.SortFunc(out, func(a, b volumeReply) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, http.StatusOK, out)
}

// lookupVolume returns volume id, or a 404.
func (s *Server) lookupVolume(id string) (*volumeRec, error) {
	if err := s.servesVolumes(); err != nil {
		return nil, err
	}
	s.vols.mu.Lock()
	defer s.vols.mu.Unlock()
	rec := s.vols.byID[id]
	if rec == nil {
		return nil, errorf(http.StatusNotFound, "volume %q not found", id)
	}
	if rec.destroying {
		return nil, errorf(http.StatusConflict, "volume %s is being destroyed", rec.Name)
	}
	return rec, nil
}

// handleVolumeGet serves GET /volumes/{volumeID}, with its token.
func (s *Server) handleVolumeGet(w http.ResponseWriter, r *http.Request) {
	rec, err := s.lookupVolume(r.PathValue("volumeID"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, volumeReply{VolumeID: rec.ID, Name: rec.Name, Token: s.volumeToken(rec.ID)})
}

// handleVolumeDestroy serves DELETE /volumes/{volumeID}: the volume and
// its files are removed, unless a sandbox mounts it (409: kill it first).
func (s *Server) handleVolumeDestroy(w http.ResponseWriter, r *http.Request) {
	rec, err := s.lookupVolume(r.PathValue("volumeID"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	data := s.vols.dataDir(rec.ID)
	inUse := func() error {
		infos, err := s.b.List(r.Context())
		if err != nil {
			return err
		}
		for _, info := range infos {
			if slices.ContainsFunc(info.Spec.Mounts, func(m sandbox.Mount) bool { return m.Source == data }) {
				return errorf(http.StatusConflict, "volume %q is mounted by sandbox %s: kill it first", rec.Name, info.ID)
			}
		}
		return nil
	}
	if err := s.vols.destroy(rec.ID, inUse); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.Info("volume destroyed", "id", rec.ID, "name", rec.Name)
	w.WriteHeader(http.StatusNoContent)
}

// destroy forgets volume id and removes its directory: first renamed
// aside (so that it is gone at once, whole), then its files, without
// following any link a sandbox left there. It refuses while a sandbox
// is being provisioned (a fork or a resume may mount any volume its
// snapshot names) or while inUse (called under the store's lock, so that
// no provisioning starts meanwhile) says a sandbox mounts it. Where the
// files cannot all be removed, the volume is put back and kept.
func (v *volumes) destroy(id string, inUse func() error) error {
	v.mu.Lock()
	rec := v.byID[id]
	var err error
	switch {
	case rec == nil:
		err = errorf(http.StatusNotFound, "volume %q not found", id)
	case rec.destroying:
		err = errorf(http.StatusConflict, "volume %s is being destroyed", rec.Name)
	case v.provisioning > 0:
		err = errorf(http.StatusConflict, "volume %s: sandboxes are being created, forked or resumed, and may mount it: try again once they are", rec.Name)
	default:
		err = inUse()
	}
	aside := ".destroyed-" + id
	if err == nil {
		if err = os.Rename(filepath.Join(v.dir, id), filepath.Join(v.dir, aside)); err == nil {
			rec.destroying = true
		}
	}
	v.mu.Unlock()
	if err != nil {
		return err
	}
	rerr := v.removeAside(aside)
	v.mu.Lock()
	defer v.mu.Unlock()
	rec.destroying = false
	if rerr == nil {
		delete(v.byID, id)
		return nil
	}
	if err := os.Rename(filepath.Join(v.dir, aside), filepath.Join(v.dir, id)); err != nil {
		delete(v.byID, id)
		return fmt.Errorf("volume %s: its files could not all be removed (%w); they are left in %s", rec.Name, rerr, filepath.Join(v.dir, aside))
	}
	return fmt.Errorf("volume %s: what is left of its files could not be removed, so it is kept: %w", rec.Name, rerr)
}

// volumeMount is one of a create's volumeMounts: the volume name's
// volume at path.
type volumeMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// maxVolumes bounds the volumes a server holds.
const maxVolumes = 1000

// maxVolumeMounts bounds a create's volumeMounts.
const maxVolumeMounts = 16

// checkVolumeMounts validates a create's volumeMounts (the volumes are
// looked up when the sandbox is provisioned).
func checkVolumeMounts(vms []volumeMount) error {
	if len(vms) > maxVolumeMounts {
		return errorf(http.StatusBadRequest, "volumeMounts: %d, at most %d", len(vms), maxVolumeMounts)
	}
	seen := map[string]bool{}
	for i, vm := range vms {
		if !policy.ValidName(vm.Name) {
			return errorf(http.StatusBadRequest, "volumeMounts[%d].name %q: not a volume name", i, vm.Name)
		}
		if !strings.HasPrefix(vm.Path, "/") || path.Clean(vm.Path) != vm.Path || vm.Path == "/" || !printable(vm.Path) {
			return errorf(http.StatusBadRequest, "volumeMounts[%d].path %q: want a clean absolute path other than /", i, vm.Path)
		}
		if seen[vm.Path] {
			return errorf(http.StatusBadRequest, "volumeMounts[%d].path %q: mounted twice", i, vm.Path)
		}
		seen[vm.Path] = true
	}
	return nil
}

// mountVolumes resolves vms to rw mounts. The caller holds a
// provisioning turn (acquireProvision), which keeps every volume from
// being destroyed until the sandbox exists or failed to.
func (s *Server) mountVolumes(vms []volumeMount) ([]sandbox.Mount, error) {
	if len(vms) == 0 {
		return nil, nil
	}
	if err := s.servesVolumes(); err != nil {
		return nil, err
	}
	s.vols.mu.Lock()
	defer s.vols.mu.Unlock()
	var mounts []sandbox.Mount
	for _, vm := range vms {
		rec := s.vols.byName(vm.Name)
		if rec == nil {
			return nil, errorf(http.StatusNotFound, "volume %q not found", vm.Name)
		}
		if rec.destroying {
			return nil, errorf(http.StatusConflict, "volume %q is being destroyed", vm.Name)
		}
		mounts = append(mounts, sandbox.Mount{Source: s.vols.dataDir(rec.ID), Target: vm.Path, Access: sandbox.ReadWrite})
	}
	return mounts, nil
}

// volumeMountsOf names the volumes spec mounts, as getInfo reports them.
func (s *Server) volumeMountsOf(spec sandbox.Spec) []volumeMount {
	if s.vols.dir == "" {
		return nil
	}
	var out []volumeMount
	s.vols.mu.Lock()
	defer s.vols.mu.Unlock()
	for _, m := range spec.Mounts {
		rest, ok := strings.CutPrefix(m.Source, s.vols.dir+string(filepath.Separator))
		id, tail, _ := strings.Cut(rest, string(filepath.Separator))
		if !ok || tail != "data" || s.vols.byID[id] == nil {
			continue
		}
		out = append(out, volumeMount{Name: s.vols.byID[id].Name, Path: m.Target})
	}
	return out
}
