package files

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/tent-sandbox/tent/internal/atomicfile/atomicfiletest"
	"golang.org/x/sys/unix"
)

// framed is content framed by FrameEncoder.
func framed(t *testing.T, content []byte) []byte {
	t.Helper()
	b, err := io.ReadAll(NewFrameEncoder(bytes.NewReader(content)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The decoder gives back what the encoder framed, of any size, read in
// pieces of any size; chunks are 64 KiB (the framing costs 4 bytes each).
func TestFrameRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, frameChunk - 1, frameChunk, frameChunk + 1, 5*frameChunk + 7} {
		content := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
		f := framed(t, content)
		if want := len(frameMagic) + 4*((n+frameChunk-1)/frameChunk) + 12; len(f)-n != want {
			t.Errorf("%d bytes framed in %d: %d of framing, want %d", n, len(f), len(f)-n, want)
		}
		for _, r := range []io.Reader{bytes.NewReader(f), iotest.OneByteReader(bytes.NewReader(f)), iotest.HalfReader(bytes.NewReader(f))} {
			got, err := io.ReadAll(newFrameDecoder(r))
			if err != nil || !bytes.Equal(got, content) {
				t.Errorf("%d bytes: decoded %d bytes, %v", n, len(got), err)
			}
		}
	}
	// A source that yields small pieces still makes full chunks.
	f, err := io.ReadAll(NewFrameEncoder(iotest.OneByteReader(bytes.NewReader(make([]byte, 2*frameChunk)))))
	if err != nil || len(f) != len(frameMagic)+2*(4+frameChunk)+12 {
		t.Errorf("a one-byte source: %d framed bytes, %v", len(f), err)
	}
}

// A source that fails ends the framed stream with its error and without
// an end mark, whatever the error (io.ErrUnexpectedEOF, which a cut HTTP
// body returns, too); SourceErr reports it.
func TestFrameEncoderSourceError(t *testing.T) {
	for _, serr := range []error{errors.New("boom"), io.ErrUnexpectedEOF} {
		enc := NewFrameEncoder(io.MultiReader(bytes.NewReader(make([]byte, 100<<10)), iotest.ErrReader(serr)))
		var got bytes.Buffer
		_, err := io.Copy(&got, enc)
		if !errors.Is(err, serr) || !errors.Is(enc.SourceErr(), serr) {
			t.Errorf("%v: the copy ended with %v, SourceErr %v", serr, err, enc.SourceErr())
		}
		if _, err := io.ReadAll(newFrameDecoder(&got)); !errors.Is(err, unix.EPIPE) || !errors.Is(err, errInputCut) {
			t.Errorf("%v: decoding what came: %v; want the input cut (EPIPE)", serr, err)
		}
	}
	if enc := NewFrameEncoder(strings.NewReader("x")); enc.SourceErr() != nil {
		t.Error("SourceErr before the source failed")
	}
}

// Every prefix of a framed stream short of its end fails as cut
// (EPIPE); a bad magic, an oversized chunk, an end mark counting other
// than what came and bytes after the end mark fail as bad frames
// (EPROTO).
func TestFrameDecoderRefuses(t *testing.T) {
	f := framed(t, bytes.Repeat([]byte("x"), frameChunk+10))
	for _, n := range []int{0, 1, len(frameMagic), len(frameMagic) + 3, len(frameMagic) + 4, len(frameMagic) + 100, len(f) - 12, len(f) - 8, len(f) - 1} {
		if _, err := io.ReadAll(newFrameDecoder(bytes.NewReader(f[:n]))); !errors.Is(err, unix.EPIPE) {
			t.Errorf("the first %d of %d bytes: %v; want EPIPE", n, len(f), err)
		}
	}
	bad := func(what string, b []byte) {
		t.Helper()
		if _, err := io.ReadAll(newFrameDecoder(bytes.NewReader(b))); !errors.Is(err, unix.EPROTO) {
			t.Errorf("%s: %v; want EPROTO", what, err)
		}
	}
	bad("unframed content", []byte("plain content, not framed at all"))
	count := bytes.Clone(f)
	count[len(count)-1]++
	bad("a wrong count", count)
	bad("bytes after the end mark", append(bytes.Clone(f), 'x'))
	huge := append([]byte(frameMagic), 0, 0x20, 0, 0)
	bad("a chunk of 2 MiB", append(huge, make([]byte, 64)...))
}

// write-framed and put-framed over a file, their input cut short or its
// count wrong, fail (EPIPE, EPROTO) and leave the file as it was, mode
// too, and no temporary; whole, they replace it.
func TestFileHelperFramedWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	atomicfiletest.WriteFileMode(t, p, "old content", 0o640)
	content := bytes.Repeat([]byte("new\n"), 1<<18)
	f := framed(t, content)
	for _, op := range []string{FileOpWriteFramed, FileOpPutFramed} {
		code, _, errs := runHelper([]string{op, p, "600"}, bytes.NewReader(f[:len(f)/2]))
		if code != HelperFailed || !strings.HasPrefix(errs, "EPIPE ") || !strings.Contains(errs, "end mark") {
			t.Errorf("%s, its input cut: %d %q; want EPIPE, the input ended before its end mark", op, code, errs)
		}
		atomicfiletest.WantFile(t, op+" cut", p, "old content", 0o640, "f")
		count := bytes.Clone(f)
		count[len(count)-1]++
		if code, _, errs := runHelper([]string{op, p, "600"}, bytes.NewReader(count)); code != HelperFailed || !strings.HasPrefix(errs, "EPROTO ") {
			t.Errorf("%s, a wrong count: %d %q; want EPROTO", op, code, errs)
		}
		atomicfiletest.WantFile(t, op+" miscounted", p, "old content", 0o640, "f")
		if code, _, errs := runHelper([]string{op, filepath.Join(dir, "new")}, bytes.NewReader(nil)); code != HelperFailed || !strings.HasPrefix(errs, "EPIPE ") {
			t.Errorf("%s of a new file, no input: %d %q; want EPIPE", op, code, errs)
		}
		atomicfiletest.WantFile(t, op+" of a new file", p, "old content", 0o640, "f")
	}
	if code, _, errs := runHelper([]string{FileOpWriteFramed, p, "600"}, bytes.NewReader(f)); code != 0 {
		t.Fatalf("a whole framed write: %d %q", code, errs)
	}
	atomicfiletest.WantFile(t, "a whole framed write", p, string(content), 0o640, "f")
}

