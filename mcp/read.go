package mcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tent-sandbox/tent/internal/handle"
	"github.com/tent-sandbox/tent/sandbox"
)

// Reading and editing text files: file_read returns a range of lines,
// stopping the file helper once it has them; file_edit reads a whole
// file (bounded), replaces an exact string and writes it back.

// readWhole reads a regular file of at most max bytes.
func (s *Server) readWhole(ctx context.Context, id, path string, max int) ([]byte, sandbox.FileInfo, error) {
	fi, err := s.stat(ctx, id, path)
	if err != nil {
		return nil, fi, err
	}
	link := fi.Mode&os.ModeSymlink != 0 // read as the sandbox resolves it, bounded below
	if !fi.Mode.IsRegular() && !link {
		return nil, fi, fmt.Errorf("%s is not a regular file (%s)", path, viewFile(fi, path).Type)
	}
	if fi.Size > int64(max) && !link {
		return nil, fi, fmt.Errorf("%s is %d bytes, more than the %d this tool handles at once: use shell (sed, awk) for large files", path, fi.Size, max)
	}
	w := &capWriter{max: max}
	err = handle.Open(ctx, s.b, id).ReadFile(ctx, path, w, sandbox.ReadOptions{Limit: int64(max)})
	if w.over || errors.Is(err, syscall.EFBIG) {
		return nil, fi, fmt.Errorf("%s is more than the %d bytes this tool handles at once (it grew, or is behind a symlink): use shell (sed, awk) for large files", path, max)
	}
	return w.buf.Bytes(), fi, notRegular(err, path)
}

// notRegular explains the file helper's EINVAL for a read: the path is
// not a regular file, seen through a symlink.
func notRegular(err error, path string) error {
	if errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("%s is not a regular file (a device, FIFO or socket behind a symlink?): file_stat describes it: %w", path, err)
	}
	return err
}

// lineCollector keeps lines from..to (1-based, inclusive) of what is
// written to it, at most max bytes, and cancels the read once it has
// them.
type lineCollector struct {
	mu       sync.Mutex
	from, to int
	max      int
	line     int
	out      []byte
	seen     int64
	pos      int64 // bytes looked at before stopping
	binary   bool
	cut      bool // max reached before line to
	finished bool // stopped early: the rest was not read
	stop     context.CancelFunc
}

func (c *lineCollector) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	if c.finished {
		return n, nil
	}
	if c.seen < 8192 && bytes.IndexByte(p[:min(len(p), int(8192-c.seen))], 0) >= 0 {
		c.binary, c.finished = true, true
		c.stop()
		return n, nil
	}
	c.seen += int64(n)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i+1]
		}
		p = p[len(chunk):]
		c.pos += int64(len(chunk))
		if c.line >= c.from && c.line <= c.to {
			if len(c.out)+len(chunk) > c.max {
				c.pos -= int64(len(chunk) - (c.max - len(c.out)))
				c.out = append(c.out, chunk[:c.max-len(c.out)]...)
				c.cut, c.finished = true, true
				c.stop()
				return n, nil
			}
			c.out = append(c.out, chunk...)
		}
		if i >= 0 {
			if c.line == c.to {
				c.finished = true
				c.stop()
				return n, nil
			}
			c.line++
		}
	}
	return n, nil
}

type readIn struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"the sandbox's id, id prefix or name; leave out for the default sandbox"`
	Path    string `json:"path" jsonschema:"the file, inside the sandbox"`
	Offset  int    `json:"offset,omitempty" jsonschema:"the first line to return, counting from 1 (default 1)"`
	Limit   int    `json:"limit,omitempty" jsonschema:"how many lines to return (default 2000)"`
}

type readOut struct {
	Path      string `json:"path"`
	Content   string `json:"content" jsonschema:"the lines asked for, exactly as in the file"`
	StartLine int    `json:"start_line"`
	EndLine   int    `json:"end_line" jsonschema:"the last line returned (start_line-1 when none)"`
	Size      int64  `json:"size" jsonschema:"the file's size in bytes (-1 when path is a symlink)"`
	More      bool   `json:"more" jsonschema:"the file goes on after end_line: read on with offset end_line+1"`
	Truncated bool   `json:"truncated" jsonschema:"the lines asked for were more than 256 KiB and were cut"`
}

type editIn struct {
	Sandbox    string `json:"sandbox,omitempty" jsonschema:"the sandbox's id, id prefix or name; leave out for the default sandbox"`
	Path       string `json:"path" jsonschema:"the file to edit, inside the sandbox"`
	OldString  string `json:"old_string" jsonschema:"the exact text to replace, whitespace and indentation included; it must occur exactly once unless replace_all"`
	NewString  string `json:"new_string" jsonschema:"the text to put in its place"`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"replace every occurrence instead of requiring exactly one"`
}

type editOut struct {
	Path         string `json:"path"`
	Replacements int    `json:"replacements"`
	Size         int64  `json:"size" jsonschema:"the file's new size"`
}

