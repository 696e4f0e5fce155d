package layer

// ChangeKind says how a path of a cow mount changed.
type ChangeKind string

// Kinds of change.
const (
	Added    ChangeKind = "added"
	Modified ChangeKind = "modified"
	Deleted  ChangeKind = "deleted"
)

// Change is one changed path of a cow mount, relative to its root.
type Change struct {
	Path string     `json:"path"`
	Kind ChangeKind `json:"kind"`
	Dir  bool       `json:"dir,omitempty"`
	// GitControl marks a git hook, config or commondir ([fs.GitControl]):
	// exported, it is what git on the host runs or reads next.
	GitControl bool `json:"git_control,omitempty"`
}
