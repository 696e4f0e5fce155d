package transfer

import "github.com/tent-sandbox/tent/fs/files"

// Bounds of a file's metadata ([sandbox.WriteOptions].Metadata, and a
// [sandbox.FileInfo]'s): how many entries, and how long a name or a value
// may be. A write beyond them fails with EINVAL; entries beyond are not
// reported. (They are the file helper's, package fs/files.)
const (
	MaxMetadataEntries = files.MaxMetadataEntries
	MaxMetadataName    = files.MaxMetadataName
	MaxMetadataValue   = files.MaxMetadataValue
)
