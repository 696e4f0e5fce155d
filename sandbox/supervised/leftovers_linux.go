package supervised

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs/layer"
	"github.com/tent-sandbox/tent/internal/ctlmsg"
	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/sandbox/internal/handoff"
	"github.com/tent-sandbox/tent/sandbox/secretstore"
)

// What is left in the state directory of a sandbox without a readable
// record, and how it is removed.
//
// A sandbox's files are named after its id: the record ID.json, the
// supervisor's socket ID.sock and log ID.log, the temporaries of a
// record being saved .ID.N.tmp (see recordTemps; N is hex digits, or
// decimal ones of older tents) and, in snapshots/, those of a snapshot
// being taken. Two kinds of sandbox have files but no readable record:
//
//   - one whose record is broken (see [RecordError]): its supervisor may
//     still run. It is found through ID.sock (opened without following a
//     symlink, beneath the state directory's descriptor): the process
//     that listens there (SO_PEERCRED, pinned by SO_PEERPIDFD) is asked
//     to remove its sandbox, which it does as for any tent rm (its
//     processes, cgroups and cow layers; it knows them, its record is in
//     its memory), and is killed if it does not answer or does not exit;
//     then every file of the id goes ([Backend.removeBroken]).
//   - one whose create or fork was killed before its record was saved:
//     its log, perhaps its socket. Its creator takes an exclusive lock
//     (flock) on ID.log before it starts the supervisor, which inherits
//     it as its stdout and stderr and holds it until it exits (the lock
//     is the open file's, and the idle holder keeps it across its execs).
//     So files of an id without a record whose log nobody holds the lock
//     on belong to no live creator or supervisor, and go
//     ([stateDir.sweep], run by every create and fork and by tent rm
//     --all); a create in progress holds its lock and is never touched.

// logLockWait bounds how long a creator waits for the lock on its log
// while something else holds it: a sweep holds it for a few unlinks.
var logLockWait = 5 * time.Second

