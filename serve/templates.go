package serve

import (
	"context"
	"errors"
	"net/http"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
	"github.com/tent-sandbox/tent/serve/codeinterp"
)

// baseTemplate is the SDKs' default template: without a file of that
// name, the zero sandbox.Spec (no network, no mounts, every protection
// required) with the server's base limits.
const baseTemplate = "base"

// templateSpec returns the spec of template name, read from its file in
// the templates directory now (so edits apply to the next sandbox), and
// whether there is such a template. A file replaces a built-in
// template: base, the zero spec with the base limits, and
// code-interpreter-v1 (see codeInterpreterSpec).
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
	case name == codeinterp.Template:
		return s.codeInterpreterSpec()
	}
	return sandbox.Spec{}, false, nil
}

// codeInterpreterSpec is the built-in code-interpreter-v1 template (see
// package serve/codeinterp): the base template's limits, with memory for
// Python kernels, and tent's Code Interpreter server as its service. A
// host without the Python packages it needs gets a 404 naming them. The
// host's Python is looked for until found, then kept.
func (s *Server) codeInterpreterSpec() (sandbox.Spec, bool, error) {
	s.ciMu.Lock()
	defer s.ciMu.Unlock()
	if s.ciPython == "" {
		py, err := codeinterp.Probe(context.Background())
		if err != nil {
			var missing *codeinterp.MissingError
			if errors.As(err, &missing) {
				return sandbox.Spec{}, false, errorf(http.StatusNotFound, "template %q is built in, but %v", codeinterp.Template, err)
			}
			return sandbox.Spec{}, false, errorf(http.StatusInternalServerError, "template %q: %v", codeinterp.Template, err)
		}
		s.ciPython = py
	}
	spec, err := codeinterp.Spec(s.ciPython, s.baseLimits)
	if err != nil {
		return sandbox.Spec{}, false, errorf(http.StatusInternalServerError, "template %q: %v", codeinterp.Template, err)
	}
	return spec, true, nil
}
