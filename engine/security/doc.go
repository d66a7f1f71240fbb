// Package security proves who is at the other end of a connection. It holds TLS configurations
// built from certificate files that are read again when they change (rotation with no restart),
// the identity of a caller (from its client certificate or a bearer token), the token file
// servers check tokens against, gRPC credentials and interceptors that use them, and a small
// certificate authority for clusters and tests. docs/security.md is the user's view.
//
// It is a low layer: the rpc, region server, master and client packages use it; it uses none of
// them.
package security
