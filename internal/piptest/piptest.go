// Package piptest installs pinned PyPI packages for the tests that drive
// tent with official Python tooling (E2B's Code Interpreter SDK): each
// package set goes into a virtual environment made once and kept under
// the user's cache directory, as package npmtest keeps npm packages.
package piptest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrNoPython is returned by Install when python3 (with its venv module)
// is missing, unless $TENT_REQUIRE_SDK is set (CI sets it): then it is an
// error like any other, so that the tests cannot skip there.
var ErrNoPython = errors.New("python3 with its venv module is needed")

// Install returns the python of a virtual environment holding pkgs
// (NAME==VERSION each, exact versions, and what they depend on): the one
// cached under the user's cache directory (tent-test/), else a new one
// made in scratch (a directory the caller removes), then moved to the
// cache. A venv's python finds its packages from where it is, so the
// move keeps it whole.
func Install(scratch string, pkgs ...string) (python string, err error) {
	base, err := exec.LookPath("python3")
	if err == nil {
		err = exec.Command(base, "-c", "import venv, ensurepip").Run()
	}
	if err != nil {
		if os.Getenv("TENT_REQUIRE_SDK") != "" {
			return "", fmt.Errorf("$TENT_REQUIRE_SDK is set and python3 with venv and ensurepip is missing: %v", err)
		}
		return "", fmt.Errorf("%w: %v", ErrNoPython, err)
	}
	parent := filepath.Join(scratch, "cache")
	if root, err := os.UserCacheDir(); err == nil {
		parent = filepath.Join(root, "tent-test")
	}
	name := "venv-" + strings.NewReplacer("==", "", "/", "-").Replace(strings.Join(pkgs, "+"))
	dir := filepath.Join(parent, name)
	if installed(dir) {
		return filepath.Join(dir, "bin", "python"), nil
	}
	if err := os.MkdirAll(parent, 0o700); err != nil {
		parent = filepath.Join(scratch, "cache")
		if err := os.MkdirAll(parent, 0o700); err != nil {
			return "", err
		}
	}
	tmp, err := os.MkdirTemp(parent, "install-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if out, err := exec.Command(base, "-m", "venv", tmp).CombinedOutput(); err != nil {
		return "", fmt.Errorf("python3 -m venv: %v\n%s", err, out)
	}
	args := append([]string{"-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-input"}, pkgs...)
	cmd := exec.Command(filepath.Join(tmp, "bin", "python"), args...)
	cmd.Env = append(os.Environ(), "PIP_CACHE_DIR="+filepath.Join(parent, "pip-cache"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("pip install %v: %v\n%s", pkgs, err, out)
	}
	if err := os.WriteFile(filepath.Join(tmp, "tent-installed"), []byte(strings.Join(pkgs, "\n")+"\n"), 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err == nil || installed(dir) { // or another run won the race
		return filepath.Join(dir, "bin", "python"), nil
	}
	keep := filepath.Join(scratch, "venv")
	if err := os.Rename(tmp, keep); err != nil {
		return "", err
	}
	return filepath.Join(keep, "bin", "python"), nil
}

// installed reports whether dir is a whole venv that Install made (its
// marker is written last).
func installed(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "tent-installed"))
	return err == nil
}
