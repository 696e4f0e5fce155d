package seccomp

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// MaxInstructions is the longest program the kernel accepts (BPF_MAXINSNS).
const MaxInstructions = 4096

// instructionSize is the size of one encoded instruction, in Marshal's
// encoding and in struct sock_filter.
const instructionSize = 8

// Program is a compiled classic-BPF seccomp filter for the native
// architecture, as the kernel's seccomp(2) takes it. Compile makes one;
// Install loads it.
type Program []unix.SockFilter

// Marshal encodes p compactly, so that the host can compile once and send
// the program to the sandbox's init: 8 bytes per instruction, little
// endian, laid out as struct sock_filter (code uint16, jt uint8, jf uint8,
// k uint32).
func (p Program) Marshal() []byte {
	b := make([]byte, 0, len(p)*instructionSize)
	for _, in := range p {
		b = binary.LittleEndian.AppendUint16(b, in.Code)
		b = append(b, in.Jt, in.Jf)
		b = binary.LittleEndian.AppendUint32(b, in.K)
	}
	return b
}

// UnmarshalProgram decodes what Marshal encoded. It rejects an empty
// program, a length that is not a multiple of 8 and a program longer than
// MaxInstructions; the kernel verifies the instructions themselves when
// the program is installed.
func UnmarshalProgram(b []byte) (Program, error) {
	switch {
	case len(b) == 0:
		return nil, fmt.Errorf("empty seccomp program")
	case len(b)%instructionSize != 0:
		return nil, fmt.Errorf("seccomp program of %d bytes is not a whole number of %d-byte instructions",
			len(b), instructionSize)
	case len(b)/instructionSize > MaxInstructions:
		return nil, fmt.Errorf("seccomp program has %d instructions, the kernel accepts at most %d",
			len(b)/instructionSize, MaxInstructions)
	}
	p := decode(b, binary.LittleEndian)
	return p, nil
}

// decode reads struct sock_filter records (len(b) a multiple of 8) in
// the given byte order.
func decode(b []byte, order binary.ByteOrder) Program {
	p := make(Program, len(b)/instructionSize)
	for i := range p {
		r := b[i*instructionSize:]
		p[i] = unix.SockFilter{Code: order.Uint16(r[0:]), Jt: r[2], Jf: r[3], K: order.Uint32(r[4:])}
	}
	return p
}
