package namespaces

// The init and the trampoline start from this package's initialisation,
// before the packages that do not depend on it (a CLI framework, YAML, the
// embedding program's own) are initialised: on machines where page faults
// are expensive that is a large share of a sandbox's start-up. It also
// means a program that forgets sandbox.Init still works.
func init() { MaybeRunInit() }
