package oci

import (
	"fmt"
	"net"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// openPTY opens a new pseudo-terminal of the host's devpts: the master
// goes to the console socket, the slave (raw, so that it passes bytes
// as they are) stays with the supervisor or exec helper, which relays
// it to the terminal inside the sandbox.
func openPTY() (master, slave *os.File, err error) {
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, os.NewSyscallError("open /dev/ptmx", err)
	}
	master = os.NewFile(uintptr(m), "/dev/ptmx")
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, nil, os.NewSyscallError("ioctl TIOCSPTLCK", err)
	}
	n, err := unix.IoctlGetInt(m, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, nil, os.NewSyscallError("ioctl TIOCGPTN", err)
	}
	name := "/dev/pts/" + strconv.Itoa(n)
	s, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		master.Close()
		return nil, nil, os.NewSyscallError("open "+name, err)
	}
	slave = os.NewFile(uintptr(s), name)
	t, err := unix.IoctlGetTermios(s, unix.TCGETS)
	if err == nil {
		t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
		t.Oflag &^= unix.OPOST
		t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
		t.Cflag &^= unix.CSIZE | unix.PARENB
		t.Cflag |= unix.CS8
		t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
		err = unix.IoctlSetTermios(s, unix.TCSETS, t)
	}
	if err != nil {
		master.Close()
		slave.Close()
		return nil, nil, os.NewSyscallError("ioctl TCSETS", err)
	}
	return master, slave, nil
}

// sendConsole hands master to the console socket at path (SCM_RIGHTS,
// with the terminal's name as the message, as runc does).
func sendConsole(path string, master *os.File) error {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("failed to connect to the console socket: %w", err)
	}
	defer c.Close()
	if _, _, err := c.WriteMsgUnix([]byte(master.Name()), unix.UnixRights(int(master.Fd())), nil); err != nil {
		return fmt.Errorf("failed to send the console to the console socket: %w", err)
	}
	return nil
}

// windowSize reads a terminal's size (zero on error: the default).
func windowSize(f *os.File) (rows, cols uint16) {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, 0
	}
	return ws.Row, ws.Col
}