// openLog creates (or opens, for a stopped sandbox resumed under its id)
// the log of sandbox id and takes the exclusive lock on it that tells a
// sweep its sandbox is being created (see above). The caller passes it to
// the supervisor as its stdout and stderr, and closes its own copy.
func openLog(st stateDir, id string) (*os.File, error) {
	path := logPath(st, id)
	deadline := time.Now().Add(logLockWait)
	for {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, err
		}
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		for err == unix.EINTR {
			err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		}
		if err == nil {
			// A sweep that took the lock first may have removed the file
			// this descriptor opened: then open it again.
			if sameFile(f, path) {
				return f, nil
			}
			f.Close()
			continue
		}
		f.Close()
		if err != unix.EWOULDBLOCK {
			return nil, &os.PathError{Op: "flock", Path: path, Err: err}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the log %s of sandbox %s is held by another process (a supervisor of it still runs?)", path, id)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sameFile reports whether path (not followed) names the file f opened.
func sameFile(f *os.File, path string) bool {
	var a, b unix.Stat_t
	if unix.Fstat(int(f.Fd()), &a) != nil || unix.Lstat(path, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// leftoverID returns the sandbox id a file of the state directory
// belongs to when it is one of a sandbox's files other than its record:
// ID.log, ID.sock, .ID.N.tmp (see recordTemps).
func leftoverID(name string) string {
	for _, suffix := range []string{".log", ".sock"} {
		if id, ok := strings.CutSuffix(name, suffix); ok && validID(id) {
			return id
		}
	}
	if len(name) > 17 && validID(name[1:17]) && recordTemps(name[1:17]).Match(name) {
		return name[1:17]
	}
	return ""
}

// sweep removes the files of the sandboxes that have no record and no
// live creator or supervisor (see above). It reads the directory once;
// only an id with files and no record costs more (a lock tried).
func (s stateDir) sweep() error {
	d, err := s.openDir()
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	records := map[string]bool{}
	files := map[string][]string{}
	for _, n := range names {
		if id, ok := strings.CutSuffix(n, ".json"); ok && validID(id) {
			records[id] = true
		} else if id := leftoverID(n); id != "" {
			files[id] = append(files[id], n)
		}
	}
	var errs []error
	for id, its := range files {
		if !records[id] {
			errs = append(errs, s.sweepID(d, id, its))
		}
	}
	return errors.Join(errs...)
}

// sweepID removes the files of id (names in the state directory d),
// which had no record, unless a creator or supervisor holds its log's
// lock, or, without a log, listens on its socket.
func (s stateDir) sweepID(d *os.File, id string, names []string) error {
	lock, held := lockLog(d, id)
	if held {
		return nil
	}
	if lock != nil {
		defer lock.Close()
	} else if listening(d, id) {
		return nil // a supervisor without its log: not ours to judge
	}
	// No record appeared meanwhile: a supervisor saves one only while it
	// holds the lock.
	if _, err := fstatat(d, id+".json"); !errors.Is(err, unix.ENOENT) {
		return nil
	}
	var errs []error
	for _, n := range names {
		if err := layer.RemoveBeneath(dirFD(d), n); err != nil {
			errs = append(errs, err)
		}
	}
	handoff.RemoveSnapshotTemps(s.SnapshotsDir(), id)
	_ = secretstore.Open(s.Dir).DeleteScope(id) // values given for it alone (a refused store is reported where it is used)
	return errors.Join(errs...)
}

// lockLog tries the lock on id's log beneath d: held is true when
// another open file holds it (a creator, a supervisor); otherwise lock,
// when not nil, holds it until closed. A log that is missing or is not a
// regular file (no supervisor makes such a thing) is no one's lock.
func lockLog(d *os.File, id string) (lock *os.File, held bool) {
	fd, err := unix.Openat(dirFD(d), id+".log", unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	f := os.NewFile(uintptr(fd), id+".log")
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, false
	}
	err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	for err == unix.EINTR {
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	}
	if err != nil {
		f.Close()
		return nil, err == unix.EWOULDBLOCK
	}
	return f, false
}

// fstatat stats name beneath d without following a symlink.
func fstatat(d *os.File, name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Fstatat(dirFD(d), name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

// listening reports whether a process listens on id's socket beneath d.
func listening(d *os.File, id string) bool {
	conn, err := dialAt(d, id)
	if conn != nil {
		conn.Close()
	}
	return err == nil && conn != nil
}

// dialAt connects to the socket ID.sock beneath d: opened without
// following a symlink (O_PATH), checked to be a socket, and connected to
// through its descriptor. A missing file, one that is not a socket, or a
// socket nobody listens on is nil, nil.
func dialAt(d *os.File, id string) (*net.UnixConn, error) {
	fd, err := unix.Openat(dirFD(d), id+".sock", unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil // missing, or a symlink: nothing listens there
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, nil
	}
	conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: "/proc/self/fd/" + strconv.Itoa(fd), Net: "unixpacket"})
	if err != nil {
		var errno unix.Errno
		if errors.As(err, &errno) && (errno == unix.ECONNREFUSED || errno == unix.ENOENT || errno == unix.EPROTOTYPE) {
			return nil, nil
		}
		return nil, err
	}
	return conn, nil
}

// peerPidfd returns a pidfd of the process that listens at the other end
// of conn, its pid and uid: the one SO_PEERPIDFD gives (Linux 6.5),
// else one opened on SO_PEERCRED's pid and checked to be a supervisor's
// program (its argv[0]), so that a pid recycled meanwhile is not taken
// for it.
func peerPidfd(conn *net.UnixConn) (pidfd, pid int, uid uint32, err error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return -1, 0, 0, err
	}
	var cred *unix.Ucred
	var cerr error
	pidfd = -1
	err = raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if cerr == nil {
			if p, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD); err == nil {
				pidfd = p
			}
		}
	})
	if err == nil {
		err = cerr
	}
	if err != nil {
		return -1, 0, 0, err
	}
	if cred.Pid <= 0 {
		if pidfd >= 0 {
			unix.Close(pidfd)
		}
		return -1, 0, 0, errors.New("the process listening on it is in another pid namespace")
	}
	if pidfd < 0 {
		if pidfd, err = unix.PidfdOpen(int(cred.Pid), 0); err != nil {
			return -1, 0, 0, os.NewSyscallError("pidfd_open", err)
		}
		if !isSupervisor(int(cred.Pid), pidfd) {
			unix.Close(pidfd)
			return -1, 0, 0, fmt.Errorf("the process listening on it (pid %d) is no supervisor", cred.Pid)
		}
	}
	return pidfd, int(cred.Pid), cred.Uid, nil
}

