package serve

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// SandboxAPI serves the in-sandbox API (E2B's envd: the process and
// filesystem Connect-RPC services, /files, /health). The server calls it
// only after it has checked the request's access token against the
// sandbox named by its E2b-Sandbox-Id header; *envd.Handler implements
// it.
type SandboxAPI interface {
	// ServeSandbox serves one in-sandbox request for sandboxID, a full
	// id of a running sandbox of the server's backend.
	ServeSandbox(w http.ResponseWriter, r *http.Request, sandboxID string)
	// Forget drops what the API keeps for sandboxID (its processes'
	// streams, watchers); the server calls it when the sandbox is killed.
	Forget(sandboxID string)
}

// Options configure a [Server]. The zero value of every limit means its
// default.
type Options struct {
	// APIKey is the key every control-plane request must carry in its
	// X-API-Key header. It must not be empty.
	APIKey string
	// TemplatesDir holds the templates: tent policy files named
	// TEMPLATE.json, TEMPLATE.yaml or TEMPLATE.yml (see package
	// sandbox/policy). "" means no directory: only the built-in "base"
	// template (no network, no mounts, the restrictive defaults), which
	// a file named base.* replaces.
	TemplatesDir string
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// SandboxAPI serves in-sandbox requests; nil means the envd handler
	// of package serve/envd over the same backend.
	SandboxAPI SandboxAPI
	// EnvdVersion is the envd version the server reports for every
	// sandbox; the SDKs enable features by it. "" means the version the
	// in-sandbox API implements.
	EnvdVersion string
	// DefaultTimeout is a new sandbox's lifetime when the request gives
	// none (default 300 s, as E2B's).
	DefaultTimeout time.Duration
	// MaxTimeout bounds every timeout a client asks for (default 24 h).
	MaxTimeout time.Duration
	// MaxSandboxes bounds the sandboxes the backend runs: a create past
	// it is refused with 429 (default 1000).
	MaxSandboxes int
	// MaxProvisions bounds the sandboxes being provisioned, forked or
	// resumed at once; more wait for a turn (default 4 × CPUs).
	MaxProvisions int
	// MaxRequests bounds the control-plane requests served at once;
	// more are refused with 429 and Retry-After (default 256).
	MaxRequests int
	// MaxBodyBytes bounds a control-plane request body (default 1 MiB).
	MaxBodyBytes int64
	// MaxStreamsPerSandbox bounds the in-sandbox requests of one sandbox
	// served at once, streams included (a command's output, a watch);
	// more are refused with 429 (default 128).
	MaxStreamsPerSandbox int
	// MaxUploadBytes bounds the body of an in-sandbox file upload
	// (default 1 GiB); MaxSandboxBodyBytes that of any other in-sandbox
	// request (default 16 MiB).
	MaxUploadBytes      int64
	MaxSandboxBodyBytes int64
	// RequestTimeout bounds reading a control-plane request's body and
	// the provisioning it asks for (default 2 min).
	RequestTimeout time.Duration
	// BaseLimits bound every sandbox of the built-in base template (the
	// SDKs' default); nil means [DefaultBaseLimits], a pointer to the zero
	// Limits none. They need a cgroup: where the backend gives sandboxes
	// none, New logs what it cannot bound and base runs unbounded. A
	// base.* template file replaces them with its own.
	BaseLimits *sandbox.Limits
	// Domain is the domain the SDKs' getHost(port) names, as
	// PORT-ID.DOMAIN (create and connect answers carry it); a request
	// whose Host has that form reaches the port inside the sandbox (see
	// PrivatePorts). "" leaves the SDKs to their own (E2B_DOMAIN), and
	// the form is then recognised whatever the domain follows. tent
	// serve sets it to localhost:PORT on a loopback address: curl and
	// browsers resolve every name under localhost to loopback themselves.
	Domain string
	// PrivatePorts makes every sandbox's ports answer only requests
	// carrying its traffic access token (e2b-traffic-access-token), as
	// E2B's network.allowPublicTraffic false does for one sandbox. By
	// default, as E2B's, the ports of a sandbox the server created are
	// open to whoever can reach the server and knows the sandbox's id.
	PrivatePorts bool
	// StateFile, when not "", is where the server keeps the settings of
	// its sandboxes that the backend does not (timeouts, lifecycle,
	// network settings as given, template), written at each change with
	// mode 0600; New takes them up again for the sandboxes the backend
	// still has, so that a server restarted over a durable backend keeps
	// their timeouts. "" keeps them in memory only.
	StateFile string
	// VolumesDir, when not "", serves E2B's volumes from that directory
	// (made, mode 0700, if missing): named directories that outlive
	// sandboxes, mounted read-write by the sandboxes that name them in
	// volumeMounts, with a content API reached with each volume's token.
	// "" refuses the volume API (501).
	VolumesDir string
	// SecretsFile, when not "", serves E2B's secrets: named values that
	// a create's network.rules header transforms name as
	// ${e2b.secrets.NAME}, which tent's proxy resolves from Secrets when
	// each request goes out, never seen by the sandbox. The file (mode
	// 0600) is their index (ids, names, versions, metadata), never a
	// value; the file of an earlier server, which held the values, is
	// migrated to Secrets once, at start. "" refuses the secrets API
	// (501).
	SecretsFile string
	// Secrets is the store E2B's secrets' values go to, which the
	// backend's proxies ask per request: supervised.Backend.Secrets(), or
	// the ProvisionOptions.Secrets of a Local backend. Required with
	// SecretsFile.
	Secrets SecretStore
}

