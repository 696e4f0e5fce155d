package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/namespaces"
)

// Mount adds a mount to the running sandbox (the lifecycle's "attach
// filesystem"). It is validated exactly as the mounts of a [Spec] are —
// and its target may not be one the sandbox already mounts — and it is
// bound with the same protections: read-only binds refuse writes with
// EROFS, rw binds reach the host (idmapped for a root caller), cow mounts
// get their own overlay layers, listed by CowLayers and captured by
// snapshots.
//
// The mount is visible to every command started after Attach returns.
// Commands already running see a new read-only mount too, but keep the
// Landlock domain they started with, so they cannot write to a new
// writable one. A missing mount point is created: on the sandbox's root
// (a read-only tmpfs that only tent writes to) by tent; beneath another
// mount (/tmp, $HOME, a writable mount) by the file helper, with the
// sandbox's own rights, so that only where the sandbox could create it.
// The spec returned by [Sandbox.Info] and recorded by snapshots includes
// the mount from then on.
func (s *Sandbox) Mount(ctx context.Context, m Mount) error {
	if m.Access == "" {
		m.Access = fs.ReadOnly
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := fs.Validate([]fs.Mount{m}, fs.StatSource); err != nil {
		return invalid(err)
	}
	s.makeMountpoint(ctx, m)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkRunning("attaching mounts"); err != nil {
		return err
	}
	p := s.run.plan
	all := append(slices.Clone(s.spec.Mounts), m)
	if err := fs.Validate(all, fs.StatSource); err != nil {
		return invalid(err)
	}
	for _, st := range p.cfg.Plan.Steps {
		if st.Target == m.Target {
			return invalid(fmt.Errorf("%w: target %s is already mounted in the sandbox", fs.ErrInvalidMount, m.Target))
		}
	}
	step := fs.Step{Kind: fs.KindBind, Target: m.Target, Source: m.Source, ReadOnly: !m.Writable(), Writable: m.Writable(), User: true, FD: -1}
	var layer *CowLayer
	var layerDir string
	if m.Access == fs.CopyOnWrite {
		var err error
		if layer, layerDir, err = p.addLayerDir(m, len(all)-1); err != nil {
			return err
		}
		step.Kind, step.Upper, step.Work = fs.KindOverlay, layer.Upper, filepath.Join(layerDir, "work")
	}
	fail := func(err error) error {
		if layerDir != "" {
			removeLayerDir(layerDir)
		}
		return err
	}

	// A rw mount's git guards are attached with it, or it is not attached.
	withGuards, _, _, err := withGitGuards([]fs.Mount{m}, s.spec.GitWritable, all)
	if err != nil {
		return fail(invalid(err))
	}
	var guards []fs.Step
	for i, g := range withGuards[1:] {
		gs := fs.Step{Kind: fs.KindBind, Target: g.Target, Source: g.Source, ReadOnly: !g.Writable(), Writable: g.Writable(), User: true, FD: -1}
		if p.privileged {
			gs.FD = 1 + i // after the mount's own descriptor
		}
		guards = append(guards, gs)
	}

	var fds []int
	if p.privileged {
		// Root's sources are opened (and rw ones idmapped) on the host;
		// a cow mount's upper and work directories follow its lower layer.
		var err error
		if fds, err = openUserMounts(withGuards, s.run.init.Pid(), p); err != nil {
			return fail(err)
		}
		defer closeFDs(fds)
		step.FD = 0
		if layer != nil {
			fd, err := unix.OpenTree(unix.AT_FDCWD, layerDir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
			if err != nil {
				return fail(fmt.Errorf("cow %s: %w", m.Target, os.NewSyscallError("open_tree", err)))
			}
			fds = append(fds, fd)
			if err := fs.MakePrivate(fd); err != nil {
				return fail(fmt.Errorf("cow %s: %w", m.Target, err))
			}
		}
	}
	var rules []fs.LandlockRule
	if m.Writable() {
		rules = fs.LandlockRules(&fs.Plan{Steps: append([]fs.Step{step}, guards...)})[1:] // without the "/" rule
	}
	s.nextExec++
	id := "attach-" + strconv.Itoa(s.nextExec)
	if err := s.run.init.Attach(id, namespaces.Attach{Step: step, Guards: guards, Rules: rules}, fds); err != nil {
		var se *namespaces.StartError
		if errors.As(err, &se) && strings.Contains(se.Msg, fs.ErrInvalidMount.Error()) {
			return fail(invalid(fmt.Errorf("attaching %s: %s", m.Target, se.Msg)))
		}
		if errors.Is(err, namespaces.ErrInitGone) {
			return fail(fmt.Errorf("%w: %w", ErrTerminated, err))
		}
		return fail(fmt.Errorf("attaching %s: %w", m.Target, err))
	}
	step.FD = -1
	if layer != nil {
		step.Upper, step.Work = layer.Upper, filepath.Join(layerDir, "work")
		p.layers = append(p.layers, *layer)
	}
	for i := range guards {
		guards[i].FD = -1
	}
	p.cfg.Plan.Steps = append(append(p.cfg.Plan.Steps, step), guards...)
	p.cfg.LandlockRules = append(p.cfg.LandlockRules, rules...)
	p.userMounts = all
	s.spec.Mounts = all
	return nil
}

// addLayerDir creates the upper and work directories of an attached cow
// mount (index i of the spec's mounts) under the plan's cow root.
func (p *plan) addLayerDir(m Mount, i int) (*CowLayer, string, error) {
	if p.cowRoot == "" {
		root := filepath.Join(os.TempDir(), "tent-cow-"+randomID())
		if err := os.Mkdir(root, 0o700); err != nil {
			return nil, "", fmt.Errorf("cow layers: %w", err)
		}
		p.cowRoot = root
	}
	dir := filepath.Join(p.cowRoot, strconv.Itoa(i))
	for _, d := range []string{dir, filepath.Join(dir, "upper"), filepath.Join(dir, "work")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			removeLayerDir(dir)
			return nil, "", fmt.Errorf("cow layers: %w", err)
		}
	}
	// The overlay's root shows the upper directory's mode: the source's.
	if fi, err := os.Stat(m.Source); err == nil {
		_ = os.Chmod(filepath.Join(dir, "upper"), fi.Mode().Perm())
	}
	if p.privileged { // owned by the sandbox's (unprivileged) host identity
		uid, gid := p.hostIDs()
		for _, d := range []string{p.cowRoot, dir, filepath.Join(dir, "upper"), filepath.Join(dir, "work")} {
			if err := os.Lchown(d, uid, gid); err != nil {
				removeLayerDir(dir)
				return nil, "", fmt.Errorf("cow layers: %w", err)
			}
		}
	}
	return &CowLayer{Source: m.Source, Target: m.Target, Upper: filepath.Join(dir, "upper")}, dir, nil
}

// removeLayerDir removes a cow layer directory that no overlay uses.
func removeLayerDir(dir string) {
	_ = removeLayers(dir)
}

// makeMountpoint creates m's missing mount point where the sandbox itself
// may, through the file helper (a directory, or an empty file for a file
// source); where it cannot, the mount that follows says why. The mount
// then opens the mount point without following symlinks, so one that the
// sandbox swaps for a symlink meanwhile is refused.
func (s *Sandbox) makeMountpoint(ctx context.Context, m Mount) {
	if err := s.file(ctx, FileRequest{Op: fileStat, Path: m.Target}, false); !errors.Is(err, os.ErrNotExist) {
		return
	}
	dir, entry := m.Target, ""
	if fi, err := os.Stat(m.Source); err == nil && !fi.IsDir() {
		dir, entry = path.Dir(m.Target), path.Base(m.Target)
	}
	// The helper's untar creates dir (and its parents) and extracts into
	// it an empty archive, or one empty file.
	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	if entry != "" {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: entry, Mode: 0o644}); err != nil {
			return
		}
	}
	if err := tw.Close(); err != nil {
		return
	}
	_ = s.File(ctx, FileRequest{Op: FileUntar, Path: dir, In: &archive})
}
