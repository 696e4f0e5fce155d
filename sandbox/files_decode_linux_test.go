package sandbox

import (
	"bytes"
	"errors"
	"strings"
	"syscall"
	"testing"
)

// The helper's sized read is hostile input (a process of the sandbox's
// user could forge it): copySized takes no more than the length it was
// told, refuses a malformed or missing length, applies Limit and Size
// before a byte moves, and tells the writer's error from the helper's.
func TestCopySizedHostileAnswers(t *testing.T) {
	errRefused := errors.New("refused")
	for _, c := range []struct {
		name, in string
		opts     ReadOptions
		want     string // what reaches w
		errno    syscall.Errno
		err      error
		ours     bool // a readError: the read's error whatever the helper says
	}{
		{name: "exact", in: "3\nabcEXTRA", want: "abc"},
		{name: "no length", in: "", errno: syscall.EPROTO},
		{name: "length never ends", in: strings.Repeat("9", 40), errno: syscall.EPROTO},
		{name: "negative", in: "-1\n", errno: syscall.EPROTO},
		{name: "over the limit", in: "1099511627776\n", opts: ReadOptions{Limit: 10}, errno: syscall.EFBIG, ours: true},
		{name: "size refused", in: "3\nabc", opts: ReadOptions{Size: func(int64) error { return errRefused }}, err: errRefused, ours: true},
		{name: "short", in: "5\nab", want: "ab"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var w bytes.Buffer
			err := copySized(strings.NewReader(c.in), &w, "/f", c.opts)
			var re *readError
			if isOurs := errors.As(err, &re); isOurs != c.ours {
				t.Errorf("%v: the read's own error %v, want %v", err, isOurs, c.ours)
			}
			switch {
			case c.errno != 0 && !errors.Is(err, c.errno):
				t.Errorf("%v, want %s", err, c.errno.Error())
			case c.err != nil && !errors.Is(err, c.err):
				t.Errorf("%v, want %v", err, c.err)
			case c.errno == 0 && c.err == nil && c.name != "short" && err != nil:
				t.Errorf("%v", err)
			case c.name == "short" && err == nil:
				t.Error("a short content succeeded")
			}
			if w.String() != c.want {
				t.Errorf("wrote %q, want %q", w.String(), c.want)
			}
		})
	}
}

// The helper's JSON answers are bounded: beyond max bytes the answer is
// dropped and the verb fails with EFBIG, never an unbounded buffer.
func TestBoundedBuffer(t *testing.T) {
	b := &boundedBuffer{max: 4}
	if n, err := b.Write([]byte("abc")); n != 3 || err != nil || b.over {
		t.Fatalf("under the bound: %d, %v, over %v", n, err, b.over)
	}
	if n, err := b.Write([]byte("de")); n != 2 || err != nil || !b.over || b.Len() != 3 {
		t.Fatalf("past the bound: %d, %v, over %v, kept %d", n, err, b.over, b.Len())
	}
}