// isSupervisor reports whether the process of pid (pidfd open on it) runs
// a supervisor's program, by its argv[0]. An idle supervisor's holder
// that the connection woke is exec'ing the supervisor again: while the
// kernel sets up the new image its cmdline may read empty (seen on 6.1,
// which has no SO_PEERPIDFD), so an argv[0] that is no supervisor's is
// read again while the process lives, for a bounded time (a pid recycled meanwhile cannot be the pidfd's process,
// which is alive).
func isSupervisor(pid, pidfd int) bool {
	deadline := time.Now().Add(5 * time.Second)
	for {
		arg0, _, _ := strings.Cut(readCmdline(pid), "\x00")
		if arg0 == modeSupervise || arg0 == modeResume || arg0 == namespaces.IdleSupervisorArg0 {
			return true
		}
		if time.Now().After(deadline) || unix.PidfdSendSignal(pidfd, 0, nil, 0) != nil {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// readCmdline reads /proc/PID/cmdline (its first 4 KiB).
func readCmdline(pid int) string {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return ""
	}
	defer f.Close()
	b := make([]byte, 4096)
	n, _ := f.Read(b)
	return string(b[:n])
}

// exited waits, d at most, for the process of pidfd to exit, and
// reports whether it did.
func exited(pidfd int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		ms := max(0, int(time.Until(deadline)/time.Millisecond))
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}, ms)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n > 0
	}
}

// removeBroken removes sandbox id, whose record cannot be read (see
// [RecordError]): its supervisor, when one listens on its socket, is
// asked to remove its sandbox (it tears it down as for any removal, and
// removes its files) and killed if it does not answer or exit; then
// every file of the id goes. What a supervisor that is gone left and
// only its record named (cow layers, cgroups) cannot be found without
// it: the cgroups, empty, go with the next sandbox's stale cgroup sweep.
func (b *Backend) removeBroken(ctx context.Context, id string) error {
	d, err := b.st.openDir()
	if err != nil {
		return err
	}
	defer d.Close()
	if err := b.stopSupervisorAt(ctx, d, id); err != nil {
		return fmt.Errorf("sandbox %s (broken record): %w", id, err)
	}
	var errs []error
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, n := range names {
		if n == id+".json" || leftoverID(n) == id {
			if err := layer.RemoveBeneath(dirFD(d), n); err != nil {
				errs = append(errs, err)
			}
		}
	}
	handoff.RemoveSnapshotTemps(b.st.SnapshotsDir(), id)
	return errors.Join(errs...)
}

// stopSupervisorAt ends the supervisor listening on id's socket beneath
// d, if one does (see removeBroken).
func (b *Backend) stopSupervisorAt(ctx context.Context, d *os.File, id string) error {
	conn, err := dialAt(d, id)
	if err != nil {
		return fmt.Errorf("reaching its supervisor: %w", err)
	}
	if conn == nil {
		return nil // no supervisor: nothing runs
	}
	defer conn.Close()
	pidfd, pid, uid, err := peerPidfd(conn)
	if err != nil {
		return err
	}
	defer unix.Close(pidfd)
	if euid := uint32(os.Geteuid()); uid != euid {
		return fmt.Errorf("the process listening on its socket (pid %d) is uid %d's, not yours (uid %d): not touched", pid, uid, euid)
	}
	// Ask first: the supervisor knows what its sandbox holds. (An idle
	// holder woken by the connection execs the supervisor, which cannot
	// read its record and tears its sandbox down.)
	rctx, cancel := context.WithTimeout(ctx, removeAnswerTimeout)
	defer cancel()
	if dl, ok := rctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if ctlmsg.Send(conn, request{Op: opRemove}, nil) == nil {
		var rep reply
		got, _ := ctlmsg.Recv(conn, &rep)
		ctlmsg.Close(got)
	}
	// Answered or not, it may be tearing down (the woken holder does,
	// without answering): it gets the time a removal gets to exit.
	if exited(pidfd, removeAnswerTimeout) {
		return nil
	}
	b.log.Warn("the supervisor of a sandbox with a broken record did not exit: killing it", "id", id, "pid", pid)
	if err := unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0); err != nil && err != unix.ESRCH {
		return os.NewSyscallError("pidfd_send_signal", err)
	}
	if !exited(pidfd, removeAnswerTimeout) {
		return fmt.Errorf("its supervisor (pid %d) did not exit after SIGKILL", pid)
	}
	return nil
}
