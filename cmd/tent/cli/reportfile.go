package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/atomicfile"
	"github.com/tent-sandbox/tent/sandbox"
)

// reportDest is where --report goes, settled before the command runs.
//
// The report's path may lie in a directory the command can write (an rw
// mount): by the end of the run the command may have put a symlink, a
// FIFO or another directory there. So the destination is opened while
// the path is still the caller's: its directory as a descriptor, or, for
// a path that already is something other than a regular file
// (/dev/stdout, a FIFO the caller reads, a terminal), that file itself.
// At the end a regular-file report is written to a new file in the held
// directory (atomicfile: O_CREAT|O_EXCL|O_NOFOLLOW) and renamed over the
// name, which replaces whatever the command put there and never follows
// it.
type reportDest struct {
	file *os.File // "-" or a non-regular file: written in place
	dir  *os.File // else: the directory the report is renamed into
	base string
}

// openReport settles the destination of path ("-" is standard output).
func openReport(path string) (*reportDest, error) {
	if path == "-" {
		return &reportDest{file: os.Stdout}, nil
	}
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		if fi.IsDir() {
			return nil, fmt.Errorf("%s is a directory", path)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return nil, err
		}
		return &reportDest{file: f}, nil
	}
	dir, err := os.OpenFile(filepath.Dir(path), oPath|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &reportDest{dir: dir, base: filepath.Base(path)}, nil
}

// write writes the report and releases the destination.
func (d *reportDest) write(rep *sandbox.Report) (err error) {
	defer d.close()
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if d.file != nil {
		_, err = d.file.Write(data)
		return err
	}
	// atomicfile: a temporary beside it, locked while written, 0644
	// whatever the umask, fsync'd and renamed over the name; the
	// temporaries a killed report left in the directory go first.
	dirfd := int(d.dir.Fd())
	_, _ = reportTemps.Clean(dirfd)
	return atomicfile.WriteFileAt(dirfd, d.base, 0o644, reportTemps, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// reportTemps names the temporaries of --report files.
var reportTemps = atomicfile.Options{Prefix: ".tent-report-", Suffix: ".tmp"}

// close releases the destination without writing.
func (d *reportDest) close() {
	if d.file != nil && d.file != os.Stdout {
		d.file.Close()
	}
	if d.dir != nil {
		d.dir.Close()
	}
	d.file, d.dir = nil, nil
}
