// Package npmtest installs pinned npm packages for the tests that drive
// tent with official JavaScript tooling (the MCP conformance suite, the
// MCP TypeScript SDK): each package set is installed with npm once and
// kept under the user's cache directory, as package e2bsdk keeps the E2B
// SDK.
package npmtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrNoNode is returned by Install when node or npm is missing, unless
// $TENT_REQUIRE_SDK is set (CI sets it): then the missing tool is an
// error like any other, so that the tests cannot skip there.
var ErrNoNode = errors.New("node and npm are needed")

// Install returns node's path and a node_modules directory holding pkgs
// (NAME@VERSION each, exact versions): the one cached under the user's
// cache directory (tent-test/), else a fresh npm install into scratch (a
// directory the caller removes), then moved to the cache.
func Install(scratch string, pkgs ...string) (node, modules string, err error) {
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
	name := strings.NewReplacer("@", "", "/", "-").Replace(strings.Join(pkgs, "+"))
	dir := filepath.Join(parent, name)
	modules = filepath.Join(dir, "node_modules")
	if installed(modules, pkgs) {
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
	args := append([]string{"install", "--no-audit", "--no-fund", "--ignore-scripts", "--no-package-lock", "--loglevel=error"}, pkgs...)
	cmd := exec.Command(npm, args...)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(parent, "npm-cache"), "npm_config_update_notifier=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("npm install %v: %v\n%s", pkgs, err, out)
	}
	if !installed(filepath.Join(tmp, "node_modules"), pkgs) {
		return "", "", fmt.Errorf("npm install %v left other versions in node_modules", pkgs)
	}
	if err := os.Rename(tmp, dir); err == nil || installed(modules, pkgs) { // or another run won the race
		return node, modules, nil
	}
	keep := filepath.Join(scratch, "npm")
	if err := os.Rename(tmp, keep); err != nil {
		return "", "", err
	}
	return node, filepath.Join(keep, "node_modules"), nil
}

// installed reports whether modules holds every NAME@VERSION of pkgs.
func installed(modules string, pkgs []string) bool {
	for _, p := range pkgs {
		i := strings.LastIndex(p, "@")
		if i <= 0 {
			return false
		}
		b, err := os.ReadFile(filepath.Join(modules, p[:i], "package.json"))
		var pkg struct{ Version string }
		if err != nil || json.Unmarshal(b, &pkg) != nil || pkg.Version != p[i+1:] {
			return false
		}
	}
	return true
}
