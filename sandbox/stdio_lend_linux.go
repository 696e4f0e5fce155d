package sandbox

import (
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// A root caller's pipe is lent rather than relayed: relaying costs a
// third party in the pipeline (the relay) and its context switches,
// about twice bubblewrap's time for 100 MB. The pipe's owner (its
// inode's, which /proc/self/fd/N reopens check) becomes the sandbox's
// host user while any command of this process uses it, and is given back
// when the last one ends. While lent, the sandbox can reopen it for
// reading and writing, as any holder of a pipe owned by its user can —
// what bubblewrap gives an unprivileged caller's pipes. A pipe lent by a
// tent that is killed (SIGKILL) keeps the sandbox's user as its owner
// until it is gone.

// loan is one pipe lent to the sandbox's user, shared by the commands
// that use it at once.
type loan struct {
	key      [2]uint64 // device, inode
	fd       int       // a duplicate, to give the pipe back through
	uid, gid int       // the owner to give it back to
	users    int
}

// loans are the pipes this process has lent, by device and inode.
var loans = struct {
	sync.Mutex
	m map[[2]uint64]*loan
}{m: map[[2]uint64]*loan{}}

// lend gives the caller's pipe f to the sandbox's user when only its
// ownership keeps the command from reopening it (a root caller); it
// reports whether f can now be passed as it is.
func (s *stdio) lend(f *os.File) bool {
	if s.owner == nil || !s.owner.chown {
		return false
	}
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return false
	}
	key := [2]uint64{st.Dev, st.Ino}
	loans.Lock()
	defer loans.Unlock()
	l := loans.m[key]
	if l == nil {
		fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			return false
		}
		if unix.Fchown(fd, s.owner.uid, s.owner.gid) != nil {
			unix.Close(fd)
			return false
		}
		l = &loan{key: key, fd: fd, uid: int(st.Uid), gid: int(st.Gid)}
		loans.m[key] = l
	}
	l.users++
	s.loans = append(s.loans, l)
	return true
}

// giveBack ends one use of the loan; the last gives the pipe back to its
// owner.
func (l *loan) giveBack() {
	loans.Lock()
	defer loans.Unlock()
	if l.users--; l.users > 0 {
		return
	}
	_ = unix.Fchown(l.fd, l.uid, l.gid)
	unix.Close(l.fd)
	delete(loans.m, l.key)
}
