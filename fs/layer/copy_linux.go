package layer

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Bounds of the sparse-file handling.
const (
	// copyChunk is the buffer of copies done with pread/pwrite.
	copyChunk = 256 << 10
	// zeroBlock is the granularity at which extraction skips zeros.
	zeroBlock = 4096
	// minHole is the smallest hole archived as a hole: shorter ones are
	// written as zeros, so that a file fragmented on purpose costs at
	// most minHole bytes of archive per data extent.
	minHole = 64 << 10
	// MaxSparseSegments bounds the data extents a sparse file may have
	// (after holes shorter than 64 KiB are merged) to be archived by
	// WriteTar and read back by ExtractTar; beyond it the file is refused
	// with an error naming it.
	MaxSparseSegments = 1 << 16
)

var zeros = make([]byte, zeroBlock)

// segment is one data extent of a sparse file.
type segment struct{ off, len int64 }

// dataSegments lists the data extents of the first size bytes of fd
// (SEEK_DATA/SEEK_HOLE), merging holes shorter than minHole. A
// filesystem without SEEK_DATA yields one extent covering everything.
// holes reports whether the extents leave any of the file out.
func dataSegments(fd int, size int64) (segs []segment, holes bool, err error) {
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break
		}
		if err != nil { // no SEEK_DATA here: all data
			return []segment{{0, size}}, false, nil
		}
		if data >= size {
			break
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil || hole > size {
			hole = size
		}
		if n := len(segs); n > 0 && data-(segs[n-1].off+segs[n-1].len) < minHole {
			segs[n-1].len = hole - segs[n-1].off
		} else {
			if len(segs) == MaxSparseSegments {
				return nil, false, fmt.Errorf("more than %d data extents: %w", MaxSparseSegments, unix.EFBIG)
			}
			segs = append(segs, segment{data, hole - data})
		}
		off = hole
	}
	var n int64
	for _, s := range segs {
		n += s.len
	}
	return segs, n < size, nil
}

// copyRegular copies the first size bytes of the regular file in to out
// at the same offsets, data extents only, and sets out's size to size:
// holes stay holes, and a source that grows meanwhile is not followed
// past size (one that shrinks leaves zeros). It tries copy_file_range
// (in-kernel, reflinks where the filesystem can) and falls back to
// pread/pwrite.
func copyRegular(out, in int, size int64) error {
	segs, _, err := dataSegments(in, size)
	if err != nil {
		return err
	}
	var buf []byte
	for _, s := range segs {
		off, end := s.off, s.off+s.len
		for off < end {
			roff, woff := off, off
			n, err := unix.CopyFileRange(in, &roff, out, &woff, int(min(end-off, 1<<30)), 0)
			if err == nil && n > 0 {
				off += int64(n)
				continue
			}
			if err == nil { // n == 0: the source shrank
				break
			}
			if err != unix.EXDEV && err != unix.EINVAL && err != unix.ENOSYS && err != unix.EOPNOTSUPP && err != unix.EPERM && err != unix.ETXTBSY {
				return os.NewSyscallError("copy_file_range", err)
			}
			if buf == nil {
				buf = make([]byte, copyChunk)
			}
			n, err = unix.Pread(in, buf[:min(int64(len(buf)), end-off)], off)
			if err != nil {
				return os.NewSyscallError("pread", err)
			}
			if n == 0 {
				break
			}
			if err := pwriteAll(out, buf[:n], off); err != nil {
				return err
			}
			off += int64(n)
		}
	}
	return os.NewSyscallError("ftruncate", unix.Ftruncate(out, size))
}

