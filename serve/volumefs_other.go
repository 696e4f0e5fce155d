//go:build !linux

package serve

import (
	"io"
	"os"
)

// volumeFS is Linux's (openat2 beneath the volume's directory): other
// systems serve no volume content.
type volumeFS struct{}

func openVolumeFS(string) (*volumeFS, error) {
	return nil, notImplemented("volumes (they need Linux)")
}

func (v *volumeFS) Close() error                             { return nil }
func (v *volumeFS) stat(string) (volumeEntry, error)         { return volumeEntry{}, errVolumesLinux }
func (v *volumeFS) openFile(string) (*os.File, int64, error) { return nil, 0, errVolumesLinux }
func (v *volumeFS) writeFile(string, io.Reader, uint32, bool) (volumeEntry, error) {
	return volumeEntry{}, errVolumesLinux
}
func (v *volumeFS) makeDir(string, uint32, bool) (volumeEntry, error) {
	return volumeEntry{}, errVolumesLinux
}
func (v *volumeFS) list(string, int) ([]volumeEntry, error) { return nil, errVolumesLinux }
func (v *volumeFS) setMode(string, *uint32) (volumeEntry, error) {
	return volumeEntry{}, errVolumesLinux
}
func (v *volumeFS) remove(string) error { return errVolumesLinux }

var errVolumesLinux = notImplemented("volumes (they need Linux)")

func (v *volumes) removeAside(string) error { return errVolumesLinux }
