package fs

// LandlockRule grants Access (kernel LANDLOCK_ACCESS_FS_* bits) beneath
// Path, a path inside the sandbox.
type LandlockRule struct {
	Path   string `json:"path"`
	Access uint64 `json:"access"`
}