// Defaults of [Options].
const (
	DefaultTimeout              = 300 * time.Second
	DefaultMaxTimeout           = 24 * time.Hour
	DefaultMaxSandboxes         = 1000
	DefaultMaxRequests          = 256
	DefaultMaxBodyBytes         = 1 << 20
	DefaultMaxStreamsPerSandbox = 128
	DefaultMaxUploadBytes       = 1 << 30
	DefaultMaxSandboxBodyBytes  = 16 << 20
	DefaultRequestTimeout       = 2 * time.Minute
)

// DefaultBaseLimits are the base template's limits unless
// Options.BaseLimits says otherwise: E2B's default sandbox size (2 CPUs,
// 512 MiB) and a process cap, so that a fork bomb or a runaway program
// in a default sandbox cannot take the host down. Its tmpfs (/tmp, $HOME)
// is charged to the same memory limit, so it is bounded by it too.
var DefaultBaseLimits = sandbox.Limits{CPUs: 2, Memory: 512 << 20, Pids: 1024}

// withDefaults returns o with every zero limit replaced by its default.
func (o Options) withDefaults() Options {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def64 := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur(&o.DefaultTimeout, DefaultTimeout)
	defDur(&o.MaxTimeout, DefaultMaxTimeout)
	defDur(&o.RequestTimeout, DefaultRequestTimeout)
	def(&o.MaxSandboxes, DefaultMaxSandboxes)
	def(&o.MaxProvisions, 4*runtime.NumCPU())
	def(&o.MaxRequests, DefaultMaxRequests)
	def(&o.MaxStreamsPerSandbox, DefaultMaxStreamsPerSandbox)
	def64(&o.MaxBodyBytes, DefaultMaxBodyBytes)
	def64(&o.MaxUploadBytes, DefaultMaxUploadBytes)
	def64(&o.MaxSandboxBodyBytes, DefaultMaxSandboxBodyBytes)
	if o.EnvdVersion == "" {
		o.EnvdVersion = defaultEnvdVersion
	}
	if o.DefaultTimeout > o.MaxTimeout {
		o.DefaultTimeout = o.MaxTimeout
	}
	return o
}

// Server is an http.Handler serving E2B's control plane and, routed by
// the E2b-Sandbox-Id header, its in-sandbox API, over one
// [sandbox.Backend]. Use [New]; serve it with [Server.Serve] or any
// http.Server, and call [Server.Close] when done.
type Server struct {
	b    sandbox.Backend
	opts Options
	log  *slog.Logger
	api  SandboxAPI
	mux  *http.ServeMux

	baseLimits sandbox.Limits // the base template's, as the host can bound them
	conns      *connGuard
	apiKeyHash [32]byte
	tokenKey   []byte
	// portTransport and portLog serve requests to sandboxes' ports.
	portTransport *http.Transport
	portLog       *log.Logger

	requests  chan struct{} // control-plane requests being served
	provision chan struct{} // provisions running

	dirty    chan struct{} // the state file needs writing; nil without one
	saveStop chan struct{}
	saveDone chan struct{}

	// netMu serializes the changes of sandboxes' network policies (a PUT
	// .../network, a secret's change reaching the sandboxes using it).
	netMu sync.Mutex

	mu        sync.Mutex
	closed    bool
	pending   int             // creates and forks in flight
	boxes     map[string]*box // by full sandbox id
	snapshots []*snapRecord   // taken through the server, oldest first

	vols    *volumes
	secrets *secrets

	ciMu     sync.Mutex
	ciPython string // the host's Python for code-interpreter-v1, once found
}

