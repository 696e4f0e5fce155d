package layer

// CowLayer is the host side of a copy-on-write mount: the directory it
// overlays (Source), where it is mounted inside (Target), and the upper
// layer that holds the sandbox's changes. The upper layer is the
// sandbox's and may change meanwhile: every method walks both trees
// descriptor-relative without following symlinks.
type CowLayer struct {
	Source string `json:"source"`
	Target string `json:"target"`
	Upper  string `json:"upper"`
}
