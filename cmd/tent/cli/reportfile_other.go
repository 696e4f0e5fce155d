//go:build !linux

package cli

// oPath is 0 (read-only) where there is no O_PATH.
const oPath = 0
