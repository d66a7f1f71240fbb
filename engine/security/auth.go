package security

import (
	"crypto/tls"
	"log/slog"
	"net/http"
	"strings"
)

// Authenticator decides who a connection or request is. The zero value (and nil) is security off:
// a caller that proves nothing acts as the user it names.
type Authenticator struct {
	// Required refuses callers that prove no identity (--security=on).
	Required bool
	// Tokens are the bearer tokens accepted (nil: none).
	Tokens *Tokens
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
