package mcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tent-sandbox/tent/internal/handle"
	"github.com/tent-sandbox/tent/sandbox"
)

// Every file tool is one operation of tent's file helper, which runs
// inside the sandbox with the sandbox's own view and restrictions
// (sandbox.Backend.File): a path, "..", or a symlink the sandbox planted
// resolves inside the sandbox, exactly as a command there would see it,
// and never reaches a host file the sandbox cannot. What comes back is
// bounded here.

// File bounds.
const (
	maxPath = 4096
	// defaultReadLines and maxReadBytes bound what file_read returns.
	defaultReadLines = 2000
	maxReadBytes     = 256 << 10
	// maxWholeFile bounds a file that file_write writes or file_edit
	// reads and rewrites.
	maxWholeFile = 10 << 20
	// maxEntries bounds the entries returned (file_list, file_find; the
	// backend bounds the listing it reads).
	maxEntries = 1000
	maxDepth   = 20
	// grep's bounds: per file, in all, matches, and a matched line's text.
	grepFileMax     = 4 << 20
	grepTotalMax    = 64 << 20
	defaultMatches  = 200
	maxMatches      = 2000
	maxMatchLineLen = 500
)

// checkPath refuses what no file helper can take.
func checkPath(field, p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%s is empty: give a path inside the sandbox (relative to its working directory, or absolute)", field)
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("%s contains a NUL byte: no file name can", field)
	case len(p) > maxPath:
		return fmt.Errorf("%s is %d bytes long, more than %d", field, len(p), maxPath)
	}
	return nil
}

// fileView is a file's metadata.
type fileView struct {
	Path       string    `json:"path"`
	Type       string    `json:"type" jsonschema:"file, dir, symlink or other"`
	Size       int64     `json:"size"`
	Mode       string    `json:"mode" jsonschema:"permission bits, octal"`
	Modified   time.Time `json:"modified"`
	LinkTarget string    `json:"link_target,omitempty" jsonschema:"a symlink's target (never followed by file_list)"`
	Owner      string    `json:"owner,omitempty"`
}

func viewFile(fi sandbox.FileInfo, path string) fileView {
	v := fileView{Path: fi.Path, Size: fi.Size, Mode: fmt.Sprintf("%04o", uint32(fi.Mode.Perm())), Modified: fi.ModTime, LinkTarget: fi.Link, Owner: fi.Owner}
	if v.Path == "" {
		v.Path = path
	}
	switch {
	case fi.IsDir:
		v.Type = "dir"
	case fi.Mode&os.ModeSymlink != 0:
		v.Type = "symlink"
	case fi.Mode.IsRegular():
		v.Type = "file"
	default:
		v.Type = "other"
	}
	return v
}

// capWriter keeps at most max bytes and reports whether more came.
type capWriter struct {
	buf  bytes.Buffer
	max  int
	over bool
	stop context.CancelFunc
}

func (w *capWriter) Write(p []byte) (int, error) {
	if w.over {
		return len(p), nil
	}
	if w.buf.Len()+len(p) > w.max {
		w.over = true
		if w.stop != nil {
			w.stop()
		}
		return len(p), nil
	}
	w.buf.Write(p)
	return len(p), nil
}

// listing lists path to depth; a listing over the backend's bound
// (EFBIG) asks for a narrower one.
func (s *Server) listing(ctx context.Context, id, path string, depth int) ([]sandbox.FileInfo, error) {
	fis, err := handle.Open(ctx, s.b, id).ReadDir(ctx, path, depth)
	if errors.Is(err, syscall.EFBIG) {
		return nil, fmt.Errorf("the listing is too large: narrow it (a smaller depth, a deeper path): %w", err)
	}
	return fis, err
}

func (s *Server) stat(ctx context.Context, id, path string) (sandbox.FileInfo, error) {
	return handle.Open(ctx, s.b, id).Stat(ctx, path)
}

type writeIn struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"the sandbox's id, id prefix or name; leave out for the default sandbox"`
	Path    string `json:"path" jsonschema:"the file to create or replace, inside the sandbox; missing parent directories are created"`
	Content string `json:"content" jsonschema:"the file's whole new content (at most 10 MiB)"`
	Mode    string `json:"mode,omitempty" jsonschema:"permission bits in octal, e.g. 755 for a script (default 644)"`
}

type pathIn struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"the sandbox's id, id prefix or name; leave out for the default sandbox"`
	Path    string `json:"path" jsonschema:"a path inside the sandbox"`
}

type removeIn struct {
	Sandbox   string `json:"sandbox,omitempty" jsonschema:"the sandbox's id, id prefix or name; leave out for the default sandbox"`
	Path      string `json:"path" jsonschema:"the file or directory to remove, inside the sandbox"`
	Recursive bool   `json:"recursive,omitempty" jsonschema:"remove a directory and everything in it"`
}

