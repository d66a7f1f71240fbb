package cellstorev1

import (
	"net"
	"strconv"
)

// Address is the server's host:port (bracketed for IPv6): the identity masters, region servers,
// clients and the operator all use for a region server. "" for a nil ServerName.
func (s *ServerName) Address() string {
	if s == nil {
		return ""
	}
	return net.JoinHostPort(s.GetHost(), strconv.Itoa(int(s.GetPort())))
}
