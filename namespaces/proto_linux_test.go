package namespaces

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/ctlmsg"
)

// message's own encoding is byte for byte encoding/json's, whichever path
// it takes, and decodes back to the same message.
func TestMessageMarshalJSON(t *testing.T) {
	for _, m := range []message{
		{Type: msgHello},
		{Type: msgStarted, Pid: 2},
		{Type: msgStarted, ID: "e1", Pid: 17, TTY: true},
		{Type: msgStarted, Pid: 2, Stamps: []int64{1, 0, 1795838224662683000, 4, 5}},
		{Type: msgExit, ID: "e1", Status: 0x8f00},
		{Type: msgSignal, Signal: 15},
		{Type: msgError, Stage: "exec", Error: `exec: "nope": executable file not found in $PATH`, Errno: 2},
		{Type: msgError, Stage: "setup", Error: "bad \x01 byte <&> \\ é"},
		{Type: msgListen, ID: "l", Ports: []int{22, 80, 443}},
		{Type: msgDial, ID: "d", Port: 8080, V6: true},
		{Type: msgConfig, Config: &Config{Hostname: "h", LandlockABI: 7}},
		{Type: msgExec, ID: "x", Exec: &Exec{Path: "/bin/true", Args: []string{"true"}}},
	} {
		got, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(plainMessage(m))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("message %+v:\n got %s\nwant %s", m, got, want)
		}
		var back message
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, m) {
			t.Errorf("round trip of %s: %+v, want %+v", got, back, m)
		}
	}
}

// Phases travel as the "started" message's stamps and come back whole.
func TestPhasesRoundTrip(t *testing.T) {
	p := Phases{Exec: 1, Entry: 2, Config: 3, Root: 4, Started: 5}
	if got := phasesOf(p.stamps()); got != p {
		t.Errorf("phasesOf(stamps) = %+v, want %+v", got, p)
	}
	if got := phasesOf([]int64{7}); got != (Phases{Exec: 7}) {
		t.Errorf("a short stamps list: %+v", got)
	}
}

// A Config's seccomp program travels as the message's tail, not as
// base64 in its JSON, and arrives whole; the caller's Config keeps it.
func TestConfigSeccompTail(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, err := ctlmsg.NewConn(fds[0], "a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := ctlmsg.NewConn(fds[1], "b")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	prog := make([]byte, 8*1000)
	for i := range prog {
		prog[i] = byte(i * 7)
	}
	cfg := &Config{Hostname: "h", Seccomp: prog, Exec: Exec{Path: "/bin/true"}}
	if err := send(a, message{Type: msgConfig, Config: cfg}, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cfg.Seccomp, prog) {
		t.Fatal("send changed the caller's Config")
	}
	// What is on the wire: JSON without the program, then a NUL and the
	// program.
	buf := make([]byte, 64<<10)
	n, _, err := unix.Recvfrom(fds[1], buf, unix.MSG_PEEK)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.IndexByte(buf[:n], 0)
	if i < 0 || bytes.Contains(buf[:i], []byte(`"seccomp"`)) || !bytes.Equal(buf[i+1:n], prog) {
		t.Fatalf("on the wire: %d bytes, JSON %q", n, buf[:max(i, 0)])
	}
	m, got, err := recv(b)
	if err != nil || len(got) != 0 {
		t.Fatalf("recv: %v, %d fds", err, len(got))
	}
	if m.Config == nil || m.Config.Hostname != "h" || !bytes.Equal(m.Config.Seccomp, prog) {
		t.Fatalf("received config %+v", m.Config)
	}
	// A tail on a message that carries no Config is refused.
	if err := ctlmsg.SendTail(a, message{Type: msgHello}, []byte{1}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := recv(b); err == nil {
		t.Fatal("a hello with a tail was accepted")
	}
}
