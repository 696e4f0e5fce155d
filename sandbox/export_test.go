package sandbox

// SnapshotPart is snapshotPart, for the external tests.
type SnapshotPart = snapshotPart
