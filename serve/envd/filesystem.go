package envd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strconv"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	tentfs "github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/serve/envd/filesystempb"
)

// filesystemService serves filesystem.Filesystem.
type filesystemService struct{ h *Handler }

// Bounds of what the file helper may answer: one FileInfo, a listing.
const (
	maxInfoBytes    = 1 << 20
	maxListingBytes = 64 << 20
)

// limitBuffer is a buffer that fails past max bytes, and remembers it
// (the backend drops a failing writer without telling).
type limitBuffer struct {
	bytes.Buffer
	max  int
	what string
	err  error
}

func (b *limitBuffer) Write(p []byte) (int, error) {
	if b.err == nil && b.Len()+len(p) > b.max {
		b.err = errResourceExhausted(fmt.Sprintf("%s is larger than %d bytes", b.what, b.max))
	}
	if b.err != nil {
		return 0, b.err
	}
	return b.Buffer.Write(p)
}

// entryInfo turns the helper's FileInfo into envd's EntryInfo.
func entryInfo(fi tentfs.FileInfo) *filesystempb.EntryInfo {
	e := &filesystempb.EntryInfo{
		Name:         fi.Name,
		Path:         fi.Path,
		Size:         fi.Size,
		Mode:         uint32(fi.Mode.Perm()),
		Permissions:  fi.Mode.String(),
		Owner:        fi.Owner,
		Group:        fi.Group,
		ModifiedTime: timestamppb.New(fi.ModTime),
		Metadata:     fi.Metadata,
	}
	if e.Owner == "" {
		e.Owner = strconv.Itoa(fi.UID)
	}
	if e.Group == "" {
		e.Group = strconv.Itoa(fi.GID)
	}
	switch {
	case fi.Mode&fs.ModeSymlink != 0:
		e.Type = filesystempb.FileType_FILE_TYPE_SYMLINK
		link := fi.Link
		e.SymlinkTarget = &link
	case fi.IsDir:
		e.Type = filesystempb.FileType_FILE_TYPE_DIRECTORY
	case fi.Mode.IsRegular():
		e.Type = filesystempb.FileType_FILE_TYPE_FILE
	}
	return e
}

// infoOp runs a helper operation that answers one FileInfo.
func (bx *box) infoOp(ctx context.Context, req sandbox.FileRequest) (*filesystempb.EntryInfo, error) {
	out := &limitBuffer{max: maxInfoBytes, what: "the file's description"}
	req.Out = out
	if err := bx.fileOp(ctx, req); err != nil {
		return nil, rpcError(err)
	}
	if out.err != nil {
		return nil, out.err
	}
	var fi tentfs.FileInfo
	if err := json.Unmarshal(out.Bytes(), &fi); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("the file helper's answer: %w", err))
	}
	return bx.entryInfo(ctx, fi), nil
}

// resolveFor resolves the request's path in its sandbox.
func (s *filesystemService) resolveFor(ctx context.Context, p string) (*box, string, error) {
	bx, err := s.h.boxFor(ctx)
	if err != nil {
		return nil, "", err
	}
	abs, err := bx.resolve(ctx, p)
	return bx, abs, err
}

func (s *filesystemService) Stat(ctx context.Context, req *connect.Request[filesystempb.StatRequest]) (*connect.Response[filesystempb.StatResponse], error) {
	bx, p, err := s.resolveFor(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	e, err := bx.infoOp(ctx, sandbox.FileRequest{Op: sandbox.FileStat, Path: p})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystempb.StatResponse{Entry: e}), nil
}

func (s *filesystemService) MakeDir(ctx context.Context, req *connect.Request[filesystempb.MakeDirRequest]) (*connect.Response[filesystempb.MakeDirResponse], error) {
	bx, p, err := s.resolveFor(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	e, err := bx.infoOp(ctx, sandbox.FileRequest{Op: sandbox.FileMkdir, Path: p})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystempb.MakeDirResponse{Entry: e}), nil
}

func (s *filesystemService) Move(ctx context.Context, req *connect.Request[filesystempb.MoveRequest]) (*connect.Response[filesystempb.MoveResponse], error) {
	bx, src, err := s.resolveFor(ctx, req.Msg.GetSource())
	if err != nil {
		return nil, err
	}
	dst, err := bx.resolve(ctx, req.Msg.GetDestination())
	if err != nil {
		return nil, err
	}
	e, err := bx.infoOp(ctx, sandbox.FileRequest{Op: sandbox.FileRename, Path: src, To: dst})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystempb.MoveResponse{Entry: e}), nil
}

func (s *filesystemService) ListDir(ctx context.Context, req *connect.Request[filesystempb.ListDirRequest]) (*connect.Response[filesystempb.ListDirResponse], error) {
	bx, p, err := s.resolveFor(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	depth := max(req.Msg.GetDepth(), 1)
	out := &limitBuffer{max: maxListingBytes, what: "the listing"}
	if err := bx.fileOp(ctx, sandbox.FileRequest{Op: sandbox.FileList, Path: p, Depth: int(depth), Out: out}); err != nil {
		return nil, rpcError(err)
	}
	if out.err != nil {
		return nil, out.err
	}
	var infos []tentfs.FileInfo
	if err := json.Unmarshal(out.Bytes(), &infos); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("the file helper's listing: %w", err))
	}
	res := &filesystempb.ListDirResponse{Entries: make([]*filesystempb.EntryInfo, 0, len(infos))}
	for _, fi := range infos {
		res.Entries = append(res.Entries, bx.entryInfo(ctx, fi))
	}
	return connect.NewResponse(res), nil
}

func (s *filesystemService) Remove(ctx context.Context, req *connect.Request[filesystempb.RemoveRequest]) (*connect.Response[filesystempb.RemoveResponse], error) {
	bx, p, err := s.resolveFor(ctx, req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if p == "/" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("refusing to remove /"))
	}
	// A path that is not there is removed already (envd's answer too).
	if err := bx.fileOp(ctx, sandbox.FileRequest{Op: sandbox.FileRemoveAll, Path: p}); err != nil && errCode(err) != connect.CodeNotFound {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&filesystempb.RemoveResponse{}), nil
}
