package envd

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/serve/envd/processpb"
)

// testProc is a process of no backend, its log bounded to limit bytes.
func testProc(limit int) *proc {
	h := &Handler{opts: Options{OutputBufferBytes: limit}.withDefaults()}
	bx := newBox(h, "test")
	p := newProc(bx, &processpb.ProcessConfig{}, nil, false)
	p.cancel = func() {}
	return p
}

// stdoutOf joins the stdout of data events.
func stdoutOf(evs []*processpb.ProcessEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		b.Write(ev.GetData().GetStdout())
	}
	return b.String()
}

// While nobody is connected the log keeps the newest output within its
// bound; the first client gets it, a second one only what follows.
func TestLogKeepsNewestWhileUnwatched(t *testing.T) {
	p := testProc(10)
	for _, s := range []string{"aaaa", "bbbb", "cccc", "dddd"} {
		p.write(kindStdout, []byte(s))
	}
	if p.bytes != 8 || p.dropped != 8 {
		t.Fatalf("log holds %d bytes, dropped %d; want 8 and 8", p.bytes, p.dropped)
	}
	got := make(chan *processpb.ProcessEvent, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- p.follow(ctx, p.subscribe(), func(ev *processpb.ProcessEvent) error { got <- ev; return nil }, 0)
	}()
	if ev := <-got; stdoutOf([]*processpb.ProcessEvent{ev}) != "ccccdddd" {
		t.Errorf("first client got %v, want the kept ccccdddd merged", ev)
	}
	p.mu.Lock()
	end := p.end
	p.mu.Unlock()
	if end != nil {
		t.Fatal("ended")
	}
	p.write(kindStderr, []byte("e"))
	if ev := <-got; string(ev.GetData().GetStderr()) != "e" {
		t.Errorf("live event: %v", ev)
	}
	p.mu.Lock()
	p.end, p.stopped = &processpb.ProcessEvent_EndEvent{Exited: true}, true
	p.notify()
	p.mu.Unlock()
	if ev := <-got; ev.GetEnd() == nil {
		t.Errorf("want the end, got %v", ev)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !p.collected {
		t.Error("the end was sent but the process is not collected")
	}
}

// A connected client that does not read holds the process's output back
// once the log is full; the writer goes on when the client reads.
func TestLogBackpressure(t *testing.T) {
	p := testProc(10)
	release := make(chan struct{})
	sent := make(chan string, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.follow(ctx, p.subscribe(), func(ev *processpb.ProcessEvent) error {
		sent <- string(ev.GetData().GetStdout())
		<-release
		return nil
	}, 0)
	waitSubs := func() {
		for {
			p.mu.Lock()
			n := len(p.subs)
			p.mu.Unlock()
			if n == 1 {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitSubs()
	p.write(kindStdout, []byte("123456")) // taken by the client, which blocks
	if s := <-sent; s != "123456" {
		t.Fatalf("sent %q", s)
	}
	wrote := make(chan struct{})
	go func() {
		p.write(kindStdout, []byte("abcdef")) // 6+6 > 10: waits
		close(wrote)
	}()
	select {
	case <-wrote:
		t.Fatal("the writer did not wait for a client that does not read")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	select {
	case <-wrote:
	case <-time.After(5 * time.Second):
		t.Fatal("the writer still waits after the client read")
	}
	if s := <-sent; s != "abcdef" {
		t.Errorf("then sent %q", s)
	}
}

// Killing the process (Forget) releases a writer held back by a client
// that does not read.
func TestLogKillReleasesWriter(t *testing.T) {
	p := testProc(4)
	sent := make(chan struct{}, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.follow(ctx, p.subscribe(), func(*processpb.ProcessEvent) error { sent <- struct{}{}; <-ctx.Done(); return ctx.Err() }, 0)
	for {
		p.mu.Lock()
		n := len(p.subs)
		p.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	p.write(kindStdout, []byte("1234"))
	<-sent
	wrote := make(chan struct{})
	go func() {
		p.write(kindStdout, []byte("5678"))
		close(wrote)
	}()
	time.Sleep(20 * time.Millisecond)
	p.kill()
	select {
	case <-wrote:
	case <-time.After(5 * time.Second):
		t.Fatal("a writer still waits after kill")
	}
}
