package sandbox

// WindowSize is a terminal's size in character cells.
type WindowSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// Terminal asks for a terminal inside the sandbox for a command
// ([Cmd.TTY], [ExecRequest.TTY]), as `docker run -t` gives one.
//
// The terminal is a pseudo-terminal of the sandbox's own devpts instance
// (its /dev/pts), allocated by the sandbox's init; the command is the
// leader of a new session with it as its controlling terminal and as
// its fds 0, 1 and 2, so shells get job control and full-screen programs
// work. tent copies the caller's Stdin into the terminal and the
// terminal's output into Stdout (Stderr is not used: the command's
// stderr is the terminal too). The caller's own terminal is never passed
// into the sandbox: a command cannot push input into it (TIOCSTI stays
// denied by seccomp in any case). Putting the caller's terminal in raw
// mode, so that keys such as Ctrl-C and Ctrl-Z reach the terminal inside,
// is the caller's business (the tent CLI does it for -it).
type Terminal struct {
	// Size is the initial size; zero means 24 rows of 80 columns.
	Size WindowSize
	// Resize, when not nil, is read while the command runs: each size
	// received resizes the terminal, and the kernel sends SIGWINCH to
	// the terminal's foreground process group.
	Resize <-chan WindowSize
}

// size returns the initial size, with the default for zero fields.
func (t *Terminal) size() WindowSize {
	s := t.Size
	if s.Rows == 0 {
		s.Rows = 24
	}
	if s.Cols == 0 {
		s.Cols = 80
	}
	return s
}
