// Package e2bsdk installs the official E2B JavaScript SDK for tests that
// drive `tent serve` with it (the serve package's SDK test, the README's
// example): one pinned version, installed with npm once and kept under
// the user's cache directory.
package e2bsdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Version is the e2b npm package the tests use.
const Version = "2.51.0"

// ErrNoNode is returned by Install when node or npm is missing, unless
// $TENT_REQUIRE_SDK is set (CI sets it): then the missing tool is an
// error like any other, so that the SDK tests cannot skip there.
var ErrNoNode = errors.New("node and npm are needed to run the E2B SDK")

// Install returns node's path and a node_modules directory holding e2b at
// Version: the one cached under the user's cache directory (tent-test/),
// else a fresh npm install into scratch (a directory the caller removes),
// then moved to the cache (an unwritable cache just means no cache).
func Install(scratch string) (node, modules string, err error) {
	node, nerr := exec.LookPath("node")
	npm, perr := exec.LookPath("npm")
	if nerr != nil || perr != nil {
		if os.Getenv("TENT_REQUIRE_SDK") != "" {
			return "", "", fmt.Errorf("$TENT_REQUIRE_SDK is set and node or npm is missing (node: %v, npm: %v)", nerr, perr)
		}
		return "", "", fmt.Errorf("%w (node: %v, npm: %v)", ErrNoNode, nerr, perr)
	}
	parent := filepath.Join(scratch, "cache")
	if root, err := os.UserCacheDir(); err == nil {
		parent = filepath.Join(root, "tent-test")
	}
	dir := filepath.Join(parent, "e2b-"+Version)
	modules = filepath.Join(dir, "node_modules")
	if installed(modules) {
		return node, modules, nil
	}
	if err := os.MkdirAll(parent, 0o700); err != nil {
		parent = filepath.Join(scratch, "cache")
		if err := os.MkdirAll(parent, 0o700); err != nil {
			return "", "", err
		}
	}
	tmp, err := os.MkdirTemp(parent, "install-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "package.json"), []byte(`{"private": true}`), 0o644); err != nil {
		return "", "", err
	}
	cmd := exec.Command(npm, "install", "--no-audit", "--no-fund", "--ignore-scripts", "--no-package-lock", "--loglevel=error", "e2b@"+Version)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(parent, "npm-cache"), "npm_config_update_notifier=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("npm install e2b@%s: %v\n%s", Version, err, out)
	}
	if !installed(filepath.Join(tmp, "node_modules")) {
		return "", "", fmt.Errorf("npm install e2b@%s left no node_modules/e2b of that version", Version)
	}
	if err := os.Rename(tmp, dir); err == nil || installed(modules) { // or another run won the race
		return node, modules, nil
	}
	keep := filepath.Join(scratch, "sdk")
	if err := os.Rename(tmp, keep); err != nil {
		return "", "", err
	}
	return node, filepath.Join(keep, "node_modules"), nil
}

// installed reports whether modules holds e2b at Version.
func installed(modules string) bool {
	b, err := os.ReadFile(filepath.Join(modules, "e2b", "package.json"))
	var pkg struct{ Version string }
	return err == nil && json.Unmarshal(b, &pkg) == nil && pkg.Version == Version
}
