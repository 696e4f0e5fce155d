package sandbox

import "github.com/tent-sandbox/tent/fs"

// QuotePath returns a path a sandbox chose as it is safe to print: plain
// printable ASCII unchanged, anything else in double quotes with C
// escapes (as git quotes paths), so that a file name can neither forge a
// line of output nor reach a terminal as an escape sequence.
func QuotePath(p string) string { return fs.QuoteName(p) }
