package envd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/serve/envd/filesystempb"
)

// box is what the handler holds for one sandbox: what it knows of its
// commands (see cmd), its watchers and the bounds on both.
type box struct {
	h       *Handler
	id      string
	hd      sandbox.Handle // opened at first use; guarded by mu
	fileSem chan struct{}
	startMu sync.Mutex    // one Start at a time: the bounds hold
	done    chan struct{} // closed when the box is forgotten

	mu       sync.Mutex
	closed   bool
	cmds     map[int]*cmd
	seq      uint64 // of the last cmd recorded
	streams  int
	watchers map[string]*watcher
	home     string   // the sandbox user's $HOME, once read
	user     identity // the sandbox user, read with home
	rootHome bool     // /root is a directory, read with home
}

// identity is the sandbox user's uid, gid and name ($USER): what file
// entries owned by them are reported as, since the sandbox's /etc/passwd
// (the host's) may name that uid differently or not at all.
type identity struct {
	uid, gid int
	name     string
}

func newBox(h *Handler, id string) *box {
	return &box{h: h, id: id, fileSem: make(chan struct{}, h.opts.MaxFileOps), done: make(chan struct{}), cmds: map[int]*cmd{},
		watchers: map[string]*watcher{}}
}

// handle returns the handle on the box's sandbox, opened at its first use.
func (bx *box) handle(ctx context.Context) (sandbox.Handle, error) {
	bx.mu.Lock()
	hd := bx.hd
	bx.mu.Unlock()
	if hd != nil {
		return hd, nil
	}
	hd, err := bx.h.b.Open(ctx, bx.id)
	if err != nil {
		return nil, err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if bx.hd == nil {
		bx.hd = hd
	}
	return bx.hd, nil
}

// info describes the box's sandbox now.
func (bx *box) info(ctx context.Context) (sandbox.Info, error) {
	hd, err := bx.handle(ctx)
	if err != nil {
		return sandbox.Info{}, err
	}
	return hd.Info(ctx)
}

// exec runs req in the box's sandbox and waits for it.
func (bx *box) exec(ctx context.Context, req sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	hd, err := bx.handle(ctx)
	if err != nil {
		return nil, err
	}
	return hd.Exec(ctx, req)
}

// isClosed reports whether the box was forgotten (its sandbox killed).
func (bx *box) isClosed() bool {
	bx.mu.Lock()
	defer bx.mu.Unlock()
	return bx.closed
}

// ended reports whether the sandbox has been killed or has ended: asked
// when a command fails to run, to tell its own failure from its
// sandbox's end.
func (bx *box) ended(ctx context.Context) bool {
	if bx.isClosed() {
		return true
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	info, err := bx.info(ctx)
	switch {
	case errors.Is(err, sandbox.ErrNotFound), errors.Is(err, sandbox.ErrTerminated), errors.Is(err, sandbox.ErrStopped):
		return true
	case err != nil:
		return false
	}
	return info.State != sandbox.StateRunning && info.State != sandbox.StateSuspended
}

// waitRunning waits while the sandbox is paused: true once it runs
// again, false when ctx ends, the box is forgotten or the sandbox ends.
func (bx *box) waitRunning(ctx context.Context) bool {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		if bx.isClosed() {
			return false
		}
		info, err := bx.info(ctx)
		switch {
		case err != nil:
			return false
		case info.State == sandbox.StateRunning:
			return true
		case info.State != sandbox.StateSuspended:
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// errGone is the error of a request for a sandbox being forgotten.
func errGone() error {
	return connect.NewError(connect.CodeUnavailable, errors.New("the sandbox is being killed"))
}

// boxFor returns the box of the request's sandbox, or errGone after
// Close.
func (h *Handler) boxFor(ctx context.Context) (*box, error) {
	if bx := h.box(ctx); bx != nil {
		return bx, nil
	}
	return nil, errGone()
}

// close ends the streams of the box's commands and stops its watchers;
// with kill (the sandbox is being killed) it also kills the commands it
// knows, and waits a while for their end.
func (bx *box) close(kill bool) {
	bx.mu.Lock()
	if bx.closed {
		bx.mu.Unlock()
		return
	}
	bx.closed = true
	close(bx.done)
	pids := make([]int, 0, len(bx.cmds))
	for pid := range bx.cmds {
		pids = append(pids, pid)
	}
	watchers := make([]*watcher, 0, len(bx.watchers))
	for _, w := range bx.watchers {
		watchers = append(watchers, w)
	}
	bx.cmds, bx.watchers = map[int]*cmd{}, map[string]*watcher{}
	hd := bx.hd
	bx.mu.Unlock()
	for _, w := range watchers {
		w.stop()
	}
	if kill && hd != nil {
		killAll(hd, pids)
	}
}

// acquireStream takes one of the sandbox's stream slots.
func (bx *box) acquireStream() error {
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if bx.closed {
		return errGone()
	}
	if bx.streams >= bx.h.opts.MaxStreams {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("the sandbox has %d streams and watchers open, its limit", bx.streams))
	}
	bx.streams++
	return nil
}

func (bx *box) releaseStream() {
	bx.mu.Lock()
	bx.streams--
	bx.mu.Unlock()
}

// files runs f on the box's sandbox, waiting for one of its
// file-operation slots.
func (bx *box) files(ctx context.Context, f func(sandbox.Handle) error) error {
	select {
	case bx.fileSem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-bx.fileSem }()
	hd, err := bx.handle(ctx)
	if err != nil {
		return err
	}
	return f(hd)
}

// resolve makes p absolute as envd does: "~" and "~/..." are beneath
// the sandbox user's $HOME, and so is a relative path; "" is $HOME.
func (bx *box) resolve(ctx context.Context, p string) (string, error) {
	if strings.HasPrefix(p, "/") {
		return path.Clean(p), nil
	}
	if strings.ContainsRune(p, 0) {
		return "", connect.NewError(connect.CodeInvalidArgument, errors.New("the path holds a NUL byte"))
	}
	rest := p
	if p == "~" {
		rest = ""
	} else if strings.HasPrefix(p, "~/") {
		rest = p[2:]
	} else if strings.HasPrefix(p, "~") {
		return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %q: only the sandbox's own user (~) is known", p))
	}
	home := rootHome
	if !asRoot(ctx) {
		var err error
		if home, err = bx.homeDir(ctx); err != nil {
			return "", err
		}
	}
	return path.Join(home, rest), nil
}

// homeDir reads the sandbox user's $HOME once ("/" when unset).
func (bx *box) homeDir(ctx context.Context) (string, error) {
	bx.mu.Lock()
	home := bx.home
	bx.mu.Unlock()
	if home != "" {
		return home, nil
	}
	res, err := bx.exec(ctx, sandbox.ExecRequest{Args: []string{"/bin/sh", "-c", `printf '%s\n%s\n%s\n%s\n%s' "$HOME" "$(id -u)" "$(id -g)" "$USER" "$(test -d /root && echo y)"`}, Stderr: io.Discard, MaxOutput: 4096})
	user := identity{uid: -1, gid: -1}
	rootHome := false
	switch {
	case errors.Is(err, sandbox.ErrCommandNotFound), errors.Is(err, sandbox.ErrNotExecutable):
		home = "/" // no shell to ask
	case err != nil:
		return "", rpcError(err)
	default:
		lines := strings.Split(string(res.Stdout), "\n")
		home = lines[0]
		if res.ExitCode != 0 || !strings.HasPrefix(home, "/") {
			home = "/"
		}
		rootHome = len(lines) == 5 && lines[4] == "y"
		if len(lines) == 5 {
			uid, uerr := strconv.Atoi(lines[1])
			gid, gerr := strconv.Atoi(lines[2])
			if uerr == nil && gerr == nil && lines[3] != "" {
				user = identity{uid: uid, gid: gid, name: lines[3]}
			}
		}
	}
	home = path.Clean(home)
	bx.mu.Lock()
	bx.home, bx.user, bx.rootHome = home, user, rootHome
	bx.mu.Unlock()
	return home, nil
}

// hasRootHome reports whether the sandbox has a /root directory, the
// working directory of commands run as root.
func (bx *box) hasRootHome(ctx context.Context) bool {
	if _, err := bx.homeDir(ctx); err != nil {
		return false
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	return bx.rootHome
}

// entryInfo is envd's EntryInfo of fi: its owner and group named as the
// sandbox user ($USER, whose group E2B names alike) when they are its
// ids.
func (bx *box) entryInfo(ctx context.Context, fi sandbox.FileInfo) *filesystempb.EntryInfo {
	e := entryInfo(fi)
	if _, err := bx.homeDir(ctx); err == nil {
		bx.mu.Lock()
		user := bx.user
		bx.mu.Unlock()
		if asRoot(ctx) && user.name != "" {
			// In root's view (its nested user namespace) the sandbox
			// user's files are root's.
			user.name = rootUser
		}
		if user.name != "" && fi.UID == user.uid {
			e.Owner = user.name
		}
		if user.name != "" && fi.GID == user.gid {
			e.Group = user.name
		}
	}
	return e
}
