//go:build !linux

package main

// oPath is 0 (read-only) where there is no O_PATH.
const oPath = 0
