package envd

import (
	"context"
	"errors"
	"io/fs"
	"strconv"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/serve/envd/filesystempb"
)

// filesystemService serves filesystem.Filesystem.
type filesystemService struct{ h *Handler }

// entryInfo turns the helper's FileInfo into envd's EntryInfo.
func entryInfo(fi sandbox.FileInfo) *filesystempb.EntryInfo {
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
	if fi.Mode&fs.ModeSymlink == 0 {
		e.Type = entryType(fi.Mode)
		return e
	}
	// A symlink as envd reports it: the type and permission bits of what
	// it resolves to, and that file's path, links resolved, as its
	// target; one that resolves to nothing has no type, mode 0, and its
	// own path as the target.
	e.Mode, e.Type = 0, filesystempb.FileType_FILE_TYPE_UNSPECIFIED
	target := fi.Path
	if fi.Target != nil {
		target = fi.Target.Path
		e.Mode, e.Type = uint32(fi.Target.Mode.Perm()), entryType(fi.Target.Mode)
	}
	e.SymlinkTarget = &target
	return e
}

// entryType is envd's type of a file of mode m.
func entryType(m fs.FileMode) filesystempb.FileType {
	switch {
	case m.IsDir():
		return filesystempb.FileType_FILE_TYPE_DIRECTORY
	case m.IsRegular():
		return filesystempb.FileType_FILE_TYPE_FILE
	}
	return filesystempb.FileType_FILE_TYPE_UNSPECIFIED
}

// infoOp runs a file verb that answers one FileInfo.
func (bx *box) infoOp(ctx context.Context, verb func(sandbox.Handle) (sandbox.FileInfo, error)) (*filesystempb.EntryInfo, error) {
	var fi sandbox.FileInfo
	err := bx.files(ctx, func(hd sandbox.Handle) error {
		var err error
		fi, err = verb(hd)
		return err
	})
	if err != nil {
		return nil, rpcError(err)
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
	e, err := bx.infoOp(ctx, func(hd sandbox.Handle) (sandbox.FileInfo, error) { return hd.Stat(ctx, p) })
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
	e, err := bx.infoOp(ctx, func(hd sandbox.Handle) (sandbox.FileInfo, error) { return hd.Mkdir(ctx, p) })
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
	e, err := bx.infoOp(ctx, func(hd sandbox.Handle) (sandbox.FileInfo, error) { return hd.Rename(ctx, src, dst) })
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
	var infos []sandbox.FileInfo
	err = bx.files(ctx, func(hd sandbox.Handle) error {
		var err error
		infos, err = hd.ReadDir(ctx, p, int(depth))
		return err
	})
	if err != nil {
		return nil, rpcError(err)
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
	err = bx.files(ctx, func(hd sandbox.Handle) error { return hd.Remove(ctx, p, true) })
	if err != nil && errCode(err) != connect.CodeNotFound {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&filesystempb.RemoveResponse{}), nil
}
