package transfer

import "github.com/tent-sandbox/tent/fs"

// Bounds of a file's metadata ([sandbox.WriteOptions].Metadata, and a
// [sandbox.FileInfo]'s): how many entries, and how long a name or a value
// may be. A write beyond them fails with EINVAL; entries beyond are not
// reported. (They are the file helper's, package fs's.)
const (
	MaxMetadataEntries = fs.MaxMetadataEntries
	MaxMetadataName    = fs.MaxMetadataName
	MaxMetadataValue   = fs.MaxMetadataValue
)
