package sandbox

import "github.com/tent-sandbox/tent/namespaces"

// Init must be the first call in the main function of every program that
// starts sandboxes. tent re-executes the program itself (through
// /proc/self/exe) as each sandbox's init; in that process Init runs the
// init and never returns. In every other process it returns at once.
//
// The init in fact starts earlier, while the namespaces package is
// initialised (before packages that do not depend on it, which saves
// start-up time), so a program that forgets this call still works; the
// call remains the documented contract. Should the re-executed copy ever
// run the program's own main instead, it refuses to start sandboxes
// ([ErrInitMissing]) and the host gives up after 10 s at most: never a
// hang or a fork loop.
func Init() { namespaces.MaybeRunInit() }
