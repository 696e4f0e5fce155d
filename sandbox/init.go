package sandbox

import "github.com/tent-sandbox/tent/namespaces"

// Init must be the first call in the main function of every program that
// starts sandboxes. tent re-executes the program itself (through
// /proc/self/exe) as each sandbox's init; in that process Init runs the
// init and never returns. In every other process it returns at once.
//
// A program that forgets it gets an immediate error from Start
// ([ErrInitMissing]), never a hang or a fork loop: the re-executed copy
// refuses to start sandboxes, and the host reports that the init did not
// answer.
func Init() { namespaces.MaybeRunInit() }
