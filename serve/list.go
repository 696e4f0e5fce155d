package serve

import (
	"encoding/base64"
	"math"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// List pagination bounds (E2B's).
const (
	defaultListLimit = 100
	maxListLimit     = 100
)

// noEnd is the endAt reported for a sandbox without a timeout (one the
// server did not create, until a client sets one).
var noEnd = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// stateOf maps a tent state onto E2B's two: a stopped sandbox (ended on
// its own, not yet killed) is "paused", since connecting resumes it
// from its latest snapshot.
func stateOf(s sandbox.State) string {
	if s == sandbox.StateRunning {
		return "running"
	}
	return "paused"
}

// listed is E2B's ListedSandbox for info.
func (s *Server) listed(info sandbox.Info, v boxView) listedSandbox {
	tmpl := templateOf(info)
	end := v.endAt
	if end.IsZero() {
		end = noEnd
	}
	cpus := runtime.NumCPU()
	if c := info.Spec.Limits.CPUs; c > 0 {
		cpus = int(math.Ceil(c))
	}
	mem := hostMemory()
	if m := info.Spec.Limits.Memory; m > 0 {
		mem = m
	}
	return listedSandbox{
		SandboxID:    info.ID,
		TemplateID:   tmpl,
		Alias:        tmpl,
		ClientID:     clientID,
		CPUCount:     cpus,
		MemoryMB:     mem >> 20,
		StartedAt:    info.Created.UTC().Format(time.RFC3339Nano),
		EndAt:        end.UTC().Format(time.RFC3339Nano),
		State:        stateOf(info.State),
		EnvdVersion:  s.opts.EnvdVersion,
		Metadata:     metadataOf(info.Spec.Labels),
		VolumeMounts: s.volumeMountsOf(info.Spec),
	}
}

// listQuery is a parsed GET /v2/sandboxes query.
type listQuery struct {
	metadata     map[string]string
	states       []string // running, paused; empty: both
	startedAfter time.Time
	template     string
	asc          bool
	limit        int
	after        *cursor
}

// cursor is a position in a list: the start time and id of the last
// sandbox returned.
type cursor struct {
	created int64
	id      string
}

func (c cursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.created, 10) + "." + c.id))
}

func parseCursor(s string) (*cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		n, id, ok := strings.Cut(string(b), ".")
		if t, perr := strconv.ParseInt(n, 10, 64); ok && perr == nil {
			return &cursor{created: t, id: id}, nil
		}
	}
	return nil, errorf(http.StatusBadRequest, "nextToken: not a token this server gave")
}

// parseListQuery reads the filters of GET /v2/sandboxes.
func parseListQuery(q url.Values) (listQuery, error) {
	lq := listQuery{limit: defaultListLimit}
	var err error
	if lq.metadata, err = parseMetadataQuery(q.Get("metadata")); err != nil {
		return lq, err
	}
	for _, v := range q["state"] {
		for st := range strings.SplitSeq(v, ",") {
			if st != "running" && st != "paused" {
				return lq, errorf(http.StatusBadRequest, "state: %q is not running or paused", st)
			}
			lq.states = append(lq.states, st)
		}
	}
	if v := q.Get("startedAfter"); v != "" {
		if lq.startedAfter, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return lq, errorf(http.StatusBadRequest, "startedAfter: %q is not an RFC 3339 time", v)
		}
	}
	lq.template = q.Get("template")
	switch o := q.Get("order"); o {
	case "", "desc":
	case "asc":
		lq.asc = true
	default:
		return lq, errorf(http.StatusBadRequest, "order: %q is not asc or desc", o)
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			return lq, errorf(http.StatusBadRequest, "limit: %q is not 1 to %d", v, maxListLimit)
		}
		lq.limit = n
	}
	if v := q.Get("nextToken"); v != "" {
		if lq.after, err = parseCursor(v); err != nil {
			return lq, err
		}
	}
	return lq, nil
}

