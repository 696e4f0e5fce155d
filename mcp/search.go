package mcp

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tent-sandbox/tent/internal/handle"
	"github.com/tent-sandbox/tent/sandbox"
)

type listIn struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"the sandbox's id, id prefix or name; leave out for the default sandbox"`
	Path    string `json:"path,omitempty" jsonschema:"the directory to list (default: the working directory)"`
	Depth   int    `json:"depth,omitempty" jsonschema:"how many levels to descend: 1 (the default) lists its entries only, at most 20"`
}

type listFilesOut struct {
	Entries   []fileView `json:"entries"`
	Truncated bool       `json:"truncated" jsonschema:"there were more than 1000 entries: only the first are returned"`
}

type findIn struct {
	Sandbox  string `json:"sandbox,omitempty" jsonschema:"the sandbox's id, id prefix or name; leave out for the default sandbox"`
	Path     string `json:"path,omitempty" jsonschema:"the directory to search (default: the working directory)"`
	Pattern  string `json:"pattern" jsonschema:"a glob (* ? [abc]); without '/' it matches file names at any depth (*.go), with '/' the path relative to path (cmd/*/main.go)"`
	Type     string `json:"type,omitempty" jsonschema:"only file, dir or symlink"`
	MaxDepth int    `json:"max_depth,omitempty" jsonschema:"how deep to search (default 10, at most 20)"`
}

type grepIn struct {
	Sandbox    string `json:"sandbox,omitempty" jsonschema:"the sandbox's id, id prefix or name; leave out for the default sandbox"`
	Pattern    string `json:"pattern" jsonschema:"a regular expression (RE2 syntax, as Go's regexp) matched against each line as grep does: ^ and $ match at the line's start and end"`
	Path       string `json:"path,omitempty" jsonschema:"a directory to search recursively, or one file (default: the working directory)"`
	Glob       string `json:"glob,omitempty" jsonschema:"only files whose name matches this glob, e.g. *.py"`
	IgnoreCase bool   `json:"ignore_case,omitempty"`
	MaxMatches int    `json:"max_matches,omitempty" jsonschema:"stop after this many matching lines (default 200, at most 2000)"`
}

type grepMatch struct {
	Path string `json:"path"`
	Line int    `json:"line" jsonschema:"the line number, from 1"`
	Text string `json:"text" jsonschema:"the line (cut at 500 bytes)"`
}

type grepOut struct {
	Matches      []grepMatch `json:"matches"`
	FilesScanned int         `json:"files_scanned"`
	Truncated    bool        `json:"truncated" jsonschema:"the search stopped at max_matches, or at the 64 MiB scanned in all: narrow path or glob for the rest"`
	Skipped      []string    `json:"skipped,omitempty" jsonschema:"files not searched: binary, or over 4 MiB"`
}

// relTo returns p relative to dir when it lies beneath it.
func relTo(dir, p string) string {
	if dir == "" || dir == "." {
		return p
	}
	return strings.TrimPrefix(strings.TrimPrefix(p, strings.TrimSuffix(dir, "/")), "/")
}

func (s *Server) addSearchTools(inside string) {
	addTool(s, &sdk.Tool{Name: "file_list", Title: "List a directory",
		Description: "List a directory's entries (type, size, mode, modification time; symlinks shown, never followed), down to depth levels; at most 1000 entries." + inside,
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, _ *sdk.CallToolRequest, in listIn) (*sdk.CallToolResult, listFilesOut, error) {
			p := in.Path
			if p == "" {
				p = "."
			}
			if err := checkPath("path", p); err != nil {
				return nil, listFilesOut{}, err
			}
			depth := max(in.Depth, 1)
			if in.Depth < 0 || in.Depth > maxDepth {
				return nil, listFilesOut{}, fmt.Errorf("depth %d: want 1 to %d", in.Depth, maxDepth)
			}
			bx, err := s.resolve(ctx, in.Sandbox)
			if err != nil {
				return nil, listFilesOut{}, err
			}
			fis, err := s.listing(ctx, bx.id, p, depth)
			if err != nil {
				return nil, listFilesOut{}, err
			}
			out := listFilesOut{Entries: []fileView{}}
			for _, fi := range fis {
				if len(out.Entries) == maxEntries {
					out.Truncated = true
					break
				}
				out.Entries = append(out.Entries, viewFile(fi, fi.Name))
			}
			return nil, out, nil
		})
	addTool(s, &sdk.Tool{Name: "file_find", Title: "Find files by name",
		Description: "Find files whose name (or relative path) matches a glob, beneath a directory; symlinks are not followed; at most 1000 results." + inside,
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, _ *sdk.CallToolRequest, in findIn) (*sdk.CallToolResult, listFilesOut, error) {
			p := in.Path
			if p == "" {
				p = "."
			}
			if err := checkPath("path", p); err != nil {
				return nil, listFilesOut{}, err
			}
			if _, err := path.Match(in.Pattern, ""); err != nil || in.Pattern == "" {
				return nil, listFilesOut{}, fmt.Errorf("pattern %q: want a glob such as *.go or src/*.c", in.Pattern)
			}
			switch in.Type {
			case "", "file", "dir", "symlink":
			default:
				return nil, listFilesOut{}, fmt.Errorf("type %q: want file, dir or symlink", in.Type)
			}
			depth := in.MaxDepth
			if depth == 0 {
				depth = 10
			}
			if depth < 0 || depth > maxDepth {
				return nil, listFilesOut{}, fmt.Errorf("max_depth %d: want 1 to %d", in.MaxDepth, maxDepth)
			}
			bx, err := s.resolve(ctx, in.Sandbox)
			if err != nil {
				return nil, listFilesOut{}, err
			}
			fis, err := s.listing(ctx, bx.id, p, depth)
			if err != nil {
				return nil, listFilesOut{}, err
			}
			base, err := s.stat(ctx, bx.id, p)
			if err != nil {
				return nil, listFilesOut{}, err
			}
			out := listFilesOut{Entries: []fileView{}}
			for _, fi := range fis {
				v := viewFile(fi, fi.Name)
				subject := fi.Name
				if strings.Contains(in.Pattern, "/") {
					subject = relTo(base.Path, fi.Path)
				}
				if ok, _ := path.Match(in.Pattern, subject); !ok || (in.Type != "" && v.Type != in.Type) {
					continue
				}
				if len(out.Entries) == maxEntries {
					out.Truncated = true
					break
				}
				out.Entries = append(out.Entries, v)
			}
			return nil, out, nil
		})
	addTool(s, &sdk.Tool{Name: "file_grep", Title: "Search file contents",
		Description: "Search text files for lines matching a regular expression (RE2 syntax) and return each match's path, line number and text. " +
			"A directory is searched recursively without following symlinks or entering other mounts below it; binary files and files over 4 MiB are skipped and listed; " +
			"at most max_matches lines and 64 MiB scanned." + inside,
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, _ *sdk.CallToolRequest, in grepIn) (*sdk.CallToolResult, grepOut, error) {
			return s.grep(ctx, in)
		})
}

// grep searches a file, or a directory's tree archived by the file
// helper inside the sandbox (one stream, read here as hostile input:
// only regular files' bytes are looked at, bounded).
func (s *Server) grep(ctx context.Context, in grepIn) (*sdk.CallToolResult, grepOut, error) {
	p := in.Path
	if p == "" {
		p = "."
	}
	if err := checkPath("path", p); err != nil {
		return nil, grepOut{}, err
	}
	expr := in.Pattern
	if in.IgnoreCase {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil || in.Pattern == "" {
		return nil, grepOut{}, fmt.Errorf("pattern %q is not a regular expression (RE2 syntax): %v", in.Pattern, err)
	}
	if in.Glob != "" {
		if _, err := path.Match(in.Glob, ""); err != nil {
			return nil, grepOut{}, fmt.Errorf("glob %q: %v", in.Glob, err)
		}
	}
	limit := in.MaxMatches
	switch {
	case limit < 0 || limit > maxMatches:
		return nil, grepOut{}, fmt.Errorf("max_matches %d: want 1 to %d", limit, maxMatches)
	case limit == 0:
		limit = defaultMatches
	}
	bx, err := s.resolve(ctx, in.Sandbox)
	if err != nil {
		return nil, grepOut{}, err
	}
	fi, err := s.stat(ctx, bx.id, p)
	if err != nil {
		return nil, grepOut{}, err
	}
	out := grepOut{Matches: []grepMatch{}}
	g := &grepper{re: re, limit: limit, out: &out}
	if !fi.IsDir {
		if !fi.Mode.IsRegular() {
			return nil, grepOut{}, fmt.Errorf("%s is not a regular file or a directory", p)
		}
		if fi.Size > grepFileMax {
			out.Skipped = append(out.Skipped, p+" (over 4 MiB)")
			return nil, out, nil
		}
		data, _, err := s.readWhole(ctx, bx.id, p, grepFileMax)
		if err != nil {
			return nil, grepOut{}, err
		}
		g.file(p, bytes.NewReader(data))
		return nil, out, nil
	}
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := handle.Open(tctx, s.b, bx.id).File(tctx, sandbox.FileRequest{Op: sandbox.FileTar, Path: p, Out: pw})
		pw.CloseWithError(err)
		errc <- err
	}()
	tr := tar.NewReader(pr)
	prefix := strings.TrimSuffix(p, "/")
	var readErr error
	for !g.done() {
		hdr, err := tr.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				readErr = err
			}
			break
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		name := path.Clean(prefix + "/" + hdr.Name)
		if in.Glob != "" {
			if ok, _ := path.Match(in.Glob, path.Base(hdr.Name)); !ok {
				continue
			}
		}
		if hdr.Size > grepFileMax {
			if len(out.Skipped) < 100 {
				out.Skipped = append(out.Skipped, name+" (over 4 MiB)")
			}
			continue
		}
		if g.scanned+hdr.Size > grepTotalMax {
			out.Truncated = true
			break
		}
		g.scanned += hdr.Size
		g.file(name, tr)
	}
	early := g.done() || out.Truncated || readErr != nil
	if early {
		cancel() // the rest of the archive is not wanted
	}
	_, _ = io.Copy(io.Discard, pr) // let the helper's writer end
	ferr := <-errc
	switch {
	case ctx.Err() != nil:
		return nil, grepOut{}, ctx.Err()
	case readErr != nil && ferr != nil && !errors.Is(ferr, context.Canceled):
		return nil, grepOut{}, ferr // the helper failed (ENOENT...): its error says why
	case readErr != nil:
		return nil, grepOut{}, fmt.Errorf("reading the files of %s: %w", p, readErr)
	case !early && ferr != nil:
		return nil, grepOut{}, ferr
	}
	return nil, out, nil
}

// grepper matches lines of files and bounds what it keeps.
type grepper struct {
	re      *regexp.Regexp
	limit   int
	out     *grepOut
	scanned int64
}

func (g *grepper) done() bool { return len(g.out.Matches) >= g.limit || g.out.Truncated }

// file searches one file's lines as grep does: each line without its
// newline, so that ^ and $ anchor at the line's bounds (a "\r" before
// the newline is part of the line, as for grep). A file with a NUL byte
// in its first 8 KiB is binary and skipped. The caller bounds a file at
// grepFileMax bytes, which bounds a line too.
func (g *grepper) file(name string, r io.Reader) {
	data, _ := io.ReadAll(io.LimitReader(r, grepFileMax))
	if bytes.IndexByte(data[:min(len(data), 8192)], 0) >= 0 {
		if len(g.out.Skipped) < 100 {
			g.out.Skipped = append(g.out.Skipped, name+" (binary)")
		}
		return
	}
	g.out.FilesScanned++
	for n := 1; len(data) > 0; n++ {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if !g.re.Match(line) {
			continue
		}
		text := line
		if len(text) > maxMatchLineLen {
			text = text[:maxMatchLineLen]
		}
		g.out.Matches = append(g.out.Matches, grepMatch{Path: name, Line: n,
			Text: strings.ToValidUTF8(strings.TrimRight(string(text), "\r"), "\uFFFD")})
		if g.done() {
			g.out.Truncated = true
			return
		}
	}
}