func pwriteAll(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(fd, b, off)
		if err != nil {
			return os.NewSyscallError("pwrite", err)
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// writeSkippingZeros copies n bytes from r into fd at off, seeking over
// (not writing) every all-zero 4 KiB block, so that a file of zeros
// costs no disk. The caller finishes the file with ftruncate.
func writeSkippingZeros(fd int, r io.Reader, off, n int64, buf []byte) error {
	for n > 0 {
		k := min(int64(len(buf)), n)
		if _, err := io.ReadFull(r, buf[:k]); err != nil {
			return err
		}
		chunk := buf[:k]
		for i := 0; i < len(chunk); {
			j := min(i+zeroBlock, len(chunk))
			if bytes.Equal(chunk[i:j], zeros[:j-i]) {
				i = j
				continue
			}
			// Extend over following non-zero blocks: one write per run.
			for j < len(chunk) {
				e := min(j+zeroBlock, len(chunk))
				if bytes.Equal(chunk[j:e], zeros[:e-j]) {
					break
				}
				j = e
			}
			if err := pwriteAll(fd, chunk[i:j], off+int64(i)); err != nil {
				return err
			}
			i = j
		}
		off, n = off+k, n-k
	}
	return nil
}

// The sparse encoding of archive entries. A regular file with holes is
// archived with the PAX record sparseSizeKey (its real size); its entry
// data is a map — decimal numbers, one a line: the count of data extents,
// then each extent's offset and length — padded with NULs to a multiple
// of 512 bytes, followed by the extents' bytes. This is GNU tar's sparse
// format 1.0 under tent's own key: Go's archive/tar cannot write that
// format, and reads it only by expanding the holes, which would make the
// time to archive or restore a file grow with its apparent size rather
// than its data.
const sparseSizeKey = "TENT.sparse.realsize"

// encodeSparseMap returns the padded map of segs.
func encodeSparseMap(segs []segment) []byte {
	b := strconv.AppendInt(nil, int64(len(segs)), 10)
	b = append(b, '\n')
	for _, s := range segs {
		b = strconv.AppendInt(b, s.off, 10)
		b = append(b, '\n')
		b = strconv.AppendInt(b, s.len, 10)
		b = append(b, '\n')
	}
	if pad := len(b) % 512; pad != 0 {
		b = append(b, make([]byte, 512-pad)...)
	}
	return b
}

// decodeSparseMap reads a map from r and checks it against the file's
// real size and the entry's size. It returns the extents and the bytes
// of entry data that follow the map.
func decodeSparseMap(r io.Reader, realSize, entrySize int64) ([]segment, int64, error) {
	var nums []int64
	var cur []byte
	need := -1
	block := make([]byte, 512)
	var read int64
	for need < 0 || len(nums) < need {
		if read >= entrySize {
			return nil, 0, fmt.Errorf("sparse map: truncated: %w", unix.EINVAL)
		}
		if _, err := io.ReadFull(r, block); err != nil {
			return nil, 0, fmt.Errorf("sparse map: %w", err)
		}
		read += 512
		for _, c := range block {
			if need >= 0 && len(nums) == need {
				break
			}
			switch {
			case c == '\n':
				v, err := strconv.ParseInt(string(cur), 10, 64)
				if err != nil || v < 0 {
					return nil, 0, fmt.Errorf("sparse map: bad number %q: %w", cur, unix.EINVAL)
				}
				nums, cur = append(nums, v), cur[:0]
				if len(nums) == 1 {
					if v > MaxSparseSegments {
						return nil, 0, fmt.Errorf("sparse map: %d extents (at most %d): %w", v, MaxSparseSegments, unix.EFBIG)
					}
					need = 1 + 2*int(v)
				}
			case c >= '0' && c <= '9' && len(cur) < 19:
				cur = append(cur, c)
			default:
				return nil, 0, fmt.Errorf("sparse map: unexpected byte %q: %w", c, unix.EINVAL)
			}
		}
	}
	segs := make([]segment, 0, len(nums)/2)
	var end, total int64
	for i := 1; i+1 < len(nums); i += 2 {
		s := segment{nums[i], nums[i+1]}
		if s.off < end || s.len > realSize || s.off > realSize-s.len {
			return nil, 0, fmt.Errorf("sparse map: extent %d+%d out of order or past %d: %w", s.off, s.len, realSize, unix.EINVAL)
		}
		end, total = s.off+s.len, total+s.len
		segs = append(segs, s)
	}
	if entrySize-read != total {
		return nil, 0, fmt.Errorf("sparse map: %d bytes of data for %d of extents: %w", entrySize-read, total, unix.EINVAL)
	}
	return segs, total, nil
}
