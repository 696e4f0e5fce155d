package serve

import (
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

// baseTemplate is the SDKs' default template: without a file of that
// name, the zero sandbox.Spec (no network, no mounts, every protection
// required) with the server's base limits.
const baseTemplate = "base"

// templateExts are the file names a template may have, in lookup order.
var templateExts = []string{".json", ".yaml", ".yml"}

// templateSpec returns the spec of template name, read from its file in
// the templates directory now (so edits apply to the next sandbox), and
// whether there is such a template. The built-in base template is the
// zero spec with the base limits.
func (s *Server) templateSpec(name string) (sandbox.Spec, bool, error) {
	if !policy.ValidName(name) {
		return sandbox.Spec{}, false, errorf(http.StatusBadRequest, "templateID %q: a template name is 1 to 128 letters, digits, '.', '_' or '-'", name)
	}
	if dir := s.opts.TemplatesDir; dir != "" {
		for _, ext := range templateExts {
			path := filepath.Join(dir, name+ext)
			if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
				continue
			}
			p, err := policy.Load(path)
			if err != nil {
				return sandbox.Spec{}, false, errorf(http.StatusInternalServerError, "template %s: %v", name, err)
			}
			var spec sandbox.Spec
			if err := p.Apply(&spec, nil); err != nil {
				return sandbox.Spec{}, false, errorf(http.StatusInternalServerError, "template %s: %v", name, err)
			}
			return spec, true, nil
		}
	}
	if name == baseTemplate {
		return sandbox.Spec{Limits: s.baseLimits}, true, nil
	}
	return sandbox.Spec{}, false, nil
}
