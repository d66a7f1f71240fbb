package rpc

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// pendingBytes says how many bytes the kernel holds for nc that were not read yet (of a TLS
// connection, its records' bytes): bytes that arrived. 0 when it cannot tell.
func pendingBytes(nc net.Conn) int64 {
	for { // through the wrappers (a TLS connection, the peeked start of one) to the socket
		w, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		nc = w.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return 0
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	var n int
	if raw.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }) != nil || err != nil {
		return 0
	}
	return int64(max(n, 0))
}
