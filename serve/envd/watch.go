package envd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"

	"connectrpc.com/connect"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/serve/envd/filesystempb"
)

// watchRun is one running watch of a directory (Handle.Watch).
type watchRun struct {
	events chan *filesystempb.FilesystemEvent // closed when the watch ends
	err    error                              // why it ended; read after events is closed
	cancel context.CancelFunc                 // ends the watch
}

// eventTypes maps the watch's op names to envd's.
var eventTypes = map[string]filesystempb.EventType{
	"create": filesystempb.EventType_EVENT_TYPE_CREATE,
	"write":  filesystempb.EventType_EVENT_TYPE_WRITE,
	"remove": filesystempb.EventType_EVENT_TYPE_REMOVE,
	"rename": filesystempb.EventType_EVENT_TYPE_RENAME,
	"chmod":  filesystempb.EventType_EVENT_TYPE_CHMOD,
}

// startWatch starts watching path; it returns once the watch is in
// place (or failed). The watch lives until ctx ends or stop.
func (bx *box) startWatch(ctx context.Context, path string, recursive, entries bool) (*watchRun, error) {
	if entries {
		_, _ = bx.homeDir(ctx) // the user's name, for the entries' owner
	}
	wctx, cancel := context.WithCancel(ctx)
	hd, err := bx.handle(wctx)
	if err != nil {
		cancel()
		return nil, err
	}
	evs, err := hd.Watch(wctx, path, sandbox.WatchOptions{Recursive: recursive, Entries: entries})
	if err != nil {
		cancel()
		return nil, rpcError(err)
	}
	w := &watchRun{events: make(chan *filesystempb.FilesystemEvent), cancel: cancel}
	go func() {
		defer close(w.events)
		for ev := range evs { // until the watch is gone
			if ev.Err != nil {
				w.err = ev.Err
				continue
			}
			t, ok := eventTypes[ev.Op]
			if !ok {
				continue
			}
			fe := &filesystempb.FilesystemEvent{Name: ev.Name, Type: t}
			if ev.Info != nil {
				fe.Entry = bx.entryInfo(ctx, *ev.Info)
			}
			select {
			case w.events <- fe:
			case <-wctx.Done():
			}
		}
	}()
	return w, nil
}

// stop ends the watch.
func (w *watchRun) stop() { w.cancel() }

func (s *filesystemService) WatchDir(ctx context.Context, req *connect.Request[filesystempb.WatchDirRequest], stream *connect.ServerStream[filesystempb.WatchDirResponse]) error {
	bx, p, err := s.resolveFor(ctx, req.Msg.GetPath())
	if err != nil {
		return err
	}
	if err := bx.acquireStream(); err != nil {
		return err
	}
	defer bx.releaseStream()
	w, err := bx.startWatch(ctx, p, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry())
	if err != nil {
		return err
	}
	defer func() {
		w.stop()
		for range w.events { // until the helper is gone
		}
	}()
	if err := stream.Send(&filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Start{Start: &filesystempb.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	ka := newKeepalive(keepaliveInterval(req.Header()))
	defer ka.stop()
	for {
		select {
		case ev, ok := <-w.events:
			if !ok {
				if w.err != nil {
					return rpcError(w.err)
				}
				return nil
			}
			if err := stream.Send(&filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
				return err
			}
			ka.reset()
		case <-ka.c():
			if err := stream.Send(&filesystempb.WatchDirResponse{Event: &filesystempb.WatchDirResponse_Keepalive{Keepalive: &filesystempb.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
			ka.reset()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// watcher is a watch whose events a client polls (CreateWatcher).
type watcher struct {
	run    *watchRun
	cancel context.CancelFunc
	max    int

	mu      sync.Mutex
	events  []*filesystempb.FilesystemEvent
	dropped int
	err     error
	ended   bool
}

// collect queues the watch's events, at most w.max (beyond, the older
// half is dropped and counted), until it ends.
func (w *watcher) collect() {
	for ev := range w.run.events {
		w.mu.Lock()
		if len(w.events) >= w.max {
			// Drop the older half at once: a flood of events costs one
			// copy per max/2 events, not one per event.
			n := len(w.events) / 2
			w.events = append(w.events[:0], w.events[n:]...)
			w.dropped += n
		}
		w.events = append(w.events, ev)
		w.mu.Unlock()
	}
	w.mu.Lock()
	w.ended, w.err = true, w.run.err
	w.mu.Unlock()
}

func (w *watcher) stop() {
	w.run.stop()
	w.cancel()
}

func (s *filesystemService) CreateWatcher(ctx context.Context, req *connect.Request[filesystempb.CreateWatcherRequest]) (*connect.Response[filesystempb.CreateWatcherResponse], error) {
	bx, p, err := s.resolveFor(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if err := bx.acquireStream(); err != nil {
		return nil, err
	}
	// The watch outlives this request: RemoveWatcher or Forget ends it.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	run, err := bx.startWatch(wctx, p, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry())
	if err != nil {
		cancel()
		bx.releaseStream()
		return nil, err
	}
	// One event is about 200 bytes.
	w := &watcher{run: run, cancel: cancel, max: max(s.h.opts.OutputBufferBytes/200, 16)}
	go w.collect()
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	bx.mu.Lock()
	if bx.closed {
		bx.mu.Unlock()
		w.stop()
		return nil, errGone()
	}
	bx.watchers[id] = w
	bx.mu.Unlock()
	return connect.NewResponse(&filesystempb.CreateWatcherResponse{WatcherId: id}), nil
}

// watcherFor finds a watcher of the request's sandbox.
func (s *filesystemService) watcherFor(ctx context.Context, id string) (*box, *watcher, error) {
	bx, err := s.h.boxFor(ctx)
	if err != nil {
		return nil, nil, err
	}
	bx.mu.Lock()
	w := bx.watchers[id]
	bx.mu.Unlock()
	if w == nil {
		return nil, nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found", id))
	}
	return bx, w, nil
}

func (s *filesystemService) GetWatcherEvents(ctx context.Context, req *connect.Request[filesystempb.GetWatcherEventsRequest]) (*connect.Response[filesystempb.GetWatcherEventsResponse], error) {
	_, w, err := s.watcherFor(ctx, req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	events, dropped, ended, werr := w.events, w.dropped, w.ended, w.err
	w.events, w.dropped = nil, 0
	w.mu.Unlock()
	if dropped > 0 {
		s.h.log.Debug("watcher events dropped", "watcher", req.Msg.GetWatcherId(), "dropped", dropped)
	}
	if len(events) == 0 && ended && werr != nil {
		return nil, rpcError(werr)
	}
	return connect.NewResponse(&filesystempb.GetWatcherEventsResponse{Events: events}), nil
}

func (s *filesystemService) RemoveWatcher(ctx context.Context, req *connect.Request[filesystempb.RemoveWatcherRequest]) (*connect.Response[filesystempb.RemoveWatcherResponse], error) {
	bx, w, err := s.watcherFor(ctx, req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	bx.mu.Lock()
	removed := bx.watchers[req.Msg.GetWatcherId()] == w
	delete(bx.watchers, req.Msg.GetWatcherId())
	bx.mu.Unlock()
	if removed {
		w.stop()
		bx.releaseStream()
	}
	return connect.NewResponse(&filesystempb.RemoveWatcherResponse{}), nil
}
