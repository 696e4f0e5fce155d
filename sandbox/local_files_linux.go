package sandbox

import (
	"context"
	"io"
)

// The file verbs of a Local sandbox: the core's (see files_linux.go).

// File runs a raw file operation (see [Sandbox.File]).
func (h *localHandle) File(ctx context.Context, req FileRequest) error {
	sb, err := h.sandbox()
	if err != nil {
		return err
	}
	return sb.File(ctx, req)
}

// ReadFile streams the file at path to w (see [Sandbox.ReadFile]).
func (h *localHandle) ReadFile(ctx context.Context, path string, w io.Writer, opts ReadOptions) error {
	sb, err := h.sandbox()
	if err != nil {
		return err
	}
	return sb.ReadFile(ctx, path, w, opts)
}

// WriteFile writes r to the file at path (see [Sandbox.WriteFile]).
func (h *localHandle) WriteFile(ctx context.Context, path string, r io.Reader, opts WriteOptions) (FileInfo, error) {
	sb, err := h.sandbox()
	if err != nil {
		return FileInfo{}, err
	}
	return sb.WriteFile(ctx, path, r, opts)
}

// Stat describes the file at path (see [Sandbox.Stat]).
func (h *localHandle) Stat(ctx context.Context, path string) (FileInfo, error) {
	sb, err := h.sandbox()
	if err != nil {
		return FileInfo{}, err
	}
	return sb.Stat(ctx, path)
}

// ReadDir lists the directory at path (see [Sandbox.ReadDir]).
func (h *localHandle) ReadDir(ctx context.Context, path string, depth int) ([]FileInfo, error) {
	sb, err := h.sandbox()
	if err != nil {
		return nil, err
	}
	return sb.ReadDir(ctx, path, depth)
}

// Mkdir makes the directory at path (see [Sandbox.Mkdir]).
func (h *localHandle) Mkdir(ctx context.Context, path string) (FileInfo, error) {
	sb, err := h.sandbox()
	if err != nil {
		return FileInfo{}, err
	}
	return sb.Mkdir(ctx, path)
}

// Rename renames from to to (see [Sandbox.Rename]).
func (h *localHandle) Rename(ctx context.Context, from, to string) (FileInfo, error) {
	sb, err := h.sandbox()
	if err != nil {
		return FileInfo{}, err
	}
	return sb.Rename(ctx, from, to)
}

// Remove deletes the file at path (see [Sandbox.Remove]).
func (h *localHandle) Remove(ctx context.Context, path string, all bool) error {
	sb, err := h.sandbox()
	if err != nil {
		return err
	}
	return sb.Remove(ctx, path, all)
}

// Watch watches the directory at path (see [Sandbox.Watch]).
func (h *localHandle) Watch(ctx context.Context, path string, opts WatchOptions) (<-chan WatchEvent, error) {
	sb, err := h.sandbox()
	if err != nil {
		return nil, err
	}
	return sb.Watch(ctx, path, opts)
}
