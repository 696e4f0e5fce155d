package files

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"golang.org/x/sys/unix"
)

// errInputCut is the helper's failure on a framed input that ended
// before its end mark.
var errInputCut = errors.New("the input ended before its end mark (its sender failed or was killed)")

// frameDecoder reads the content of a framed stream (see FrameEncoder):
// io.EOF only after a valid end mark whose count matches, else an error
// carrying EPIPE (input cut short) or EPROTO (not a valid frame).
type frameDecoder struct {
	r       io.Reader
	left    int // bytes left in the current chunk
	total   uint64
	started bool
	err     error
}

func newFrameDecoder(r io.Reader) *frameDecoder { return &frameDecoder{r: r} }

func (d *frameDecoder) Read(p []byte) (int, error) {
	if d.err != nil {
		return 0, d.err
	}
	for d.left == 0 {
		if err := d.next(); err != nil {
			d.err = err
			return 0, err
		}
	}
	if len(p) > d.left {
		p = p[:d.left]
	}
	n, err := d.r.Read(p)
	d.left -= n
	d.total += uint64(n)
	if err == io.EOF {
		err = d.cut()
	}
	if err != nil {
		d.err = err
	}
	return n, err
}

// next reads the magic if not yet read, then a chunk's length, or the end mark.
func (d *frameDecoder) next() error {
	if !d.started {
		var m [len(frameMagic)]byte
		if err := d.full(m[:]); err != nil {
			return err
		}
		if string(m[:]) != frameMagic {
			return fmt.Errorf("the input is not framed: %w", unix.EPROTO)
		}
		d.started = true
	}
	var l [4]byte
	if err := d.full(l[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(l[:])
	if n > maxFrameChunk {
		return fmt.Errorf("a chunk of %d bytes in the input (at most %d): %w", n, maxFrameChunk, unix.EPROTO)
	}
	if n > 0 {
		d.left = int(n)
		return nil
	}
	var c [8]byte
	if err := d.full(c[:]); err != nil {
		return err
	}
	if total := binary.BigEndian.Uint64(c[:]); total != d.total {
		return fmt.Errorf("the input's end mark counts %d bytes, %d came: %w", total, d.total, unix.EPROTO)
	}
	var extra [1]byte
	if n, _ := io.ReadFull(d.r, extra[:]); n > 0 {
		return fmt.Errorf("bytes follow the input's end mark: %w", unix.EPROTO)
	}
	return io.EOF
}

// full reads len(b) bytes; the input's end on the way is a cut.
func (d *frameDecoder) full(b []byte) error {
	_, err := io.ReadFull(d.r, b)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return d.cut()
	}
	return err
}

func (d *frameDecoder) cut() error {
	return fmt.Errorf("%w, after %d bytes: %w", errInputCut, d.total, unix.EPIPE)
}
