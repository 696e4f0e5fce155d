package namespaces

import (
	"encoding/json"
	"reflect"
	"testing"
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