// parseMetadataQuery reads E2B's metadata filter: a query string whose
// keys and values were URL-encoded once more ("user=abc&app=prod").
func parseMetadataQuery(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	vals, err := url.ParseQuery(s)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "metadata: %v", err)
	}
	md := make(map[string]string, len(vals))
	for k, vs := range vals {
		uk, err1 := url.PathUnescape(k)
		uv, err2 := url.PathUnescape(vs[len(vs)-1])
		if err1 != nil || err2 != nil {
			return nil, errorf(http.StatusBadRequest, "metadata: %q is not URL-encoded", k)
		}
		md[uk] = uv
	}
	return md, nil
}

// matches reports whether a listed sandbox passes the filters (but the
// cursor).
func (lq listQuery) matches(l listedSandbox, created time.Time) bool {
	for k, v := range lq.metadata {
		if got, ok := l.Metadata[k]; !ok || got != v {
			return false
		}
	}
	if len(lq.states) > 0 && !slices.Contains(lq.states, l.State) {
		return false
	}
	if !lq.startedAfter.IsZero() && created.Before(lq.startedAfter) {
		return false
	}
	return lq.template == "" || lq.template == l.TemplateID
}

// handleList serves GET /v2/sandboxes: the sandboxes of the backend
// (the server's and any other), filtered and paginated as E2B's.
func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	lq, err := parseListQuery(r.URL.Query())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.list(w, r, lq)
}

// handleListV1 serves the older GET /sandboxes: the running sandboxes,
// filtered by metadata, unpaginated.
func (s *Server) handleListV1(w http.ResponseWriter, r *http.Request) {
	md, err := parseMetadataQuery(r.URL.Query().Get("metadata"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.list(w, r, listQuery{metadata: md, states: []string{"running"}, limit: math.MaxInt})
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, lq listQuery) {
	listed := time.Now()
	infos, err := s.b.List(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.prune(infos, listed)
	slices.SortFunc(infos, func(a, b sandbox.Info) int {
		c := a.Created.Compare(b.Created)
		if c == 0 {
			c = strings.Compare(a.ID, b.ID)
		}
		if !lq.asc {
			c = -c
		}
		return c
	})
	out := []listedSandbox{}
	running := 0
	var next string
	for _, info := range infos {
		l := s.listed(info, s.view(info.ID))
		if !lq.matches(l, info.Created) {
			continue
		}
		if l.State == "running" {
			running++
		}
		if lq.after != nil && !afterCursor(info, *lq.after, lq.asc) {
			continue
		}
		if len(out) == lq.limit {
			if next == "" {
				last := out[len(out)-1]
				t, _ := time.Parse(time.RFC3339Nano, last.StartedAt)
				next = cursor{created: t.UnixNano(), id: last.SandboxID}.String()
			}
			continue
		}
		out = append(out, l)
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	w.Header().Set("X-Total-Running", itoa(running))
	writeJSON(w, http.StatusOK, out)
}

// afterCursor reports whether info comes after c in the list's order.
func afterCursor(info sandbox.Info, c cursor, asc bool) bool {
	t := info.Created.UnixNano()
	cmp := 0
	switch {
	case t < c.created:
		cmp = -1
	case t > c.created:
		cmp = 1
	default:
		cmp = strings.Compare(info.ID, c.id)
	}
	if !asc {
		cmp = -cmp
	}
	return cmp > 0
}

// prune drops the boxes of sandboxes the backend no longer has (killed
// outside the server, by `tent rm`), among those the server had before
// the backend listed infos at the time listed.
func (s *Server) prune(infos []sandbox.Info, listed time.Time) {
	have := make(map[string]bool, len(infos))
	for _, i := range infos {
		have[i.ID] = true
	}
	var gone []string
	s.mu.Lock()
	for id, b := range s.boxes {
		if !have[id] && b.added.Before(listed) && len(b.streams) == 0 {
			s.stopLocked(b)
			delete(s.boxes, id)
			gone = append(gone, id)
		}
	}
	s.mu.Unlock()
	for _, id := range gone {
		s.forget(id)
	}
}
