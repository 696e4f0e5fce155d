//go:build linux

package layer

import (
	"bufio"
	"compress/zlib"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"strconv"
)

// zeroOID is git's object name for "no file" in an index line.
const zeroOID = "0000000000000000000000000000000000000000"

// emptyOID is git's object name of the empty blob: the literal a binary
// deletion carries.
const emptyOID = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"

// The alphabet of git's base85 (base85.c), not Ascii85's.
const base85Alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"

// newBlobHash starts the SHA-1 git names a blob of size bytes with
// ("blob SIZE\0" then the content).
func newBlobHash(size int64) hash.Hash {
	h := sha1.New()
	h.Write([]byte("blob " + strconv.FormatInt(size, 10) + "\x00"))
	return h
}

// blobOID is the git object name of a blob with content b.
func blobOID(b []byte) string {
	h := newBlobHash(int64(len(b)))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// streamOID hashes the first size bytes of r as a git blob, reading
// through a fixed buffer. Fewer bytes than size mean the file shrank
// while it was read.
func streamOID(r io.ReaderAt, size int64, name string) (string, error) {
	h := newBlobHash(size)
	n, err := io.Copy(h, io.NewSectionReader(r, 0, size))
	if err != nil {
		return "", fmt.Errorf("failed to read %s: %w", name, err)
	}
	if n != size {
		return "", fmt.Errorf("%s changed while it was read (%d bytes, had %d): %w", name, n, size, ErrFileChanged)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// base85Lines is the writer behind a git binary hunk: it cuts the zlib
// stream into lines of up to 52 bytes, each written as a length letter
// (A-Z for 1-26, a-z for 27-52) and the base85 of the bytes padded to a
// multiple of four, then a newline. It holds one line at a time.
type base85Lines struct {
	w   *bufio.Writer
	buf [52]byte
	n   int
}

func (b *base85Lines) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		c := copy(b.buf[b.n:], p)
		b.n += c
		p = p[c:]
		if b.n == len(b.buf) {
			b.flushLine()
		}
	}
	return total, nil
}

// flushLine writes the pending bytes as one line.
func (b *base85Lines) flushLine() {
	if b.n == 0 {
		return
	}
	if b.n <= 26 {
		b.w.WriteByte('A' + byte(b.n) - 1)
	} else {
		b.w.WriteByte('a' + byte(b.n) - 27)
	}
	var out [5]byte
	for i := 0; i < b.n; i += 4 {
		var acc uint32
		for j := 0; j < 4; j++ {
			acc <<= 8
			if i+j < b.n {
				acc |= uint32(b.buf[i+j])
			}
		}
		for j := 4; j >= 0; j-- {
			out[j] = base85Alphabet[acc%85]
			acc /= 85
		}
		b.w.Write(out[:])
	}
	b.w.WriteByte('\n')
	b.n = 0
}

// writeLiteral writes a git binary hunk "literal SIZE" with the first
// size bytes of r, zlib-compressed and base85-encoded as it reads, and
// the blank line that ends the hunk. It checks that what it wrote hashes
// to oid (computed by an earlier pass), so a file that changed between
// the passes fails instead of yielding a patch git would reject.
func writeLiteral(w *bufio.Writer, r io.ReaderAt, size int64, oid, name string) error {
	if size == 0 && oid == emptyOID {
		// git's own bytes for empty content (zlib 78 9c 03 00 00 00 00 01).
		w.WriteString("literal 0\nHcmV?d00001\n\n")
		return nil
	}
	fmt.Fprintf(w, "literal %d\n", size)
	lines := &base85Lines{w: w}
	z, err := zlib.NewWriterLevel(lines, zlib.DefaultCompression)
	if err != nil {
		return fmt.Errorf("failed to compress %s: %w", name, err)
	}
	h := newBlobHash(size)
	n, err := io.Copy(io.MultiWriter(z, h), io.NewSectionReader(r, 0, size))
	if err != nil {
		return fmt.Errorf("failed to read %s: %w", name, err)
	}
	if err := z.Close(); err != nil {
		return fmt.Errorf("failed to compress %s: %w", name, err)
	}
	lines.flushLine()
	w.WriteByte('\n')
	if got := hex.EncodeToString(h.Sum(nil)); n != size || got != oid {
		return fmt.Errorf("%s changed while it was read: %w", name, ErrFileChanged)
	}
	return nil
}
