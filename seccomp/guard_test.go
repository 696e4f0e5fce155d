//go:build linux

package seccomp

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestGuardVerdicts runs the guard profiles through the BPF interpreter:
// NoNetwork denies every socket family but AF_UNIX (high bits of the
// family ignored, as the kernel ignores them) and io_uring_setup, and
// leaves socketpair alone; NoIPC denies System V IPC and mq_open.
func TestGuardVerdicts(t *testing.T) {
	amd64(t)
	net := mustCompile(t, GuardProfile(Guard{NoNetwork: true}))
	t.Logf("network guard: %d BPF instructions", len(net))
	checkCalls(t, net, []call{
		{"socket(AF_INET)", unix.SYS_SOCKET, []uint64{unix.AF_INET, unix.SOCK_STREAM}, 0, retEPERM},
		{"socket(AF_INET6)", unix.SYS_SOCKET, []uint64{unix.AF_INET6, unix.SOCK_DGRAM}, 0, retEPERM},
		{"socket(AF_NETLINK)", unix.SYS_SOCKET, []uint64{unix.AF_NETLINK, unix.SOCK_RAW}, 0, retEPERM},
		{"socket(AF_PACKET)", unix.SYS_SOCKET, []uint64{unix.AF_PACKET, unix.SOCK_RAW}, 0, retEPERM},
		{"socket(AF_VSOCK)", unix.SYS_SOCKET, []uint64{unix.AF_VSOCK, unix.SOCK_STREAM}, 0, retEPERM},
		{"socket(0)", unix.SYS_SOCKET, []uint64{0, unix.SOCK_STREAM}, 0, retEPERM},
		{"socket(AF_INET, high bits)", unix.SYS_SOCKET, []uint64{1<<32 | unix.AF_INET, unix.SOCK_STREAM}, 0, retEPERM},
		{"socket(AF_UNIX)", unix.SYS_SOCKET, []uint64{unix.AF_UNIX, unix.SOCK_STREAM}, 0, retAllow},
		{"socket(AF_UNIX, high bits)", unix.SYS_SOCKET, []uint64{1<<32 | unix.AF_UNIX, unix.SOCK_DGRAM}, 0, retAllow},
		{"socketpair(AF_UNIX)", unix.SYS_SOCKETPAIR, []uint64{unix.AF_UNIX, unix.SOCK_STREAM}, 0, retAllow},
		{"io_uring_setup", unix.SYS_IO_URING_SETUP, nil, 0, retEPERM},
		{"connect", unix.SYS_CONNECT, nil, 0, retAllow},
		{"msgget", unix.SYS_MSGGET, nil, 0, retAllow},
		{"i386 socketcall", 102, nil, unix.AUDIT_ARCH_I386, retKillProcess},
	})
	ipc := mustCompile(t, GuardProfile(Guard{NoIPC: true}))
	checkCalls(t, ipc, []call{
		{"msgget", unix.SYS_MSGGET, nil, 0, retEPERM},
		{"shmget", unix.SYS_SHMGET, nil, 0, retEPERM},
		{"shmat", unix.SYS_SHMAT, nil, 0, retEPERM},
		{"semop", unix.SYS_SEMOP, nil, 0, retEPERM},
		{"mq_open", unix.SYS_MQ_OPEN, nil, 0, retEPERM},
		{"socket(AF_INET)", unix.SYS_SOCKET, []uint64{unix.AF_INET, unix.SOCK_STREAM}, 0, retAllow},
		{"read", unix.SYS_READ, nil, 0, retAllow},
	})
}

// TestGuardInstalled installs the network guard on top of the default
// profile in a helper child and makes the real calls.
func TestGuardInstalled(t *testing.T) {
	needSeccomp(t)
	for _, c := range []struct{ name, want string }{
		{"socket_inet", "errno=1"},
		{"socket_netlink", "errno=1"},
		{"socket_unix", "errno=0"},
		{"socketpair_unix", "errno=0"},
		{"getpid", "errno=0"},
	} {
		if got := runHelper(t, "guard:"+c.name, ""); got.signal != 0 || got.out != c.want {
			t.Errorf("%s under default + network guard: %+v, want %s", c.name, got, c.want)
		}
	}
}
