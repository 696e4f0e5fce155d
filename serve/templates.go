package serve

import (
	"errors"
	"net/http"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

// baseTemplate is the SDKs' default template: without a file of that
// name, the zero sandbox.Spec (no network, no mounts, every protection
// required) with the server's base limits.
const baseTemplate = "base"

// templateSpec returns the spec of template name, read from its file in
// the templates directory now (so edits apply to the next sandbox), and
// whether there is such a template. The built-in base template is the
// zero spec with the base limits.
func (s *Server) templateSpec(name string) (sandbox.Spec, bool, error) {
	spec, found, err := policy.LoadTemplate(s.opts.TemplatesDir, "templateID", name)
	switch {
	case errors.Is(err, policy.ErrTemplateName):
		return sandbox.Spec{}, false, errorf(http.StatusBadRequest, "%v", err)
	case err != nil:
		return sandbox.Spec{}, false, errorf(http.StatusInternalServerError, "template %s: %v", name, err)
	case found:
		return spec, true, nil
	case name == baseTemplate:
		return sandbox.Spec{Limits: s.baseLimits}, true, nil
	}
	return sandbox.Spec{}, false, nil
}
