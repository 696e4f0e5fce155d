package seccomp

import (
	"encoding/binary"
	"fmt"
)

// stackMagic begins a stack of programs (MarshalStack): opcode 0xffff,
// which no classic-BPF instruction has, so that a lone program's encoding
// (Marshal) is never taken for a stack.
var stackMagic = [4]byte{0xff, 0xff, 'S', 'K'}

// maxStack bounds the programs of a stack (the kernel's own bound is the
// total length of the filters attached to a thread: 32768 instructions
// with a penalty of 4 each).
const maxStack = 4

// MarshalStack encodes programs to be installed in order on one thread
// (each a filter of its own: the kernel applies the most restrictive
// verdict of all). One program is encoded as Marshal encodes it.
func MarshalStack(progs ...Program) []byte {
	if len(progs) == 1 {
		return progs[0].Marshal()
	}
	b := append([]byte(nil), stackMagic[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(progs)))
	for _, p := range progs {
		m := p.Marshal()
		b = binary.LittleEndian.AppendUint32(b, uint32(len(m)))
		b = append(b, m...)
	}
	return b
}

// UnmarshalStack decodes what MarshalStack (or Marshal) encoded, each
// program checked as UnmarshalProgram checks it.
func UnmarshalStack(b []byte) ([]Program, error) {
	if len(b) < 8 || [4]byte(b[:4]) != stackMagic {
		p, err := UnmarshalProgram(b)
		if err != nil {
			return nil, err
		}
		return []Program{p}, nil
	}
	n := binary.LittleEndian.Uint32(b[4:8])
	if n == 0 || n > maxStack {
		return nil, fmt.Errorf("seccomp stack of %d programs: want 1 to %d", n, maxStack)
	}
	b = b[8:]
	progs := make([]Program, 0, n)
	for i := range n {
		if len(b) < 4 {
			return nil, fmt.Errorf("seccomp stack: program %d is cut short", i)
		}
		l := binary.LittleEndian.Uint32(b)
		if uint64(l) > uint64(len(b)-4) {
			return nil, fmt.Errorf("seccomp stack: program %d is cut short", i)
		}
		p, err := UnmarshalProgram(b[4 : 4+l])
		if err != nil {
			return nil, fmt.Errorf("seccomp stack: program %d: %w", i, err)
		}
		progs = append(progs, p)
		b = b[4+l:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("seccomp stack: %d bytes after its %d programs", len(b), n)
	}
	return progs, nil
}
