package mcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"syscall"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/tent-sandbox/tent/sandbox"
)

// widening names arguments a model might send to get more than the
// operator allowed, with the reason each is refused.
var widening = map[string]string{
	"mounts":      "host mounts are fixed by whoever started tent mcp (tent mcp --ro/--rw/--cow or a template); no tool mounts a host path",
	"mount":       "host mounts are fixed by whoever started tent mcp (tent mcp --ro/--rw/--cow or a template); no tool mounts a host path",
	"ro":          "host mounts are fixed by whoever started tent mcp; no tool mounts a host path",
	"rw":          "host mounts are fixed by whoever started tent mcp; no tool mounts a host path",
	"cow":         "host mounts are fixed by whoever started tent mcp; no tool mounts a host path",
	"volumes":     "host mounts are fixed by whoever started tent mcp; no tool mounts a host path",
	"network":     "the network policy is fixed by whoever started tent mcp (--net, --allow-host or a template); network_status shows it",
	"net":         "the network policy is fixed by whoever started tent mcp (--net, --allow-host or a template); network_status shows it",
	"allow_hosts": "the network policy is fixed by whoever started tent mcp (--net, --allow-host or a template); network_status shows it",
	"allow_host":  "the network policy is fixed by whoever started tent mcp (--net, --allow-host or a template); network_status shows it",
	"limits":      "limits are fixed by whoever started tent mcp (--memory, --pids, --cpus, --timeout or a template)",
	"memory":      "limits are fixed by whoever started tent mcp (--memory or a template)",
	"pids":        "limits are fixed by whoever started tent mcp (--pids or a template)",
	"cpus":        "limits are fixed by whoever started tent mcp (--cpus or a template)",
	"user":        "the identity inside is fixed by whoever started tent mcp",
	"privileged":  "sandboxes are never privileged",
	"seccomp":     "the syscall filter is fixed by whoever started tent mcp",
}

// checkArgs refuses arguments that schema does not name: one that would
// widen the sandbox with the reason it cannot, any other with the list
// of arguments the tool takes. Missing or null arguments are fine.
func checkArgs(raw json.RawMessage, props map[string]*jsonschema.Schema) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("the arguments must be a JSON object: %v", err)
	}
	var unknown []string
	for k := range m {
		if _, ok := props[k]; ok {
			continue
		}
		if why, ok := widening[strings.ToLower(k)]; ok {
			return fmt.Errorf("argument %q refused: %s", k, why)
		}
		unknown = append(unknown, k)
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	if len(props) == 0 {
		return fmt.Errorf("unknown argument(s) %s: this tool takes no arguments", strings.Join(unknown, ", "))
	}
	names := make([]string, 0, len(props))
	for k := range props {
		names = append(names, k)
	}
	slices.Sort(names)
	return fmt.Errorf("unknown argument(s) %s: this tool takes %s", strings.Join(unknown, ", "), strings.Join(names, ", "))
}

// advise adds to a backend's error what the model can do about it.
func advise(err error) error {
	var hint string
	var errno syscall.Errno
	switch {
	case errors.Is(err, errNoSandbox):
		return err
	case errors.Is(err, sandbox.ErrNotFound):
		hint = "sandbox_list shows the sandboxes of this server"
	case errors.Is(err, sandbox.ErrAmbiguous):
		hint = "give more of the id"
	case errors.Is(err, sandbox.ErrStopped), errors.Is(err, sandbox.ErrTerminated):
		hint = "the sandbox has ended (its time limit, or it was killed): sandbox_kill it and create another, or sandbox_restore a snapshot"
	case errors.Is(err, sandbox.ErrSuspended):
		hint = "the sandbox is suspended; the operator can resume it with tent resume"
	case errors.Is(err, sandbox.ErrCommandNotFound):
		hint = "the command is not installed in the sandbox: check the name, or use shell with a command that is (the sandbox sees the host's /usr read-only)"
	case errors.Is(err, sandbox.ErrNotExecutable):
		hint = "the file is not executable: chmod +x it, or run it with its interpreter"
	case errors.Is(err, sandbox.ErrWorkDir):
		hint = "the working directory does not exist inside the sandbox: file_mkdir it or pick another cwd"
	case errors.Is(err, sandbox.ErrUnsupported):
		hint = "this host or backend cannot do it"
	case errors.As(err, &errno):
		switch errno {
		case syscall.ENOENT:
			hint = "no such file or directory inside the sandbox: file_list or file_find show what exists"
		case syscall.EEXIST:
			hint = "it already exists"
		case syscall.EACCES, syscall.EPERM:
			hint = "the sandbox may not do this: only the writable places (/tmp, $HOME and the mounts the operator made writable) can be changed"
		case syscall.EROFS:
			hint = "this part of the sandbox is read-only: write under /tmp, $HOME or a writable mount"
		case syscall.ENOTDIR:
			hint = "a part of the path is not a directory"
		case syscall.EISDIR:
			hint = "it is a directory: file_list lists it"
		case syscall.ENOTEMPTY:
			hint = "the directory is not empty: file_remove with recursive: true removes a tree"
		case syscall.ELOOP:
			hint = "too many symbolic links"
		}
	case errors.Is(err, fs.ErrNotExist):
		hint = "no such file or directory inside the sandbox: file_list or file_find show what exists"
	}
	if hint == "" {
		return err
	}
	return fmt.Errorf("%w (%s)", err, hint)
}
