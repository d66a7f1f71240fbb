package security

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"google.golang.org/grpc/metadata"
)

// Authenticator decides who a connection or request is. The zero value (and nil) is security off:
// a caller that proves nothing acts as the user it names.
type Authenticator struct {
	// Required refuses callers that prove no identity (--security=on).
	Required bool
	// Tokens are the bearer tokens accepted (nil: none).
	Tokens *Tokens
	// Proxy says whether an authenticated caller may act on behalf of other users (OnBehalfOf);
	// nil: none may. The servers set it to their superusers, which the region servers are.
	Proxy func(Identity) bool
}

// Metadata keys of a call made on behalf of another user (OnBehalfOf).
const (
	mdOnBehalfOf       = "cellstore-on-behalf-of"
	mdOnBehalfOfGroups = "cellstore-on-behalf-of-groups"
)

// OnBehalfOf returns ctx whose outgoing gRPC calls act as id rather than as the caller's own
// credentials: the server accepts that only from a caller its Authenticator.Proxy allows (or,
// with security off, from anyone). A region server forwards an HBase client's master calls so.
func OnBehalfOf(ctx context.Context, id Identity) context.Context {
	kv := []string{mdOnBehalfOf, id.User}
	for _, g := range id.Groups {
		kv = append(kv, mdOnBehalfOfGroups, g)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// proxied is the identity a call made by caller on behalf of user (with groups gs) acts as, or
// an error when caller may not act for others.
func (a *Authenticator) proxied(caller Identity, user string, gs []string) (Identity, error) {
	gs = slices.Clone(gs)
	if a == nil || !a.Required || !caller.Authenticated() {
		// Security off (with or without TLS): the caller could as well have named the user itself.
		return Identity{User: user, Groups: gs, Method: MethodDeclared}, nil
	}
	if caller.Method == MethodProxied || a.Proxy == nil || !a.Proxy(caller) {
		return Identity{}, unauthenticated("%s may not act on behalf of other users (only superusers may)", caller)
	}
	if err := checkName("user", user); err != nil {
		return Identity{}, unauthenticated("%v", err)
	}
	return Identity{User: user, Groups: gs, Method: MethodProxied, Via: caller.User}, nil
}

// Authenticate returns the identity of a caller from its TLS connection state (nil: plaintext),
// the bearer token it presented (empty: none) and the user it names. A token, when given, must be
// known (also with security off: a wrong token is a mistake to report, not to ignore); otherwise a
// verified client certificate proves the user; otherwise, with security on, the caller is refused
// and with it off it acts as the user it names.
func (a *Authenticator) Authenticate(cs *tls.ConnectionState, token, declared string) (Identity, error) {
	if token != "" {
		if a == nil || a.Tokens == nil {
			return Identity{}, unauthenticated("this server accepts no tokens (it has no token file): connect with a client certificate or without a token")
		}
		if cs == nil {
			return Identity{}, unauthenticated("a token is accepted only over TLS")
		}
		id, ok := a.Tokens.Lookup(token)
		if !ok {
			return Identity{}, unauthenticated("the token is not known to this server (revoked, mistyped, or for another cluster)")
		}
		return id, nil
	}
	if cs != nil && len(cs.VerifiedChains) > 0 && len(cs.PeerCertificates) > 0 {
		id, err := FromCertificate(cs.PeerCertificates[0])
		if err != nil {
			return Identity{}, unauthenticated("%v", err)
		}
		return id, nil
	}
	if a != nil && a.Required {
		return Identity{}, unauthenticated("security is on: connect over TLS with a client certificate signed by the cluster's CA, or with a token")
	}
	return Identity{User: declared, Method: MethodDeclared}, nil
}

// LogMode logs, once at start, what the server's security is: off is said loudly.
func (a *Authenticator) LogMode(log *slog.Logger, tlsOn bool) {
	switch {
	case a != nil && a.Required:
		log.Info("security on: every connection proves its user (client certificate or token)", "tls", tlsOn, "tokens", a.Tokens != nil)
	case tlsOn:
		log.Warn("security off: connections are encrypted but callers are trusted as whoever they name (--security=on to require a client certificate or token)")
	default:
		log.Warn("security off: connections are plaintext and callers are trusted as whoever they name; anyone who reaches the ports can read, write and drop tables (--security=on with --tls-cert-file/--tls-key-file/--tls-ca-file)")
	}
}

// HTTPRequest authenticates an HTTP request: its TLS client certificate, checked against certs'
// CA (the HTTP endpoint asks for one without checking it at the handshake, so that a caller with
// another CA's certificate still reaches the open pages), or an "Authorization: Bearer <token>"
// header.
func (a *Authenticator) HTTPRequest(r *http.Request, certs *Certs) (Identity, error) {
	var token string
	if h := r.Header.Get("Authorization"); h != "" {
		var ok bool
		if token, ok = strings.CutPrefix(h, "Bearer "); !ok {
			return Identity{}, unauthenticated("the Authorization header is not 'Bearer <token>'")
		}
	}
	cs := r.TLS
	if certs != nil {
		cs = certs.VerifyClient(cs)
	}
	return a.Authenticate(cs, token, "")
}
