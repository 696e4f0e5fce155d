package files

import (
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs/layer"
)

// TarDir is the file helper's "tar" op: it archives the contents of the
// directory at path to stdout with WriteTarFrom (directories, regular
// files and symlinks, reached descriptor-relative, symlinks never
// followed below path; the contents of other mounts beneath it are not
// archived). path itself is resolved as the sandbox would resolve it
// (symlinks followed) and must be a directory (ENOTDIR otherwise).
//
// It runs inside the sandbox, with its restrictions, for tent cp of a
// directory out of a sandbox; the host side reads the archive as
// hostile input (see ExtractTar).
func TarDir(path string, stdout io.Writer) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return layer.WriteTarFrom(stdout, f)
}
