package supervised

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/tent-sandbox/tent/fs/files"
	"github.com/tent-sandbox/tent/internal/ctlmsg"
	"github.com/tent-sandbox/tent/sandbox"
)

// The file verbs over the socket: the client sends the verb and its
// arguments (request.Files); the supervisor calls the core's verb
// (sandbox.Sandbox.ReadFile, ...), which runs and decodes the file
// helper, and answers typed (reply.Info, Infos, Size, Event). A failure
// that carried an errno is an *os.PathError again on the caller's side.

// ReadFile streams the file at path to w (see sandbox.Sandbox.ReadFile).
// The supervisor writes it to a pipe of the caller's, once it has told
// its size (reply.Size); an error of w or opts.Size closes the pipe,
// which ends the read.
func (s *Sandbox) ReadFile(ctx context.Context, path string, w io.Writer, opts sandbox.ReadOptions) error {
	rec, err := s.dialRec()
	if err != nil {
		return err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pr.Close()
	conn, err := dial(rec)
	if err != nil {
		pw.Close()
		return err
	}
	defer conn.Close()
	err = ctlmsg.Send(conn, request{Op: opReadFile, Files: &fileArgs{Path: path, Read: sandbox.ReadOptions{Limit: opts.Limit}}}, []int{int(pw.Fd())})
	pw.Close()
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() {
		_ = conn.SetReadDeadline(aLongTimeAgo)
		_ = pr.SetReadDeadline(aLongTimeAgo)
	})
	defer stop()
	var rep reply
	_, rerr := ctlmsg.Recv(conn, &rep)
	if rerr == nil && rep.Size != nil {
		size := *rep.Size
		var ours error
		if opts.Size != nil {
			ours = opts.Size(size)
		}
		if ours == nil {
			sw := &sinkWriter{w: w}
			_, _ = io.CopyN(sw, pr, size) // short: the answer says why
			ours = sw.err
		}
		pr.Close() // on an error, the supervisor's writes fail
		rep = reply{}
		_, rerr = ctlmsg.Recv(conn, &rep)
		if ours != nil {
			return ours
		}
	}
	return s.fileAnswer(ctx, rec, rep, rerr)
}

// sinkWriter records its writer's error.
type sinkWriter struct {
	w   io.Writer
	err error
}

func (s *sinkWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if err != nil {
		s.err = err
	}
	return n, err
}

// WriteFile writes r to the file at path (see
// sandbox.Sandbox.WriteFile). r is framed here, in the caller's process
// (a regular file excepted, which the helper reads itself): a reader
// that fails or a caller killed mid-write leaves the helper an input
// without its end mark, and the file as it was.
func (s *Sandbox) WriteFile(ctx context.Context, path string, r io.Reader, opts sandbox.WriteOptions) (sandbox.FileInfo, error) {
	var fi sandbox.FileInfo
	rec, err := s.dialRec()
	if err != nil {
		return fi, err
	}
	var enc *files.FrameEncoder
	if f, isFile := r.(*os.File); r != nil && !opts.Framed && !isRegular(f, isFile) {
		enc = files.NewFrameEncoder(r)
		r, opts.Framed = enc, true
	}
	var st stdio
	defer st.close()
	in, err := st.in(r)
	if err != nil {
		return fi, err
	}
	conn, err := dial(rec)
	if err != nil {
		return fi, err
	}
	defer conn.Close()
	if err := ctlmsg.Send(conn, request{Op: opWriteFile, Files: &fileArgs{Path: path, Write: opts}}, []int{int(in.Fd())}); err != nil {
		return fi, err
	}
	st.sent()
	rep, rerr := recvFile(ctx, conn)
	if enc != nil && (rerr != nil || rep.Error != "") {
		if err := enc.SourceErr(); err != nil {
			op := "write"
			if opts.Parents {
				op = "put"
			}
			return fi, &os.PathError{Op: op, Path: path, Err: fmt.Errorf("reading the content: %w", err)}
		}
	}
	if err := s.fileAnswer(ctx, rec, rep, rerr); err != nil {
		return fi, err
	}
	if rep.Info != nil {
		fi = *rep.Info
	}
	return fi, nil
}

