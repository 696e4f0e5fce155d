package ctlmsg

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// A process that replaces itself with exec (an idle tent init or
// supervisor handing over to its holder, and back) hands its sockets and
// its state to the new image: the sockets as descriptors without
// close-on-exec (Dup), the state as JSON in a memfd (WriteState,
// ReadState).

// Dup returns a duplicate of c's descriptor without close-on-exec.
func Dup(c syscall.Conn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if cerr := rc.Control(func(s uintptr) { fd, err = unix.Dup(int(s)) }); cerr != nil {
		return -1, cerr
	}
	if err != nil {
		return -1, os.NewSyscallError("dup", err)
	}
	return fd, nil
}

// WriteState returns a memfd named name, without close-on-exec, that
// holds v as JSON.
func WriteState(name string, v any) (int, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return -1, err
	}
	fd, err := unix.MemfdCreate(name, 0)
	if err != nil {
		return -1, os.NewSyscallError("memfd_create", err)
	}
	if _, err := unix.Pwrite(fd, b, 0); err != nil {
		unix.Close(fd)
		return -1, os.NewSyscallError("pwrite", err)
	}
	return fd, nil
}

// ReadState decodes into v the state that WriteState left in the
// descriptor arg (its decimal number, 3 or more) and closes it.
func ReadState(arg string, v any) error {
	fd, err := strconv.Atoi(arg)
	if err != nil || fd < 3 {
		return fmt.Errorf("bad state descriptor %q", arg)
	}
	f := os.NewFile(uintptr(fd), "state")
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, 0, MaxMessage*16))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decoding the state: %w", err)
	}
	return nil
}
