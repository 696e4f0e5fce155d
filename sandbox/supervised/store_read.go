//go:build linux

package supervised

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/sandbox"
)

// maxRecordSize bounds what is read of a record: tent's are a few KiB
// (the spec, with its environment, mounts and rules).
const maxRecordSize = 16 << 20

// openDir opens the state directory without following a symlink and
// checks the directory it opened as checkDir does (see
// [ErrUnsafeStateDir]): records are read, written and removed beneath
// this descriptor, so that what is acted on is in what was checked. A
// missing directory fails with an error matching os.ErrNotExist.
func (s stateDir) openDir() (*os.File, error) {
	fd, err := unix.Open(s.Dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.EINTR {
		fd, err = unix.Open(s.Dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		if err == unix.ELOOP || err == unix.ENOTDIR {
			if cerr := s.checkDir(); cerr != nil {
				return nil, cerr
			}
		}
		return nil, &os.PathError{Op: "open", Path: s.Dir, Err: err}
	}
	d := os.NewFile(uintptr(fd), s.Dir)
	fi, err := d.Stat()
	if err == nil {
		err = checkStateDirInfo(s.Dir, fi, os.Geteuid())
	}
	if err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// dirFD is d's descriptor, for the *at system calls (d stays open, in
// blocking mode, as a directory's descriptor always is).
func dirFD(d *os.File) int { return int(d.Fd()) }

// load reads the record of id as saved, without reconciling its state.
func (s stateDir) load(id string) (*record, error) {
	var r record
	if err := s.decode(id, &r, &r.ID); err != nil {
		return nil, err
	}
	r.Socket = s.SocketPath(id) // never where a record points
	return &r, nil
}

// head reads what of id's record dialing its supervisor needs (its id,
// state and supervisor, and the socket; the rest of the record is
// zero), reconciled as Get reconciles a record.
func (s stateDir) head(id string) (*record, error) {
	var h recordHead
	if err := s.decode(id, &h, &h.ID); err != nil {
		return nil, err
	}
	r := &record{recordHead: h, Socket: s.SocketPath(id)}
	r.reconcile()
	return r, nil
}

// decode reads the record of id into v, whose id field is *got, and
// checks that the record names id. A record that is missing fails with
// an error matching os.ErrNotExist; one that is there but cannot be read
// with a [*RecordError].
func (s stateDir) decode(id string, v any, got *string) error {
	if !validID(id) {
		return fmt.Errorf("%w: %q is not a sandbox id", sandbox.ErrNotFound, id)
	}
	d, err := s.openDir()
	if err != nil {
		return err
	}
	defer d.Close()
	return s.decodeAt(d, id, v, got)
}

// decodeAt is decode beneath the state directory's descriptor d.
func (s stateDir) decodeAt(d *os.File, id string, v any, got *string) error {
	b, err := readRecord(d, id)
	if errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err == nil {
		if err = json.Unmarshal(b, v); err == nil && *got != id {
			err = fmt.Errorf("it names sandbox %q", *got)
		}
	}
	if err != nil {
		return &RecordError{ID: id, Path: s.path(id), Err: err}
	}
	return nil
}

// readRecord reads the record of id beneath the state directory's
// descriptor d: a regular file (a symlink is not followed, a directory,
// a FIFO or a device is not read) of at most maxRecordSize bytes. A
// missing record fails with an error matching os.ErrNotExist.
func readRecord(d *os.File, id string) ([]byte, error) {
	name := id + ".json"
	fd, err := unix.Openat(dirFD(d), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	for err == unix.EINTR {
		fd, err = unix.Openat(dirFD(d), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	}
	switch {
	case err == unix.ELOOP:
		return nil, errors.New("it is a symlink (never followed)")
	case err == unix.ENOENT:
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	case err != nil:
		return nil, os.NewSyscallError("open", err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	switch {
	case fi.IsDir():
		return nil, errors.New("it is a directory")
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("it is not a regular file (%s)", fi.Mode().Type())
	case fi.Size() > maxRecordSize:
		return nil, fmt.Errorf("it has %d bytes, more than a record may (%d)", fi.Size(), maxRecordSize)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxRecordSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxRecordSize {
		return nil, fmt.Errorf("it has more bytes than a record may (%d)", maxRecordSize)
	}
	return b, nil
}

// List reads every record, oldest first, reconciling each one's state
// with its supervisor: a record whose supervisor is gone reads "stopped".
// A record that cannot be read does not stop the others: it is returned
// in broken (by id), as a [*RecordError].
//
// The directory must be the caller's (see [ErrUnsafeStateDir]); files
// not named after a sandbox id (16 hex digits) are not records, and a
// record must name the id of its file.
func (s stateDir) List() (recs []*record, broken []*RecordError, err error) {
	d, err := s.openDir()
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, nil, err
	}
	for _, n := range names {
		id, ok := strings.CutSuffix(n, ".json")
		if !ok || !validID(id) {
			continue
		}
		var r record
		err := s.decodeAt(d, id, &r, &r.ID)
		var re *RecordError
		switch {
		case errors.As(err, &re):
			broken = append(broken, re)
			continue
		case errors.Is(err, os.ErrNotExist):
			continue // removed meanwhile
		case err != nil:
			return nil, nil, err
		}
		r.Socket = s.SocketPath(id)
		r.reconcile()
		recs = append(recs, &r)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Created.Before(recs[j].Created) })
	sort.Slice(broken, func(i, j int) bool { return broken[i].ID < broken[j].ID })
	return recs, broken, nil
}

// Get finds a record by exact id, exact name or unique id prefix.
//
// An exact id always wins (ids are unique). Otherwise every sandbox whose
// name equals ref or whose id starts with ref matches, and more than one
// match is refused with [ErrAmbiguous] naming them all: a lookup is never
// resolved to the first match, so that tent exec or tent rm cannot act
// on a sandbox the caller did not mean. Names are unique per state
// directory (tent create refuses a second one; see [stateDir.NameInUse]),
// but records written by older versions may share one.
//
// A broken record (see [RecordError]) is matched by its id or an id
// prefix, never by name (its name is unknown); the one match being
// broken fails with its *RecordError.
func (s stateDir) Get(ref string) (*record, error) {
	if ref == "" {
		return nil, fmt.Errorf("%w: empty id", sandbox.ErrNotFound)
	}
	if validID(ref) {
		// An exact id wins, and names never have an id's shape: read that
		// one record rather than every one.
		r, err := s.load(ref)
		if err == nil {
			r.reconcile()
			return r, nil
		}
		if !errors.Is(err, os.ErrNotExist) || errors.As(err, new(*RecordError)) {
			return nil, err
		}
	}
	all, broken, err := s.List()
	if err != nil {
		return nil, err
	}
	var matches []*record
	var names []string
	for _, r := range all {
		if r.ID == ref {
			return r, nil
		}
		if r.Name == ref || strings.HasPrefix(r.ID, ref) {
			matches = append(matches, r)
			n := r.ID
			if r.Name != "" {
				n += " (" + r.Name + ")"
			}
			names = append(names, n)
		}
	}
	var brokenMatch *RecordError
	for _, b := range broken {
		if strings.HasPrefix(b.ID, ref) {
			brokenMatch = b
			names = append(names, b.ID+" (broken record)")
		}
	}
	switch len(names) {
	case 0:
		return nil, fmt.Errorf("%w: %q (see tent ls)", sandbox.ErrNotFound, ref)
	case 1:
		if brokenMatch != nil {
			return nil, brokenMatch
		}
		return matches[0], nil
	}
	sort.Strings(names)
	return nil, fmt.Errorf("%w: %q matches %d sandboxes: %s; use a full id", sandbox.ErrAmbiguous, ref, len(names), strings.Join(names, ", "))
}

// NameInUse returns the record of the sandbox named name, or nil when no
// sandbox has that name. A stopped sandbox keeps its name until it is
// removed. Broken records (see [RecordError]) are not looked at: their
// names cannot be read.
func (s stateDir) NameInUse(name string) (*record, error) {
	all, _, err := s.List()
	if err != nil {
		return nil, err
	}
	for _, r := range all {
		if r.Name == name {
			return r, nil
		}
	}
	return nil, nil
}
