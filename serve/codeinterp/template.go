package codeinterp

import (
	"archive/zip"
	"bytes"
	"context"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// Template is the name of the built-in template that serves the Code
// Interpreter's API, as E2B's SDKs ask for it by default.
const Template = "code-interpreter-v1"

// Port is the port inside the sandbox the server listens on (E2B's).
const Port = 49999

// MinMemory is the least memory a sandbox of the template gets: the
// server and one Python kernel with numpy, pandas and matplotlib
// imported take about 190 MiB between them (measured: docs/serve.md),
// and each further context a kernel of its own.
const MinMemory = 1 << 30

// readyTimeout bounds the server's start: Python's imports of
// jupyter_client and the first kernel, which may be slow on a loaded or
// emulated machine.
const readyTimeout = 2 * time.Minute

// Requirement is a Python module the server or its kernels import, and
// the Debian package that provides it.
type Requirement struct {
	Module  string
	Package string
}

// Requirements are what the host's Python must import for the template
// to be served.
var Requirements = []Requirement{
	{"jupyter_client", "python3-jupyter-client"},
	{"ipykernel", "python3-ipykernel"},
	{"numpy", "python3-numpy"},
	{"pandas", "python3-pandas"},
	{"matplotlib", "python3-matplotlib"},
	{"PIL", "python3-pil"},
}

// pythons are the interpreters looked at, in order: the distribution's,
// whose packages Requirements name, then a local one. A Python on PATH
// only (a user's pyenv or venv) is not looked at: the sandbox runs the
// host's system directories, not the caller's home.
var pythons = []string{"/usr/bin/python3", "/usr/local/bin/python3"}

// MissingError is what [Probe] returns when no Python of the host
// imports every [Requirement]. It matches sandbox.ErrUnsupported.
type MissingError struct {
	Python   string   // the interpreter looked at, "" when there is none
	Packages []string // the Debian packages that would provide the missing modules
}

func (e *MissingError) Error() string {
	if e.Python == "" {
		return fmt.Sprintf("this host has no Python 3 at %s: install python3 and %s", strings.Join(pythons, " or "), strings.Join(e.Packages, " "))
	}
	return fmt.Sprintf("the host's %s lacks modules the code interpreter needs: install %s", e.Python, strings.Join(e.Packages, " "))
}

// Unwrap returns sandbox.ErrUnsupported.
func (e *MissingError) Unwrap() error { return sandbox.ErrUnsupported }

// Probe returns the host Python that imports every [Requirement], or a
// [*MissingError] naming the packages to install for the first one found.
func Probe(ctx context.Context) (string, error) {
	var first *MissingError
	for _, py := range pythons {
		if _, err := os.Stat(py); err != nil {
			continue
		}
		missing, err := missingModules(ctx, py)
		if err != nil {
			return "", err
		}
		if len(missing) == 0 {
			return py, nil
		}
		if first == nil {
			first = &MissingError{Python: py, Packages: missing}
		}
	}
	if first == nil {
		first = &MissingError{Packages: packagesOf(nil)}
	}
	return "", first
}

// missingModules returns the packages of the Requirements py cannot find.
func missingModules(ctx context.Context, py string) ([]string, error) {
	mods := make([]string, len(Requirements))
	for i, r := range Requirements {
		mods[i] = r.Module
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// find_spec looks the module up without importing it (pandas alone
	// takes a second to import).
	script := "import importlib.util, sys\nprint(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))"
	cmd := exec.CommandContext(ctx, py, append([]string{"-I", "-c", script}, mods...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C.UTF-8"}
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("probing %s for the code interpreter's modules: %w", py, err)
	}
	missing := strings.Fields(string(out))
	if len(missing) == 0 {
		return nil, nil
	}
	return packagesOf(missing), nil
}

// packagesOf maps missing modules to their packages; nil means all.
func packagesOf(missing []string) []string {
	var pkgs []string
	for _, r := range Requirements {
		if missing == nil || slices.Contains(missing, r.Module) {
			pkgs = append(pkgs, r.Package)
		}
	}
	return pkgs
}

//go:embed server
var serverFiles embed.FS

// serverEnv carries the server's sources into the sandbox (see Spec).
const serverEnv = "TENT_CODE_INTERPRETER"

// bootstrap unpacks the server from serverEnv into a private directory
// under /tmp and becomes its main.py (exec, so that ps shows that); the
// variable is removed first, so that the kernels, which inherit the
// server's environment, never see it.
const bootstrap = `import base64, io, os, sys, tempfile, zipfile; ` +
	`d = tempfile.mkdtemp(prefix="tent-code-interpreter-"); ` +
	`zipfile.ZipFile(io.BytesIO(base64.b64decode(os.environ.pop("` + serverEnv + `")))).extractall(d); ` +
	`os.execv(sys.executable, [sys.executable, os.path.join(d, "main.py")])`

// Spec returns the spec of the template for the host's Python py (from
// [Probe]), with limits: a [sandbox.Service] that runs tent's Code
// Interpreter server (the Python files embedded in this package) on
// [Port], ready once the port accepts.
//
// The server's files travel in the service's environment, not on the
// host's disk: the sandbox's record holds everything it needs, so a
// fork, a snapshot or a sandbox resumed by another tent serve start the
// same server, and nothing on the host is left to clean up or to plant.
func Spec(py string, limits sandbox.Limits) (sandbox.Spec, error) {
	archive, err := serverArchive()
	if err != nil {
		return sandbox.Spec{}, err
	}
	if limits.Memory != 0 && limits.Memory < MinMemory {
		limits.Memory = MinMemory
	}
	return sandbox.Spec{
		Limits: limits,
		Service: &sandbox.Service{
			Command:      []string{py, "-c", bootstrap},
			Env:          []string{serverEnv + "=" + archive, "PYTHONDONTWRITEBYTECODE=1"},
			ReadyPort:    Port,
			ReadyTimeout: readyTimeout,
		},
	}, nil
}

// serverArchive is the server's Python files, zipped and base64-encoded.
func serverArchive() (string, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	err := fs.WalkDir(serverFiles, "server", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Ext(name) != ".py" {
			return err
		}
		data, err := serverFiles.ReadFile(name)
		if err != nil {
			return err
		}
		w, err := zw.Create(strings.TrimPrefix(name, "server/"))
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	})
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		return "", fmt.Errorf("packing the code interpreter's server: %w", err)
	}
	if buf.Len() == 0 {
		return "", errors.New("packing the code interpreter's server: no files")
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}
