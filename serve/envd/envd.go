// Package envd serves, for tent serve, the in-sandbox half of E2B's API:
// what the official E2B SDKs reach at E2B_SANDBOX_URL, served in E2B by
// envd, the daemon inside each sandbox. Here it runs on the host and
// reaches each sandbox through a [sandbox.Backend]: every command is one
// Handle.Start, every file operation one Handle.File (tent's file
// helper, inside the sandbox with its restrictions and as its user).
//
// It serves the Connect-RPC services process.Process (Start, Connect,
// List, SendInput, StreamInput, SendSignal, CloseStdin, Update) and
// filesystem.Filesystem (Stat, ListDir, MakeDir, Move, Remove, WatchDir,
// CreateWatcher, GetWatcherEvents, RemoveWatcher), in Connect's JSON and
// binary forms, and GET and POST /files and GET /health. The messages
// are defined in proto/ from the descriptors the e2b SDK embeds.
//
// File metadata (X-Metadata-* upload headers) is kept, as by envd, in
// the files' extended attributes (user.e2b.*), and reported by Stat,
// ListDir and uploads; where the sandbox's file system has no user
// extended attributes, an upload with metadata fails (the file is
// written, its metadata refused).
//
// Not served: POST /files/compose, GET /envs, GET /metrics (envd's own;
// tent serve's control plane reports sandbox metrics), POST /init and
// any other procedure: each answers a clear "unimplemented" (Connect) or
// 501 (REST). The user a request names (the username parameter, or the
// Basic user of its Authorization header) is the sandbox's own unless it
// is "root": see user.go.
//
// A download sends Content-Length; should the file change while it is
// read, the response is cut with http.ErrAbortHandler (a middleware
// that recovers panics must let it through) rather than look complete.
//
// Paths are the sandbox's; a relative path, or one starting with "~",
// is taken from the sandbox user's $HOME, as envd does.
//
// Processes: each Start is one [sandbox.Handle.Start]; the command is the
// sandbox's (its supervisor's, over package supervised), with its real
// pid inside, its stdin (when asked for, or its terminal's input) and the
// last MiB of each output stream kept there ([sandbox.Process]). The
// handler keeps only what E2B's protocol needs beyond that (see cmd): the
// command's config as given (List echoes it), its tag, whether it runs on
// a terminal, and how far into its output some client was sent, so that
// a Connect gets what no client got (a handler that did not start the
// command, after a restart, sends what the sandbox keeps). Any client, of
// this handler or of another one over the same backend, finds a command
// by pid or tag, writes its input, signals and resizes it. It outlives
// the request that started it: the client disconnecting does not end it,
// nor does Close; Forget (the sandbox being killed) kills the commands
// the handler knows. A client's stream follows the output as a pipe
// does ([sandbox.Process.Follow]): a client that does not keep up holds
// the command back, and loses nothing; output written while no client
// followed is kept up to the sandbox's bound, and one connecting late
// gets what is kept. A
// command's lifetime is the Start request's deadline (Connect-Timeout-Ms,
// the SDK's timeoutMs), as in envd. One started while the sandbox is
// paused starts once it is resumed; its start event (its pid) comes then.
package envd

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"connectrpc.com/connect"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/serve/envd/filesystempb/filesystempbconnect"
	"github.com/tent-sandbox/tent/serve/envd/processpb/processpbconnect"
)

// Defaults of [Options].
const (
	DefaultMaxUploadBytes    = 1 << 30
	DefaultMaxMessageBytes   = 8 << 20
	DefaultMaxProcesses      = 64
	DefaultMaxStreams        = 64
	DefaultMaxFileOps        = 16
	DefaultOutputBufferBytes = 1 << 20
)