type moveIn struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"the sandbox's id, id prefix or name; leave out for the default sandbox"`
	From    string `json:"from" jsonschema:"the file or directory to move"`
	To      string `json:"to" jsonschema:"its new path (replaced if it is a file; missing parents are created)"`
}

type doneOut struct {
	Path string   `json:"path"`
	File fileView `json:"file,omitzero"`
}

func (s *Server) addFileTools() {
	inside := " The path is inside the sandbox (relative: from its working directory); the host's files are out of reach."
	addTool(s, &sdk.Tool{Name: "file_write", Title: "Write a file",
		Description: "Create or replace a file with the given content (at most 10 MiB), creating missing parent directories." + inside},
		func(ctx context.Context, _ *sdk.CallToolRequest, in writeIn) (*sdk.CallToolResult, doneOut, error) {
			if err := checkPath("path", in.Path); err != nil {
				return nil, doneOut{}, err
			}
			if len(in.Content) > maxWholeFile {
				return nil, doneOut{}, fmt.Errorf("content is %d bytes, more than %d: write it in parts with shell (cat >> file)", len(in.Content), maxWholeFile)
			}
			mode := os.FileMode(0o644)
			if in.Mode != "" {
				m, err := strconv.ParseUint(in.Mode, 8, 32)
				if err != nil || m > 0o777 {
					return nil, doneOut{}, fmt.Errorf("mode %q: want permission bits in octal, e.g. 644 or 755", in.Mode)
				}
				mode = os.FileMode(m)
			}
			bx, err := s.resolve(ctx, in.Sandbox)
			if err != nil {
				return nil, doneOut{}, err
			}
			fi, err := handle.Open(ctx, s.b, bx.id).WriteFile(ctx, in.Path, strings.NewReader(in.Content), sandbox.WriteOptions{Mode: mode, Parents: true})
			if err != nil {
				return nil, doneOut{}, err
			}
			return nil, doneOut{Path: in.Path, File: viewFile(fi, in.Path)}, nil
		})
	addTool(s, &sdk.Tool{Name: "file_stat", Title: "Describe a file",
		Description: "Return a file's type, size, permissions, modification time and, for a symlink, its target (not followed)." + inside,
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, _ *sdk.CallToolRequest, in pathIn) (*sdk.CallToolResult, fileView, error) {
			if err := checkPath("path", in.Path); err != nil {
				return nil, fileView{}, err
			}
			bx, err := s.resolve(ctx, in.Sandbox)
			if err != nil {
				return nil, fileView{}, err
			}
			fi, err := s.stat(ctx, bx.id, in.Path)
			if err != nil {
				return nil, fileView{}, err
			}
			return nil, viewFile(fi, in.Path), nil
		})
	addTool(s, &sdk.Tool{Name: "file_mkdir", Title: "Make a directory",
		Description: "Create a directory and its missing parents; one that already exists is fine." + inside,
		Annotations: &sdk.ToolAnnotations{IdempotentHint: true}},
		func(ctx context.Context, _ *sdk.CallToolRequest, in pathIn) (*sdk.CallToolResult, doneOut, error) {
			if err := checkPath("path", in.Path); err != nil {
				return nil, doneOut{}, err
			}
			bx, err := s.resolve(ctx, in.Sandbox)
			if err != nil {
				return nil, doneOut{}, err
			}
			fi, err := handle.Open(ctx, s.b, bx.id).Mkdir(ctx, in.Path)
			if errors.Is(err, syscall.EEXIST) {
				if fi, err = s.stat(ctx, bx.id, in.Path); err == nil && !fi.IsDir {
					return nil, doneOut{}, fmt.Errorf("%s exists and is not a directory", in.Path)
				}
			}
			if err != nil {
				return nil, doneOut{}, err
			}
			return nil, doneOut{Path: in.Path, File: viewFile(fi, in.Path)}, nil
		})
	addTool(s, &sdk.Tool{Name: "file_remove", Title: "Remove a file",
		Description: "Remove a file, a symlink (not what it points to) or an empty directory; with recursive, a directory and everything in it." + inside,
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true)}},
		func(ctx context.Context, _ *sdk.CallToolRequest, in removeIn) (*sdk.CallToolResult, doneOut, error) {
			if err := checkPath("path", in.Path); err != nil {
				return nil, doneOut{}, err
			}
			bx, err := s.resolve(ctx, in.Sandbox)
			if err != nil {
				return nil, doneOut{}, err
			}
			if err := handle.Open(ctx, s.b, bx.id).Remove(ctx, in.Path, in.Recursive); err != nil {
				return nil, doneOut{}, err
			}
			return nil, doneOut{Path: in.Path}, nil
		})
	addTool(s, &sdk.Tool{Name: "file_move", Title: "Move a file",
		Description: "Move or rename a file or directory (rename(2): a file at the destination is replaced), creating missing parent directories." + inside,
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true)}},
		func(ctx context.Context, _ *sdk.CallToolRequest, in moveIn) (*sdk.CallToolResult, doneOut, error) {
			if err := checkPath("from", in.From); err != nil {
				return nil, doneOut{}, err
			}
			if err := checkPath("to", in.To); err != nil {
				return nil, doneOut{}, err
			}
			bx, err := s.resolve(ctx, in.Sandbox)
			if err != nil {
				return nil, doneOut{}, err
			}
			fi, err := handle.Open(ctx, s.b, bx.id).Rename(ctx, in.From, in.To)
			if err != nil {
				return nil, doneOut{}, err
			}
			return nil, doneOut{Path: in.To, File: viewFile(fi, in.To)}, nil
		})
	s.addReadTools(inside)
	s.addSearchTools(inside)
}
