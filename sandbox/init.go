package sandbox

import (
	"github.com/tent-sandbox/tent/internal/reexec"
	"github.com/tent-sandbox/tent/namespaces"
)

// Init must be the first call in the main function of every program that
// starts sandboxes. tent re-executes the program itself (through
// /proc/self/exe) in the modes listed in the package documentation ("The
// re-exec contract"): as each sandbox's init, its exec and file helpers,
// and, for package supervised, as a sandbox's supervisor. In those
// processes Init runs the mode and never returns. In every other process
// it returns at once.
//
// The init and the helpers in fact start earlier, while package
// namespaces is initialised (before packages that do not depend on it,
// which saves start-up time), so a program that forgets this call still
// runs sandboxes with [Cmd]; the call remains the documented contract, and
// the supervisor's modes need it. Should a re-executed copy ever run the
// program's own main instead, it refuses to start sandboxes
// ([ErrInitMissing]) and the host gives up after 10 s at most: never a
// hang or a fork loop.
func Init() {
	namespaces.MaybeRunInit()
	reexec.Run()
}
