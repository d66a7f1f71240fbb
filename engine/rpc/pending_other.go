//go:build !linux

package rpc

import "net"

// pendingBytes says how many bytes the kernel holds for nc that were not read yet: unknown here.
func pendingBytes(net.Conn) int64 { return 0 }
