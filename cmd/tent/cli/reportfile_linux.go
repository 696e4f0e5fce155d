package cli

import "golang.org/x/sys/unix"

// oPath opens the report's directory for the *at calls only (O_PATH: no
// read permission needed).
const oPath = unix.O_PATH
