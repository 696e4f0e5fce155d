package mcp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tent-sandbox/tent/internal/handle"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

// Snapshots. The model may fork or restore only the snapshots this
// server took: a snapshot carries its sandbox's spec, and one taken of
// another sandbox of the state directory could hold wider mounts or
// network than the operator gave the model. Forks keep their snapshot's
// spec (no overrides): the network, limits and mounts stay the
// operator's.

type snapshotOut struct {
	Snapshot string    `json:"snapshot" jsonschema:"the snapshot's id, for sandbox_fork and sandbox_restore"`
	Sandbox  string    `json:"sandbox" jsonschema:"the sandbox it was taken of"`
	Created  time.Time `json:"created"`
}

type snapshotIn struct {
	Snapshot string `json:"snapshot" jsonschema:"a snapshot id from snapshot_create"`
	Name     string `json:"name,omitempty" jsonschema:"a name for the new sandbox"`
}

type restoreIn struct {
	Snapshot string `json:"snapshot" jsonschema:"a snapshot id from snapshot_create"`
	Sandbox  string `json:"sandbox,omitempty" jsonschema:"the sandbox to replace; leave out for the default sandbox"`
}

type restoreOut struct {
	sandboxView
	Replaced string `json:"replaced" jsonschema:"the id of the sandbox that was killed and replaced"`
}

// ownSnapshot checks that id (or a unique prefix of it) is a snapshot
// this server took, and returns its full id.
func (s *Server) ownSnapshot(id string) (string, error) {
	if id == "" {
		return "", errors.New("snapshot is empty: give an id from snapshot_create")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var found []string
	for sid := range s.snaps {
		if sid == id {
			return sid, nil
		}
		if len(id) >= 4 && len(sid) > len(id) && sid[:len(id)] == id {
			found = append(found, sid)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", fmt.Errorf("no snapshot %q taken by this server: only snapshots from snapshot_create can be forked or restored", id)
	}
	slices.Sort(found)
	return "", fmt.Errorf("snapshot %q: %w (it could be %v)", id, sandbox.ErrAmbiguous, found)
}

// fork provisions a sandbox from one of this server's snapshots.
func (s *Server) fork(ctx context.Context, snapID, name, template string) (*box, sandbox.Info, error) {
	if name != "" && !policy.ValidName(name) {
		return nil, sandbox.Info{}, fmt.Errorf("name %q: a name is 1 to 128 letters, digits, '.', '_' or '-'", name)
	}
	if err := s.reserve(name); err != nil {
		return nil, sandbox.Info{}, err
	}
	info, err := s.b.Fork(ctx, snapID, sandbox.ForkOverrides{Labels: map[string]string{labelTemplate: template, labelOwner: "tent-mcp"}})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release(name)
	if err != nil {
		return nil, info, fmt.Errorf("forking snapshot %s: %w", snapID, err)
	}
	bx := &box{id: info.ID, name: name, template: template, created: info.Created}
	if s.closed {
		_ = handle.Open(context.WithoutCancel(ctx), s.b, info.ID).Terminate(context.WithoutCancel(ctx))
		return nil, info, errClosed
	}
	s.boxes = append(s.boxes, bx)
	return bx, info, nil
}

func (s *Server) templateOf(snapID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snaps[snapID]
}

func (s *Server) addSnapshotTools() {
	addTool(s, &sdk.Tool{Name: "snapshot_create", Title: "Snapshot a sandbox",
		Description: "Save a sandbox's files (its writable layers: /tmp, $HOME, copy-on-write mounts; not read-write host mounts) so that sandbox_fork can start a copy of it and sandbox_restore can roll it back. Running processes are not saved."},
		func(ctx context.Context, _ *sdk.CallToolRequest, in sandboxRef) (*sdk.CallToolResult, snapshotOut, error) {
			bx, err := s.resolve(ctx, in.Sandbox)
			if err != nil {
				return nil, snapshotOut{}, err
			}
			snap, err := handle.Open(ctx, s.b, bx.id).Snapshot(ctx)
			if err != nil {
				return nil, snapshotOut{}, fmt.Errorf("snapshotting %s: %w", bx.id, err)
			}
			s.mu.Lock()
			s.snaps[snap.ID] = bx.template
			s.mu.Unlock()
			return nil, snapshotOut{Snapshot: snap.ID, Sandbox: bx.id, Created: snap.Created}, nil
		})
	addTool(s, &sdk.Tool{Name: "sandbox_fork", Title: "Fork a snapshot",
		Description: "Start a new sandbox from a snapshot taken with snapshot_create: a copy of the files at that moment, with the same mounts, network and limits. The original is untouched."},
		func(ctx context.Context, _ *sdk.CallToolRequest, in snapshotIn) (*sdk.CallToolResult, sandboxView, error) {
			id, err := s.ownSnapshot(in.Snapshot)
			if err != nil {
				return nil, sandboxView{}, err
			}
			bx, info, err := s.fork(ctx, id, in.Name, s.templateOf(id))
			if err != nil {
				return nil, sandboxView{}, err
			}
			return nil, s.view(bx, info), nil
		})
	addTool(s, &sdk.Tool{Name: "sandbox_restore", Title: "Restore a snapshot",
		Description: "Roll a sandbox back to a snapshot: a new sandbox is started from the snapshot and replaces the given one, which is killed (with its background commands). The replacement has a new id; if the default sandbox was replaced, the new one is the default.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true)}},
		func(ctx context.Context, _ *sdk.CallToolRequest, in restoreIn) (*sdk.CallToolResult, restoreOut, error) {
			id, err := s.ownSnapshot(in.Snapshot)
			if err != nil {
				return nil, restoreOut{}, err
			}
			old, err := s.resolve(ctx, in.Sandbox)
			if err != nil {
				return nil, restoreOut{}, err
			}
			s.mu.Lock()
			wasDefault := s.defaultID == old.id
			s.mu.Unlock()
			s.forget(old.id) // its slot goes to the replacement
			bx, info, err := s.fork(ctx, id, old.name, s.templateOf(id))
			if err != nil {
				s.mu.Lock()
				s.boxes = append(s.boxes, old) // nothing changed
				if wasDefault {
					s.defaultID = old.id
				}
				s.mu.Unlock()
				return nil, restoreOut{}, err
			}
			if err := handle.Open(ctx, s.b, old.id).Terminate(ctx); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
				s.log.Warn("mcp: terminating a restored sandbox", "id", old.id, "err", err)
			}
			if wasDefault {
				s.mu.Lock()
				s.defaultID = bx.id
				s.mu.Unlock()
			}
			return nil, restoreOut{sandboxView: s.view(bx, info), Replaced: old.id}, nil
		})
}
