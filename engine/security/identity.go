package security

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// How an identity was established (Identity.Method).
const (
	// MethodCertificate: the client presented a certificate signed by the cluster's CA; the user
	// is its subject's common name and the groups its organizations (as Kubernetes reads client
	// certificates).
	MethodCertificate = "certificate"
	// MethodToken: the client presented a bearer token found in the servers' token file.
	MethodToken = "token"
	// MethodDeclared: security is off and the client named itself; nothing is proven.
	MethodDeclared = "declared"
	// MethodProxied: an authenticated caller allowed to act for others (Authenticator.Proxy: a
	// region server serving an HBase client's master call) named the user; Identity.Via is
	// that caller.
	MethodProxied = "proxied"
)

// Identity is who a connection or request acts as.
type Identity struct {
	User   string
	Groups []string
	Method string
	// Via is who named this identity when Method is MethodProxied.
	Via string
}

// Authenticated says whether the identity was proven (not just declared).
func (id Identity) Authenticated() bool {
	return id.Method == MethodCertificate || id.Method == MethodToken || id.Method == MethodProxied
}

// InGroup says whether the identity belongs to group (without HBase's '@').
func (id Identity) InGroup(group string) bool { return slices.Contains(id.Groups, group) }

func (id Identity) String() string {
	s := id.User
	if s == "" {
		s = "(anonymous)"
	}
	if len(id.Groups) > 0 {
		s += " (groups " + strings.Join(id.Groups, ",") + ")"
	}
	if id.Via != "" {
		s += " via " + id.Via
	}
	return s
}

// FromCertificate is the identity a verified client certificate proves: its subject's common name,
// with its organizations as groups.
func FromCertificate(c *x509.Certificate) (Identity, error) {
	if c.Subject.CommonName == "" {
		return Identity{}, errors.New("the client certificate's subject has no common name (CN), which names the user")
	}
	return Identity{User: c.Subject.CommonName, Groups: slices.Clone(c.Subject.Organization), Method: MethodCertificate}, nil
}

type identityKey struct{}

// NewContext returns ctx carrying id.
func NewContext(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// FromContext returns the identity ctx carries (set by the servers' authentication).
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// ErrUnauthenticated is the error of a connection or request that proves no identity while
// security is on, or presents a token or certificate that proves none.
var ErrUnauthenticated = errors.New("not authenticated")

func unauthenticated(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUnauthenticated}, args...)...)
}

// IsAuthFailure says whether err is a refusal of the caller's credentials or of the server's
// certificate — a TLS verification failure on either side, an unknown token, security on and
// no credentials — which retrying with the same credentials cannot mend.
func IsAuthFailure(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrUnauthenticated) {
		return true
	}
	var cv *tls.CertificateVerificationError
	if errors.As(err, &cv) {
		return true
	}
	var ae tls.AlertError
	if errors.As(err, &ae) {
		return true
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "remote error" { // an alert from the peer (bad or expired certificate)
		return true
	}
	switch status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied:
		return true
	case codes.Unavailable:
		// gRPC reports a failed TLS handshake as unavailable.
		return strings.Contains(err.Error(), "authentication handshake failed")
	}
	return false
}
