package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tent-sandbox/tent/sandbox"
)

// templateExts are the file names a template may have, in lookup order.
var templateExts = []string{".json", ".yaml", ".yml"}

// ErrTemplateName is matched (errors.Is) by [LoadTemplate]'s error for a
// name that is not a template name (see [ValidName]): a path such as
// "../x" or "a/b", a hidden file or an empty name.
var ErrTemplateName = errors.New("a template name is 1 to 128 letters, digits, '.', '_' or '-'")

// LoadTemplate returns the spec of the template name in the templates
// directory dir, and whether dir has such a template. A template is a
// policy file named NAME.json, NAME.yaml or NAME.yml (looked up in that
// order), read now, so that an edit applies to the next sandbox, and
// applied to the zero Spec. With dir "", or no such file, it returns
// found false and no error: the caller decides what a missing template
// means (a built-in default, or an error).
//
// A name that is not [ValidName] never reaches the file system: the
// error, which matches [ErrTemplateName], names field (the request's
// field or the flag that carried the name, such as "templateID") and
// quotes the name. The errors of a template file that does not load or
// apply are [Load]'s and [Policy.Apply]'s, for the caller to wrap.
func LoadTemplate(dir, field, name string) (spec sandbox.Spec, found bool, err error) {
	if !ValidName(name) {
		return sandbox.Spec{}, false, fmt.Errorf("%s %q: %w", field, name, ErrTemplateName)
	}
	if dir == "" {
		return sandbox.Spec{}, false, nil
	}
	for _, ext := range templateExts {
		path := filepath.Join(dir, name+ext)
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		p, err := Load(path)
		if err != nil {
			return sandbox.Spec{}, false, err
		}
		if err := p.Apply(&spec, nil); err != nil {
			return sandbox.Spec{}, false, err
		}
		return spec, true, nil
	}
	return sandbox.Spec{}, false, nil
}

// TemplateNames lists the templates in dir, sorted by file name: each
// regular file NAME.json, NAME.yaml or NAME.yml whose NAME is
// [ValidName]. A name with more than one file is listed once per file.
func TemplateNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		ext := filepath.Ext(e.Name())
		n := strings.TrimSuffix(e.Name(), ext)
		if slices.Contains(templateExts, ext) && ValidName(n) && e.Type().IsRegular() {
			names = append(names, n)
		}
	}
	return names, nil
}