// In place (a file mounted on its own: no rename can replace it), a cut
// input cannot leave the file as it was, but fails the write (EPIPE):
// never reported as written.
func TestFileHelperFramedInPlaceCut(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to bind-mount a file")
	}
	dir := t.TempDir()
	p, src := filepath.Join(dir, "f"), filepath.Join(dir, "src")
	atomicfiletest.WriteFileMode(t, p, "old content", 0o644)
	atomicfiletest.WriteFileMode(t, src, "old content", 0o644)
	if err := unix.Mount(src, p, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("bind-mounting a file: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(p, unix.MNT_DETACH) })
	f := framed(t, bytes.Repeat([]byte("new\n"), 1<<16))
	if code, _, errs := runHelper([]string{FileOpWriteFramed, p}, bytes.NewReader(f[:len(f)/2])); code != HelperFailed || !strings.HasPrefix(errs, "EPIPE ") {
		t.Errorf("in place, its input cut: %d %q; want EPIPE", code, errs)
	}
}

// BenchmarkFrame measures framing and unframing, in memory.
func BenchmarkFrame(b *testing.B) {
	content := bytes.Repeat([]byte("0123456789abcdef"), 1<<20)
	b.SetBytes(int64(len(content)))
	for b.Loop() {
		if _, err := io.Copy(io.Discard, newFrameDecoder(NewFrameEncoder(bytes.NewReader(content)))); err != nil {
			b.Fatal(err)
		}
	}
}

// mustNotRead fails the test when read.
type mustNotRead struct{ t *testing.T }

func (r mustNotRead) Read([]byte) (int, error) {
	r.t.Error("the helper read the input of an op it does not know")
	return 0, io.EOF
}

// The helper refuses an op it does not know (EINVAL) without reading a
// byte of its input, and writes nothing: an older helper, given
// write-framed or put-framed, fails so rather than writing frames as
// content. (The framed ops are new names, not an option of write and
// put, for this.)
func TestFileHelperUnknownOpReadsNothing(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	atomicfiletest.WriteFileMode(t, p, "old content", 0o640)
	for _, op := range []string{"write-framed2", "put-chunked"} {
		if code, _, errs := runHelper([]string{op, p, "644"}, mustNotRead{t}); code != HelperFailed || !strings.HasPrefix(errs, "EINVAL ") {
			t.Errorf("%s: %d %q; want EINVAL", op, code, errs)
		}
	}
	atomicfiletest.WantFile(t, "after unknown ops", p, "old content", 0o640, "f")
}
