package sandbox

// localName is the [Backend.Name] of [Local].
const localName = "local"

// LocalOptions configure a [Local] backend.
type LocalOptions struct {
	// Provision is passed to every sandbox the backend provisions, forks
	// or resumes (logger, network audit log, resolver); its Logger also
	// receives the backend's own debug logs. Nil Logger discards them.
	Provision ProvisionOptions
	// SnapshotDir is the directory snapshots go to; they outlive the
	// backend (the tent CLI's is the snapshots directory of its state
	// directory, so `tent snapshot ls` and `tent fork` see them). Empty,
	// each Local keeps its snapshots in a temporary directory of its own,
	// created at the first Snapshot and removed, with them, by Close.
	SnapshotDir string
}