func (s *Server) addReadTools(inside string) {
	addTool(s, &sdk.Tool{Name: "file_read", Title: "Read a file",
		Description: "Read lines of a text file: offset (from 1) and limit (default 2000 lines, at most 256 KiB returned; the result says when the file goes on). Binary files are refused." + inside,
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, _ *sdk.CallToolRequest, in readIn) (*sdk.CallToolResult, readOut, error) {
			if err := checkPath("path", in.Path); err != nil {
				return nil, readOut{}, err
			}
			if in.Offset < 0 || in.Limit < 0 {
				return nil, readOut{}, fmt.Errorf("offset and limit count lines: want positive numbers")
			}
			bx, err := s.resolve(ctx, in.Sandbox)
			if err != nil {
				return nil, readOut{}, err
			}
			fi, err := s.stat(ctx, bx.id, in.Path)
			if err != nil {
				return nil, readOut{}, err
			}
			// A symlink is read as the sandbox resolves it (inside it).
			link := fi.Mode&os.ModeSymlink != 0
			if !fi.Mode.IsRegular() && !link {
				t := viewFile(fi, in.Path).Type
				if t == "dir" {
					return nil, readOut{}, fmt.Errorf("%s is a directory: file_list lists it", in.Path)
				}
				return nil, readOut{}, fmt.Errorf("%s is not a regular file but a %s: file_stat describes it", in.Path, t)
			}
			from := max(in.Offset, 1)
			limit := in.Limit
			if limit == 0 {
				limit = defaultReadLines
			}
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			c := &lineCollector{from: from, to: from + limit - 1, max: maxReadBytes, line: 1, stop: cancel}
			err = handle.Open(rctx, s.b, bx.id).ReadFile(rctx, in.Path, c, sandbox.ReadOptions{})
			c.mu.Lock()
			defer c.mu.Unlock()
			if err != nil && !c.finished {
				return nil, readOut{}, notRegular(err, in.Path)
			}
			if c.binary {
				return nil, readOut{}, fmt.Errorf("%s is a binary file (it has NUL bytes): inspect it with shell, e.g. od -c or file", in.Path)
			}
			out := readOut{Path: in.Path, Content: strings.ToValidUTF8(string(c.out), "\uFFFD"), StartLine: from, Size: fi.Size, Truncated: c.cut}
			out.EndLine = from - 1 + bytes.Count(c.out, []byte("\n"))
			if len(c.out) > 0 && !bytes.HasSuffix(c.out, []byte("\n")) {
				out.EndLine++
			}
			out.More = c.finished && (c.pos < fi.Size || link)
			if link {
				out.Size = -1 // the target's size is not known here
			}
			if from > 1 && len(c.out) == 0 && !c.finished {
				return nil, readOut{}, fmt.Errorf("%s has fewer than %d lines: offset is past its end", in.Path, from)
			}
			return nil, out, nil
		})
	addTool(s, &sdk.Tool{Name: "file_edit", Title: "Edit a file",
		Description: "Replace an exact string in a text file (at most 10 MiB). Fails, changing nothing, when old_string does not occur, or occurs more than once and replace_all is not set: then include more surrounding lines to make it unique." + inside},
		func(ctx context.Context, _ *sdk.CallToolRequest, in editIn) (*sdk.CallToolResult, editOut, error) {
			if err := checkPath("path", in.Path); err != nil {
				return nil, editOut{}, err
			}
			if in.OldString == "" {
				return nil, editOut{}, fmt.Errorf("old_string is empty: give the exact text to replace (file_write replaces a whole file)")
			}
			if in.OldString == in.NewString {
				return nil, editOut{}, fmt.Errorf("old_string and new_string are the same: nothing to change")
			}
			bx, err := s.resolve(ctx, in.Sandbox)
			if err != nil {
				return nil, editOut{}, err
			}
			data, fi, err := s.readWhole(ctx, bx.id, in.Path, maxWholeFile)
			if err != nil {
				return nil, editOut{}, err
			}
			text := string(data)
			n := strings.Count(text, in.OldString)
			switch {
			case n == 0:
				return nil, editOut{}, fmt.Errorf("old_string does not occur in %s: file_read it and copy the exact text (whitespace and indentation count); the file is unchanged", in.Path)
			case n > 1 && !in.ReplaceAll:
				return nil, editOut{}, fmt.Errorf("old_string occurs %d times in %s (at lines %s): include more surrounding text to make it unique, or set replace_all; the file is unchanged", n, in.Path, occurrenceLines(text, in.OldString, 10))
			}
			if !in.ReplaceAll {
				n = 1
			}
			text = strings.Replace(text, in.OldString, in.NewString, n)
			if len(text) > maxWholeFile {
				return nil, editOut{}, fmt.Errorf("the edited file would be %d bytes, more than %d", len(text), maxWholeFile)
			}
			mode := fi.Mode.Perm()
			if fi.Mode&os.ModeSymlink != 0 {
				mode = 0o644 // the target's mode is kept: it exists, it was just read
			}
			if _, err := handle.Open(ctx, s.b, bx.id).WriteFile(ctx, in.Path, strings.NewReader(text), sandbox.WriteOptions{Mode: mode}); err != nil {
				return nil, editOut{}, err
			}
			return nil, editOut{Path: in.Path, Replacements: n, Size: int64(len(text))}, nil
		})
}

// occurrenceLines lists the line numbers where sub starts, at most n.
func occurrenceLines(text, sub string, n int) string {
	var lines []string
	off := 0
	for len(lines) < n {
		i := strings.Index(text[off:], sub)
		if i < 0 {
			break
		}
		lines = append(lines, strconv.Itoa(1+strings.Count(text[:off+i], "\n")))
		off += i + len(sub)
	}
	return strings.Join(lines, ", ")
}