// Options bound what one sandbox's clients can hold; a zero field takes
// its default.
type Options struct {
	// MaxUploadBytes bounds one /files upload body, after gzip decoding
	// (DefaultMaxUploadBytes).
	MaxUploadBytes int64
	// MaxMessageBytes bounds one Connect request message, e.g. a
	// SendInput (DefaultMaxMessageBytes).
	MaxMessageBytes int
	// MaxProcesses bounds a sandbox's running processes
	// (DefaultMaxProcesses, the sandbox's own bound too); a Start beyond
	// it fails with resource_exhausted.
	MaxProcesses int
	// MaxStreams bounds a sandbox's Connect and WatchDir streams and
	// watchers, together (DefaultMaxStreams); more fail with
	// resource_exhausted.
	MaxStreams int
	// MaxFileOps bounds a sandbox's file operations in flight
	// (DefaultMaxFileOps); more wait for a slot.
	MaxFileOps int
	// OutputBufferBytes bounds the events a watcher keeps (one per 200
	// bytes; DefaultOutputBufferBytes). A process's output is kept by its
	// sandbox (see sandbox.Process: the last MiB of each stream).
	OutputBufferBytes int
	// Logger receives the handler's logs; nil discards them.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.MaxUploadBytes <= 0 {
		o.MaxUploadBytes = DefaultMaxUploadBytes
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.MaxProcesses <= 0 {
		o.MaxProcesses = DefaultMaxProcesses
	}
	if o.MaxStreams <= 0 {
		o.MaxStreams = DefaultMaxStreams
	}
	if o.MaxFileOps <= 0 {
		o.MaxFileOps = DefaultMaxFileOps
	}
	if o.OutputBufferBytes <= 0 {
		o.OutputBufferBytes = DefaultOutputBufferBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Handler serves the in-sandbox API of every sandbox of one backend. It
// is safe for concurrent use. Use [New].
type Handler struct {
	b    sandbox.Backend
	opts Options
	log  *slog.Logger
	mux  *http.ServeMux

	mu     sync.Mutex
	boxes  map[string]*box
	closed bool
}

// New returns a Handler serving the sandboxes of b.
func New(b sandbox.Backend, opts Options) *Handler {
	opts = opts.withDefaults()
	h := &Handler{b: b, opts: opts, log: opts.Logger, boxes: map[string]*box{}, mux: http.NewServeMux()}
	copts := []connect.HandlerOption{connect.WithReadMaxBytes(opts.MaxMessageBytes)}
	// Each procedure by its path, so that any other falls to notServed.
	_, ph := processpbconnect.NewProcessHandler(&processService{h: h}, copts...)
	for _, p := range []string{processpbconnect.ProcessStartProcedure, processpbconnect.ProcessConnectProcedure,
		processpbconnect.ProcessListProcedure, processpbconnect.ProcessSendInputProcedure,
		processpbconnect.ProcessStreamInputProcedure, processpbconnect.ProcessSendSignalProcedure,
		processpbconnect.ProcessCloseStdinProcedure, processpbconnect.ProcessUpdateProcedure} {
		h.mux.Handle(p, ph)
	}
	_, fh := filesystempbconnect.NewFilesystemHandler(&filesystemService{h: h}, copts...)
	for _, p := range []string{filesystempbconnect.FilesystemStatProcedure, filesystempbconnect.FilesystemListDirProcedure,
		filesystempbconnect.FilesystemMakeDirProcedure, filesystempbconnect.FilesystemMoveProcedure,
		filesystempbconnect.FilesystemRemoveProcedure, filesystempbconnect.FilesystemWatchDirProcedure,
		filesystempbconnect.FilesystemCreateWatcherProcedure, filesystempbconnect.FilesystemGetWatcherEventsProcedure,
		filesystempbconnect.FilesystemRemoveWatcherProcedure} {
		h.mux.Handle(p, fh)
	}
	h.mux.HandleFunc("GET /files", h.download)
	h.mux.HandleFunc("POST /files", h.upload)
	h.mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	h.mux.HandleFunc("/", notServed)
	return h
}

type ctxKey struct{}

// ServeSandbox serves one in-sandbox request (Connect-RPC process and
// filesystem services, /files, /health) for an already-authenticated
// sandbox id.
func (h *Handler) ServeSandbox(w http.ResponseWriter, r *http.Request, sandboxID string) {
	ctx := withUser(context.WithValue(r.Context(), ctxKey{}, sandboxID), r)
	h.mux.ServeHTTP(w, r.WithContext(ctx))
}

// Forget kills and forgets the processes and watchers of a sandbox being
// killed. A later request for the same id starts afresh.
func (h *Handler) Forget(sandboxID string) {
	h.mu.Lock()
	bx := h.boxes[sandboxID]
	delete(h.boxes, sandboxID)
	h.mu.Unlock()
	if bx != nil {
		bx.close(true)
	}
}

// Close ends every stream and watcher and refuses requests from then on
// (unavailable). The sandboxes' commands go on: they are the sandboxes',
// and a handler started later finds them (a server stopping with
// --keep-sandboxes).
func (h *Handler) Close() {
	h.mu.Lock()
	boxes := h.boxes
	h.boxes, h.closed = map[string]*box{}, true
	h.mu.Unlock()
	for _, bx := range boxes {
		bx.close(false)
	}
}

// box returns the state of the sandbox a request is for, creating it;
// nil after Close.
func (h *Handler) box(ctx context.Context) *box {
	id, _ := ctx.Value(ctxKey{}).(string)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	bx := h.boxes[id]
	if bx == nil {
		bx = newBox(h, id)
		h.boxes[id] = bx
	}
	return bx
}

// notServed answers every path this package does not serve: a Connect
// unimplemented error for a procedure, 501 for the rest.
func notServed(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/")
	svc, method, ok := strings.Cut(path, "/")
	if ok && strings.Contains(svc, ".") && method != "" && !strings.Contains(method, "/") {
		writeConnectError(w, connect.CodeUnimplemented, "tent does not serve "+svc+"."+method)
		return
	}
	writeJSONError(w, http.StatusNotImplemented, "tent does not serve "+r.Method+" "+r.URL.Path)
}
