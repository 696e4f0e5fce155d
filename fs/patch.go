package fs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"os/exec"
	"path/filepath"
)

// WritePatch writes the file changes as a unified diff that `patch -p1`
// or `git apply` applies to the lower directory (labels a/PATH, b/PATH),
// using diff(1). Binary files and symlinks cannot be expressed that way:
// each gets a comment line, which both tools skip; export them with
// [ApplyChanges].
func WritePatch(w io.Writer, lower, upper string, changes []Change) error {
	for _, c := range changes {
		if c.Dir {
			continue
		}
		old, new := filepath.Join(lower, c.Path), filepath.Join(upper, c.Path)
		switch c.Kind {
		case Added:
			old = os.DevNull
		case Deleted:
			new = os.DevNull
		}
		if isSymlink(old) || isSymlink(new) {
			fmt.Fprintf(w, "# tent: %s %s is a symlink, not in this patch (use tent export --to)\n", c.Kind, c.Path)
			continue
		}
		cmd := exec.Command("diff", "-u", "--label", "a/"+c.Path, "--label", "b/"+c.Path, old, new)
		var out bytes.Buffer
		cmd.Stdout = &out
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
			return fmt.Errorf("diff of %s: %w", c.Path, err)
		}
		if bytes.HasPrefix(out.Bytes(), []byte("Binary files")) {
			fmt.Fprintf(w, "# tent: %s %s is binary, not in this patch (use tent export --to)\n", c.Kind, c.Path)
			continue
		}
		if _, err := w.Write(out.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

func isSymlink(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode()&iofs.ModeSymlink != 0
}