// New returns a server over b. It fails when opts.APIKey is empty, or
// when opts.StateFile cannot be read or taken up.
func New(b sandbox.Backend, opts Options) (*Server, error) {
	if opts.APIKey == "" {
		return nil, errors.New("serve: an API key is required")
	}
	opts = opts.withDefaults()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		b:          b,
		opts:       opts,
		log:        log,
		api:        opts.SandboxAPI,
		apiKeyHash: sha256.Sum256([]byte(opts.APIKey)),
		requests:   make(chan struct{}, opts.MaxRequests),
		provision:  make(chan struct{}, opts.MaxProvisions),
		boxes:      make(map[string]*box),
		conns:      newConnGuard(DefaultMaxUnauthConnsPerPeer, DefaultMaxUnauthConns),
	}
	// Access tokens are derived from the API key, so that a restarted
	// server (same key) hands out the same token for a sandbox it finds
	// running: whoever holds the key can get any token anyway.
	k := hmac.New(sha256.New, []byte("tent serve envd access tokens"))
	k.Write([]byte(opts.APIKey))
	s.tokenKey = k.Sum(nil)
	s.portTransport = newPortTransport(b)
	s.portLog = slog.NewLogLogger(log.Handler(), slog.LevelDebug)
	if s.api == nil {
		s.api = newSandboxAPI(b, opts, log)
	}
	s.baseLimits = DefaultBaseLimits
	if opts.BaseLimits != nil {
		s.baseLimits = *opts.BaseLimits
	}
	if cg := b.Capabilities().CgroupVersion; (cg == "" || cg == "none") && s.baseLimits != (sandbox.Limits{}) {
		log.Warn("this host gives sandboxes no cgroup: sandboxes of the base template run without memory, CPU and process limits (and their /tmp is bounded only by the host's tmpfs size); give tent a delegated cgroup (tent doctor says how) or a base template of your own",
			"memory", s.baseLimits.Memory, "cpus", s.baseLimits.CPUs, "pids", s.baseLimits.Pids)
		s.baseLimits = sandbox.Limits{Timeout: s.baseLimits.Timeout, NoFile: s.baseLimits.NoFile}
	}
	vols, err := loadVolumes(opts.VolumesDir, log)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	s.vols = vols
	if s.secrets, err = loadSecrets(opts.SecretsFile, opts.Secrets); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	s.mux = s.routes()
	if opts.StateFile != "" {
		cleanTemps(opts.StateFile, stateTemps(opts.StateFile))
		saved, err := loadState(opts.StateFile)
		if err != nil {
			return nil, fmt.Errorf("serve: %w", err)
		}
		s.dirty, s.saveStop, s.saveDone = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
		ctx, cancel := context.WithTimeout(context.Background(), opts.RequestTimeout)
		err = s.restore(ctx, saved)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("serve: taking up %s: %w", opts.StateFile, err)
		}
		go s.saveLoop(s.saveStop, s.saveDone)
	}
	return s, nil
}

