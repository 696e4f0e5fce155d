package transfer

// DefaultMaxSize is the limit `tent cp` puts on the file data of a copy
// out of a sandbox by default (8 GiB), for [Options].MaxSize.
const DefaultMaxSize = 8 << 30

// MaxEntries bounds the entries of a directory copied out of a sandbox
// (each costs the host an inode).
const MaxEntries = 1 << 20

// Options tune a copy out of a sandbox.
type Options struct {
	// FollowLink follows the source when it is a symlink (only the source
	// itself: symlinks beneath a directory are always copied as links).
	FollowLink bool
	// MaxSize is how many bytes of file data, at most, the copy brings
	// out; a copy that would pass it fails with [ErrTooLarge]. Zero lets
	// only empty files through: callers choose a limit, such as
	// [DefaultMaxSize].
	MaxSize int64
}
