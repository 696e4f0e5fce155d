//go:build linux

package seccomp

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// seccompData is struct seccomp_data, the input of a seccomp filter.
type seccompData struct {
	nr   int32
	arch uint32
	ip   uint64
	args [6]uint64
}

// bytes lays d out as the kernel does on a little-endian machine (64 bytes).
func (d seccompData) bytes() []byte {
	b := make([]byte, 64)
	binary.LittleEndian.PutUint32(b[0:], uint32(d.nr))
	binary.LittleEndian.PutUint32(b[4:], d.arch)
	binary.LittleEndian.PutUint64(b[8:], d.ip)
	for i, a := range d.args {
		binary.LittleEndian.PutUint64(b[16+8*i:], a)
	}
	return b
}

// run interprets p over d and returns the filter's verdict. It implements
// the classic-BPF subset that libseccomp emits (loads from seccomp_data and
// scratch memory, stores, AND/OR with constants, conditional and
// unconditional jumps, returns, TAX/TXA) and fails on anything else, on
// out-of-bounds loads and on jumps past the end, as the kernel's checker
// would.
func run(p Program, d seccompData) (uint32, error) {
	data := d.bytes()
	var a, x uint32
	var mem [16]uint32
	for pc := 0; pc < len(p); pc++ {
		in := p[pc]
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			if in.K%4 != 0 || int(in.K)+4 > len(data) {
				return 0, fmt.Errorf("pc %d: load at %d out of seccomp_data", pc, in.K)
			}
			a = binary.LittleEndian.Uint32(data[in.K:])
		case unix.BPF_LD | unix.BPF_MEM:
			a = mem[in.K&15]
		case unix.BPF_LDX | unix.BPF_MEM:
			x = mem[in.K&15]
		case unix.BPF_LD | unix.BPF_IMM:
			a = in.K
		case unix.BPF_LDX | unix.BPF_IMM:
			x = in.K
		case unix.BPF_ST:
			mem[in.K&15] = a
		case unix.BPF_STX:
			mem[in.K&15] = x
		case unix.BPF_ALU | unix.BPF_AND | unix.BPF_K:
			a &= in.K
		case unix.BPF_ALU | unix.BPF_OR | unix.BPF_K:
			a |= in.K
		case unix.BPF_MISC | unix.BPF_TAX:
			x = a
		case unix.BPF_MISC | unix.BPF_TXA:
			a = x
		case unix.BPF_RET | unix.BPF_K:
			return in.K, nil
		case unix.BPF_RET | unix.BPF_A:
			return a, nil
		case unix.BPF_JMP | unix.BPF_JA:
			pc += int(in.K)
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K,
			unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K,
			unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K,
			unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			var ok bool
			switch in.Code &^ (unix.BPF_JMP | unix.BPF_K) {
			case unix.BPF_JEQ:
				ok = a == in.K
			case unix.BPF_JGT:
				ok = a > in.K
			case unix.BPF_JGE:
				ok = a >= in.K
			case unix.BPF_JSET:
				ok = a&in.K != 0
			}
			if ok {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		default:
			return 0, fmt.Errorf("pc %d: instruction %#04x not supported by the test interpreter", pc, in.Code)
		}
		if pc+1 >= len(p) {
			return 0, fmt.Errorf("pc %d: jump past the end of the program", pc)
		}
	}
	return 0, fmt.Errorf("program ran off its end")
}
