package namespaces

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// runSudoHelper is the helper's main: its stdin is the listening socket.
func runSudoHelper() int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	active := 0
	for {
		mu.Lock()
		idle := active == 0
		mu.Unlock()
		timeout := -1
		if idle {
			timeout = int(sudoHelperLinger / time.Millisecond)
		}
		pfd := []unix.PollFd{{Fd: 0, Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, timeout)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "tent-sudo-helper: %v\n", os.NewSyscallError("poll", err))
			wg.Wait()
			return 1
		}
		if n == 0 {
			mu.Lock()
			idle = active == 0
			mu.Unlock()
			if idle {
				wg.Wait()
				return 0
			}
			continue
		}
		cfd, _, err := unix.Accept4(0, unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) || errors.Is(err, unix.ECONNABORTED) {
				continue
			}
			fmt.Fprintf(os.Stderr, "tent-sudo-helper: %v\n", os.NewSyscallError("accept4", err))
			wg.Wait()
			return 1
		}
		mu.Lock()
		active++
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			sudoSession(os.NewFile(uintptr(cfd), "sudo"))
			mu.Lock()
			active--
			mu.Unlock()
		}()
	}
}

// sudoSession serves one client: it reads the request and its
// descriptors, runs the command in a session of its own, delivers the
// client's signals to it, kills it if the client goes away, and sends
// its wait status.
func sudoSession(conn *os.File) {
	defer conn.Close()
	// A client that sends no request in time is dropped, so that none
	// keeps the helper (and the sandbox) from idling.
	_ = conn.SetReadDeadline(time.Now().Add(sudoRequestTimeout))
	fds, req, err := readSudoRequest(conn)
	_ = conn.SetReadDeadline(time.Time{})
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		fmt.Fprintf(os.Stderr, "tent-sudo-helper: %v\n", err)
		return
	}
	files := make([]*os.File, 3)
	for i := range files {
		files[i] = os.NewFile(uintptr(fds[i]), "stdio")
		defer files[i].Close()
	}
	p, err := os.StartProcess(req.Path, req.Args, &os.ProcAttr{Dir: req.Dir, Env: req.Env, Files: files,
		Sys: &syscall.SysProcAttr{Setsid: true}})
	if err != nil {
		fmt.Fprintf(files[2], "sudo: %v\n", err)
		code := 126
		if errors.Is(err, os.ErrNotExist) {
			code = 127
		}
		_, _ = conn.Write(binary.LittleEndian.AppendUint32(nil, uint32(code<<8)))
		return
	}
	done := make(chan struct{})
	go func() {
		var b [4]byte
		for {
			if _, err := io.ReadFull(conn, b[:]); err != nil {
				select {
				case <-done:
				default:
					_ = unix.Kill(-p.Pid, unix.SIGKILL) // the client is gone
					_ = p.Kill()
				}
				return
			}
			if sig := unix.Signal(binary.LittleEndian.Uint32(b[:])); sig > 0 && sig < 65 {
				_ = unix.Kill(-p.Pid, sig)
			}
		}
	}()
	st, err := p.Wait()
	close(done)
	ws := uint32(1 << 8)
	if err == nil {
		ws = uint32(st.Sys().(syscall.WaitStatus))
	}
	_, _ = conn.Write(binary.LittleEndian.AppendUint32(nil, ws))
}

// readSudoRequest reads a request and its three descriptors.
func readSudoRequest(conn *os.File) ([]int, sudoRequest, error) {
	var req sudoRequest
	hdr := make([]byte, 4)
	oob := make([]byte, unix.CmsgSpace(4*4))
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, req, err
	}
	var n, oobn int
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), hdr, oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	}); err != nil {
		return nil, req, err
	}
	if rerr != nil {
		return nil, req, os.NewSyscallError("recvmsg", rerr)
	}
	if n == 0 {
		return nil, req, io.ErrUnexpectedEOF
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			if got, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	if len(fds) != 3 {
		return fds, req, fmt.Errorf("a request carries %d descriptors, want 3", len(fds))
	}
	if n < 4 {
		if _, err := io.ReadFull(conn, hdr[n:]); err != nil {
			return fds, req, err
		}
	}
	size := binary.LittleEndian.Uint32(hdr)
	if size > maxSudoRequest {
		return fds, req, fmt.Errorf("a request of %d bytes (at most %d)", size, maxSudoRequest)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(conn, b); err != nil {
		return fds, req, err
	}
	if err := json.Unmarshal(b, &req); err != nil {
		return fds, req, fmt.Errorf("a bad request: %w", err)
	}
	if req.Path == "" || len(req.Args) == 0 {
		return fds, req, errors.New("a request without a command")
	}
	return fds, req, nil
}