// accessToken is the envd access token of sandbox id.
func (s *Server) accessToken(id string) string {
	m := hmac.New(sha256.New, s.tokenKey)
	m.Write([]byte(id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// validToken reports, in constant time, whether token is id's.
func (s *Server) validToken(id, token string) bool {
	want := s.accessToken(id)
	return subtle.ConstantTimeCompare([]byte(want), []byte(token)) == 1
}

// validKey reports, in constant time, whether key is the API key.
func (s *Server) validKey(key string) bool {
	h := sha256.Sum256([]byte(key))
	return subtle.ConstantTimeCompare(h[:], s.apiKeyHash[:]) == 1
}

// ServeHTTP routes a request: one with an E2b-Sandbox-Id header (or for
// an in-sandbox path) to the in-sandbox API, any other to the control
// plane.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if port, id, ok := portRequest(r, s.opts.Domain); ok {
		s.servePort(w, r, id, port)
		return
	}
	if id := r.Header.Get(headerSandboxID); id != "" || isSandboxPath(r.URL.Path) {
		s.serveSandbox(w, r, id)
		return
	}
	s.serveControl(w, r)
}

// serveControl authenticates a control-plane request, bounds it and
// hands it to the routes.
func (s *Server) serveControl(w http.ResponseWriter, r *http.Request) {
	if !s.validKey(r.Header.Get("X-API-Key")) && !s.volumeAuthorized(r) {
		msg := "invalid API key"
		switch {
		case strings.HasPrefix(r.URL.Path, "/volumecontent/"):
			msg = "invalid or missing volume token: send it as Authorization: Bearer TOKEN (the token of POST /volumes or GET /volumes/ID), or the API key in X-API-Key"
		case r.Header.Get("X-API-Key") == "":
			msg = "missing API key: send it in the X-API-Key header (E2B_API_KEY for the SDKs)"
		}
		s.writeError(w, r, errorf(http.StatusUnauthorized, "%s", msg))
		return
	}
	s.conns.authenticated(r)
	select {
	case s.requests <- struct{}{}:
		defer func() { <-s.requests }()
	default:
		w.Header().Set("Retry-After", "1")
		s.writeError(w, r, errorf(http.StatusTooManyRequests, "too many requests at once (at most %d)", s.opts.MaxRequests))
		return
	}
	// A slow client may not hold a request open by trickling its body.
	readFor, limit := s.opts.RequestTimeout, s.opts.MaxBodyBytes
	if volumeUpload(r) {
		readFor, limit = volumeUploadTimeout, s.opts.MaxUploadBytes
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(readFor))
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	s.mux.ServeHTTP(w, r)
}

// routes is the control plane's router. Paths and statuses are E2B's
// (the OpenAPI description its SDKs are generated from).
func (s *Server) routes() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("POST /v2/sandboxes", s.handleCreate)
	m.HandleFunc("POST /sandboxes", s.handleCreate)
	m.HandleFunc("GET /v2/sandboxes", s.handleList)
	m.HandleFunc("GET /sandboxes", s.handleListV1)
	m.HandleFunc("GET /sandboxes/{sandboxID}", s.handleGet)
	m.HandleFunc("DELETE /sandboxes/{sandboxID}", s.handleKill)
	m.HandleFunc("POST /sandboxes/{sandboxID}/timeout", s.handleSetTimeout)
	m.HandleFunc("POST /sandboxes/{sandboxID}/refreshes", s.handleRefresh)
	m.HandleFunc("POST /sandboxes/{sandboxID}/pause", s.handlePause)
	m.HandleFunc("POST /v2/sandboxes/{sandboxID}/connect", s.handleConnect)
	m.HandleFunc("POST /sandboxes/{sandboxID}/connect", s.handleConnect)
	m.HandleFunc("POST /sandboxes/{sandboxID}/resume", s.handleResume)
	m.HandleFunc("PUT /sandboxes/{sandboxID}/network", s.handleNetwork)
	m.HandleFunc("GET /sandboxes/{sandboxID}/metrics", s.handleMetrics)
	m.HandleFunc("GET /sandboxes/metrics", s.handleMetricsMany)
	m.HandleFunc("POST /sandboxes/{sandboxID}/snapshots", s.handleSnapshot)
	m.HandleFunc("GET /snapshots", s.handleListSnapshots)
	m.HandleFunc("POST /sandboxes/{sandboxID}/fork", s.handleFork)
	m.HandleFunc("DELETE /templates/{templateID}", s.handleDeleteSnapshot)
	s.volumeRoutes(m)
	s.secretRoutes(m)
	m.HandleFunc("/", s.handleUnknown)
	return m
}

// handleUnknown answers every route the server does not serve: 501 for
// E2B's (templates, volumes, secrets, logs, teams...), 404 for others.
func (s *Server) handleUnknown(w http.ResponseWriter, r *http.Request) {
	for _, p := range e2bPaths {
		if r.URL.Path == p || strings.HasPrefix(r.URL.Path, p+"/") {
			s.writeError(w, r, notImplemented(r.Method+" "+r.URL.Path))
			return
		}
	}
	s.writeError(w, r, errorf(http.StatusNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path))
}

// e2bPaths are the roots of E2B's control-plane API.
var e2bPaths = []string{"/sandboxes", "/snapshots", "/templates", "/secrets", "/volumes", "/volumecontent",
	"/teams", "/api-keys", "/access-tokens", "/nodes", "/v2", "/v3"}

// readJSON decodes the request body into v. An empty body leaves v
// alone (E2B makes most bodies optional).
func readJSON(r *http.Request, v any) error {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errorf(http.StatusRequestEntityTooLarge, "request body over %d bytes", mbe.Limit)
		}
		return errorf(http.StatusBadRequest, "reading the request body: %v", err)
	}
	return decodeJSON(b, v)
}

// acquireProvision waits for a provisioning turn. While it is held no
// volume is destroyed (a fork or a resume may mount one).
func (s *Server) acquireProvision(ctx context.Context) (release func(), err error) {
	select {
	case s.provision <- struct{}{}:
		s.vols.mu.Lock()
		s.vols.provisioning++
		s.vols.mu.Unlock()
		return func() {
			s.vols.mu.Lock()
			s.vols.provisioning--
			s.vols.mu.Unlock()
			<-s.provision
		}, nil
	case <-ctx.Done():
		return nil, errorf(http.StatusServiceUnavailable, "waited too long for a provisioning turn: %v", ctx.Err())
	}
}

// detached is a context for backend work a request started: it outlives
// a client that hangs up (the work then completes and is cleaned up by
// the sandbox's timeout) but not RequestTimeout.
func (s *Server) detached(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(r.Context()), s.opts.RequestTimeout)
}

// itoa is strconv.Itoa, for headers.
func itoa(n int) string { return strconv.Itoa(n) }
