package handle

import (
	"context"
	"io"

	"github.com/tent-sandbox/tent/sandbox"
)

// The file verbs of a handle that could not be opened: Open's error.

func (f failed) ReadFile(context.Context, string, io.Writer, sandbox.ReadOptions) error {
	return f.err
}
func (f failed) WriteFile(context.Context, string, io.Reader, sandbox.WriteOptions) (sandbox.FileInfo, error) {
	return sandbox.FileInfo{}, f.err
}
func (f failed) Stat(context.Context, string) (sandbox.FileInfo, error) {
	return sandbox.FileInfo{}, f.err
}
func (f failed) ReadDir(context.Context, string, int) ([]sandbox.FileInfo, error) {
	return nil, f.err
}
func (f failed) Mkdir(context.Context, string) (sandbox.FileInfo, error) {
	return sandbox.FileInfo{}, f.err
}
func (f failed) Rename(context.Context, string, string) (sandbox.FileInfo, error) {
	return sandbox.FileInfo{}, f.err
}
func (f failed) Remove(context.Context, string, bool) error { return f.err }
func (f failed) Watch(context.Context, string, sandbox.WatchOptions) (<-chan sandbox.WatchEvent, error) {
	return nil, f.err
}