// isRegular tells whether f (isFile: r was an *os.File) is a regular
// file, which the helper reads itself.
func isRegular(f *os.File, isFile bool) bool {
	if !isFile {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode().IsRegular()
}

// Stat describes the file at path (see sandbox.Sandbox.Stat).
func (s *Sandbox) Stat(ctx context.Context, path string) (sandbox.FileInfo, error) {
	return s.infoCall(ctx, opStat, fileArgs{Path: path})
}

// Mkdir makes the directory at path (see sandbox.Sandbox.Mkdir).
func (s *Sandbox) Mkdir(ctx context.Context, path string) (sandbox.FileInfo, error) {
	return s.infoCall(ctx, opMkdir, fileArgs{Path: path})
}

// Rename renames from to to (see sandbox.Sandbox.Rename).
func (s *Sandbox) Rename(ctx context.Context, from, to string) (sandbox.FileInfo, error) {
	return s.infoCall(ctx, opRename, fileArgs{Path: from, To: to})
}

// ReadDir lists the directory at path (see sandbox.Sandbox.ReadDir).
func (s *Sandbox) ReadDir(ctx context.Context, path string, depth int) ([]sandbox.FileInfo, error) {
	rep, err := s.fileCall(ctx, opReadDir, fileArgs{Path: path, Depth: depth})
	return rep.Infos, err
}

// Remove deletes the file at path, or with all the tree (see
// sandbox.Sandbox.Remove).
func (s *Sandbox) Remove(ctx context.Context, path string, all bool) error {
	_, err := s.fileCall(ctx, opRemoveFile, fileArgs{Path: path, All: all})
	return err
}

// infoCall runs a verb that answers one FileInfo.
func (s *Sandbox) infoCall(ctx context.Context, op string, a fileArgs) (sandbox.FileInfo, error) {
	rep, err := s.fileCall(ctx, op, a)
	if err != nil || rep.Info == nil {
		return sandbox.FileInfo{}, err
	}
	return *rep.Info, nil
}

// fileCall sends one verb that passes no descriptor and returns its
// answer.
func (s *Sandbox) fileCall(ctx context.Context, op string, a fileArgs) (reply, error) {
	rec, err := s.dialRec()
	if err != nil {
		return reply{}, err
	}
	conn, err := dial(rec)
	if err != nil {
		return reply{}, err
	}
	defer conn.Close()
	if err := ctlmsg.Send(conn, request{Op: op, Files: &a}, nil); err != nil {
		return reply{}, err
	}
	rep, rerr := recvFile(ctx, conn)
	return rep, s.fileAnswer(ctx, rec, rep, rerr)
}

// recvFile receives a verb's answer, or ctx's end.
func recvFile(ctx context.Context, conn *net.UnixConn) (reply, error) {
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(aLongTimeAgo) })
	defer stop()
	var rep reply
	_, err := ctlmsg.Recv(conn, &rep)
	return rep, err
}

// fileAnswer is the error of a verb's answer rep (rerr: none came).
func (s *Sandbox) fileAnswer(ctx context.Context, rec *record, rep reply, rerr error) error {
	if rerr != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		return fmt.Errorf("sandbox %s: no answer from its supervisor: %w", rec.ID, rerr)
	}
	return fileError(rep)
}

// fileError is rep's failure: an *os.PathError again where it carried
// an errno and a path (nil without a failure).
func fileError(rep reply) error {
	if rep.Error == "" {
		return nil
	}
	if rep.Errno == 0 || rep.PathOp == "" {
		return remoteError(rep)
	}
	errno := syscall.Errno(rep.Errno)
	err := error(errno)
	if detail := strings.TrimSuffix(rep.PathErr, ": "+errno.Error()); detail != errno.Error() && detail != "" {
		err = fmt.Errorf("%s: %w", detail, errno)
	}
	return &os.PathError{Op: rep.PathOp, Path: rep.Path, Err: err}
}

