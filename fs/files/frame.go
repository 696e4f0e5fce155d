package files

import (
	"encoding/binary"
	"io"
	"sync"
)

// The file helper's framed input (ops FileOpWriteFramed and
// FileOpPutFramed): a write commits only content whose end it was told
// of. A plain stream cannot tell its end from its sender's failure: an
// upload cut mid-way, a reader that failed, a host process killed
// mid-write all look like EOF on the helper's stdin, and the helper
// would put what it got in place of the user's whole file. Framed, the
// helper sees EOF before the end mark instead, and fails.
//
// The stream is the magic frameMagic, then chunks, each a 4-byte
// big-endian length (1 to maxFrameChunk) and that many bytes, then the
// end mark: a length of 0 and the total number of content bytes as an
// 8-byte big-endian number. Nothing may follow it. [FrameEncoder]
// writes it; the helper decodes it.

// The helper's ops that take framed input: write and put, otherwise the
// same. An older helper does not know them and refuses them (EINVAL)
// before reading a byte, rather than writing the frames as content.
const (
	FileOpWriteFramed = "write-framed"
	FileOpPutFramed   = "put-framed"
)

const (
	frameMagic = "TENTFRM1"
	// frameChunk is the size of the chunks FrameEncoder writes: 4 bytes
	// of framing per 64 KiB.
	frameChunk = 64 << 10
	// maxFrameChunk bounds a chunk the helper accepts.
	maxFrameChunk = 1 << 20
)

// FrameEncoder reads its source and yields it framed, for the helper's
// framed ops. The end mark follows only the source's io.EOF: a source
// that fails ends the framed stream with that error and without an end
// mark, so that the helper, seeing its input end early, writes nothing.
type FrameEncoder struct {
	src     io.Reader
	buf     []byte
	pending []byte
	total   uint64
	started bool
	end     error // io.EOF after the end mark; the source's error

	mu     sync.Mutex
	srcErr error
}

// NewFrameEncoder returns a FrameEncoder of src.
func NewFrameEncoder(src io.Reader) *FrameEncoder { return &FrameEncoder{src: src} }

// Read reads the framed stream.
func (e *FrameEncoder) Read(p []byte) (int, error) {
	for len(e.pending) == 0 {
		if e.end != nil {
			return 0, e.end
		}
		e.fill()
	}
	n := copy(p, e.pending)
	e.pending = e.pending[n:]
	return n, nil
}

// SourceErr is the error the source failed with (nil while it has not,
// and once it was read to its end). It may be called from any goroutine.
func (e *FrameEncoder) SourceErr() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.srcErr
}

// fill queues the next piece of the framed stream: the magic, a chunk
// (the source read until the chunk is full or the source ends), the end
// mark, or nothing and the source's error.
func (e *FrameEncoder) fill() {
	if !e.started {
		e.started = true
		e.buf = make([]byte, 4+frameChunk+12)
		e.pending = append(e.buf[:0], frameMagic...)
		return
	}
	data := e.buf[4 : 4+frameChunk]
	n := 0
	var err error
	for n < len(data) && err == nil {
		var m int
		m, err = e.src.Read(data[n:])
		n += m
	}
	switch {
	case err != nil && err != io.EOF: // never io.ErrUnexpectedEOF's "EOF": a cut HTTP body says that
		e.end = err
		e.mu.Lock()
		e.srcErr = err
		e.mu.Unlock()
		return
	case n > 0:
		binary.BigEndian.PutUint32(e.buf, uint32(n))
		e.total += uint64(n)
		e.pending = e.buf[:4+n]
	default:
		e.pending = e.buf[:0]
	}
	if err == io.EOF {
		e.pending = binary.BigEndian.AppendUint32(e.pending, 0)
		e.pending = binary.BigEndian.AppendUint64(e.pending, e.total)
		e.end = io.EOF
	}
}