// Watch watches the directory at path (see sandbox.Sandbox.Watch): the
// supervisor sends each event as an answer of its own, and ends the
// watch when the caller closes the connection (ctx's end).
func (s *Sandbox) Watch(ctx context.Context, path string, opts sandbox.WatchOptions) (<-chan sandbox.WatchEvent, error) {
	rec, err := s.dialRec()
	if err != nil {
		return nil, err
	}
	conn, err := dial(rec)
	if err != nil {
		return nil, err
	}
	if err := ctlmsg.Send(conn, request{Op: opWatch, Files: &fileArgs{Path: path, Watch: opts}}, nil); err != nil {
		conn.Close()
		return nil, err
	}
	rep, rerr := recvFile(ctx, conn) // the watch is in place, or failed
	if err := s.fileAnswer(ctx, rec, rep, rerr); err != nil {
		conn.Close()
		return nil, err
	}
	ch := make(chan sandbox.WatchEvent, watchBuffer)
	go func() {
		defer close(ch)
		defer conn.Close()
		stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(aLongTimeAgo) })
		defer stop()
		for {
			var rep reply
			_, err := ctlmsg.Recv(conn, &rep)
			ev := sandbox.WatchEvent{}
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				ev.Err = fmt.Errorf("sandbox %s: the watch's supervisor is gone: %w", rec.ID, err)
			case rep.Error != "":
				ev.Err = fileError(rep)
			case rep.Event == nil:
				return // the watch ended
			default:
				ev = *rep.Event
			}
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
			if ev.Err != nil {
				return
			}
		}
	}()
	return ch, nil
}

// watchBuffer is how many events a watch holds for a slow reader (the
// supervisor's writes wait beyond).
const watchBuffer = 64

// serveFile serves the file verbs; it reports whether req was one.
func (s *server) serveFile(conn *net.UnixConn, req request, files []*os.File) bool {
	switch req.Op {
	case opReadFile, opWriteFile, opStat, opReadDir, opMkdir, opRename, opRemoveFile, opWatch:
	default:
		return false
	}
	a := req.Files
	if a == nil {
		_ = ctlmsg.Send(conn, failure(fmt.Errorf("%w: %s needs its arguments", sandbox.ErrInvalidSpec, req.Op)), nil)
		return true
	}
	if (req.Op == opReadFile || req.Op == opWriteFile) != (len(files) == 1) {
		_ = ctlmsg.Send(conn, failure(fmt.Errorf("%w: %s takes %d descriptors", sandbox.ErrInvalidSpec, req.Op, len(files))), nil)
		return true
	}
	if req.Op == opWatch {
		s.serveWatch(conn, *a)
		return true
	}
	ctx := context.Background()
	sb := s.sb
	var rep reply
	var err error
	switch req.Op {
	case opReadFile:
		a.Read.Size = func(n int64) error { return ctlmsg.Send(conn, reply{Size: &n}, nil) }
		err = sb.ReadFile(ctx, a.Path, files[0], a.Read)
	case opWriteFile:
		var fi sandbox.FileInfo
		fi, err = sb.WriteFile(ctx, a.Path, files[0], a.Write)
		rep.Info = &fi
	case opStat, opMkdir, opRename:
		var fi sandbox.FileInfo
		switch req.Op {
		case opStat:
			fi, err = sb.Stat(ctx, a.Path)
		case opMkdir:
			fi, err = sb.Mkdir(ctx, a.Path)
		default:
			fi, err = sb.Rename(ctx, a.Path, a.To)
		}
		rep.Info = &fi
	case opReadDir:
		rep.Infos, err = sb.ReadDir(ctx, a.Path, a.Depth)
	case opRemoveFile:
		err = sb.Remove(ctx, a.Path, a.All)
	}
	if err != nil {
		rep = failure(err)
	}
	_ = ctlmsg.Send(conn, rep, nil)
	return true
}

// serveWatch runs a watch until its caller closes the connection: an
// answer once it is in place, one per event, then one to end it.
func (s *server) serveWatch(conn *net.UnixConn, a fileArgs) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		var none request
		_, _ = ctlmsg.Recv(conn, &none) // the caller sends nothing more: its close
		cancel()
	}()
	events, err := s.sb.Watch(ctx, a.Path, a.Watch)
	if err != nil {
		_ = ctlmsg.Send(conn, failure(err), nil)
		return
	}
	defer func() {
		cancel()
		for range events { // until the helper is gone
		}
	}()
	if ctlmsg.Send(conn, reply{}, nil) != nil {
		return
	}
	for ev := range events {
		rep := reply{Event: &ev}
		if ev.Err != nil {
			rep = failure(ev.Err)
		}
		if ctlmsg.Send(conn, rep, nil) != nil || ev.Err != nil {
			return
		}
	}
	_ = ctlmsg.Send(conn, reply{}, nil)
}
