package security

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	pb "github.com/cellstore/cellstore/engine/api/cellstore/v1"
)

// Credentials are what a client (a program, or a server calling another) presents: TLS from Certs
// (nil: plaintext), a bearer token, and, with security off, the user it names.
type Credentials struct {
	Certs *Certs
	Token string
	User  string
	// ServerName, when set, is the name the server's certificate must hold instead of the host
	// dialled; AnyServerName accepts any server certificate of the CA (ClientConfigAnyName). Both
	// are for servers reached at external addresses.
	ServerName    string
	AnyServerName bool
}

// Check says whether the credentials can be used: a token is sent only over TLS.
func (c *Credentials) Check() error {
	if c != nil && c.Token != "" && c.Certs == nil {
		return errors.New("a token is sent only over TLS: give the CA that signs the servers' certificates (--tls-ca-file)")
	}
	return nil
}

func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// MaxAnswerBytes is the largest gRPC answer a connection made by Dial reads.
const MaxAnswerBytes = 256 << 20

// Dial makes a gRPC connection to a Cellstore service (a master, or a region server's Admin
// service) at host:port with creds (nil: plaintext, no token). Every connection attempt resolves
// the host name again: in Kubernetes a restarted pod keeps its DNS name but gets a new address,
// and gRPC's own DNS resolver re-resolves at most every 30 seconds, which would leave the
// connection dialing the dead address that long. A name with several addresses (the masters'
// headless Service) is dialled address after address without waiting out a dead one (dialService).
// Reconnects back off from 100 ms to at most 2 s, so that a restarted server is reached within
// seconds of answering. Each TLS handshake uses the certificates as they are on disk then
// (rotation). extra are further dial options (an authority: the name a certificate must hold
// when addr is an external address). addr may also name a unix socket as gRPC does ("unix:PATH",
// "unix:///PATH", "unix-abstract:NAME"): gRPC's own resolver and dialer take it, never through a
// proxy, with "localhost" as the authority.
func Dial(addr string, creds *Credentials, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	if err := creds.Check(); err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		// gRPC's 4 MiB default would refuse a master's answer about many tables or permissions
		// (ListTables, GetUserPermissions): a region server that cannot read the permissions
		// keeps stale ones.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxAnswerBytes)),
	}
	target := "passthrough:///" + addr
	switch {
	case UnixSocket(addr):
		target = addr
		opts = append(opts, grpc.WithNoProxy())
	case !proxied(addr):
		// (gRPC sends a connection through an HTTP proxy named by the environment only with
		// its own dialer.)
		opts = append(opts, grpc.WithContextDialer(dialService))
	}
	if creds != nil && creds.Certs != nil {
		opts = append(opts, grpc.WithTransportCredentials(&transportCreds{certs: creds.Certs, anyName: creds.AnyServerName}))
		if creds.ServerName != "" {
			// gRPC's TLS checks the authority's host name.
			opts = append(opts, grpc.WithAuthority(creds.ServerName))
		}
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if creds != nil && creds.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(tokenCreds(creds.Token)))
	} else if creds != nil && creds.User != "" {
		// Security off: the user the client names rides along with each call.
		user := creds.User
		opts = append(opts,
			grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, o ...grpc.CallOption) error {
				return inv(metadata.AppendToOutgoingContext(ctx, "cellstore-user", user), method, req, reply, cc, o...)
			}),
			grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, s grpc.Streamer, o ...grpc.CallOption) (grpc.ClientStream, error) {
				return s(metadata.AppendToOutgoingContext(ctx, "cellstore-user", user), desc, cc, method, o...)
			}))
	}
	return grpc.NewClient(target, append(opts, extra...)...)
}

// tokenCreds sends a bearer token with every call.
type tokenCreds string

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}
func (tokenCreds) RequireTransportSecurity() bool { return true }

// transportCreds are gRPC's TLS credentials built afresh for each handshake from Certs, so that a
// rotated certificate or CA is used by the next connection.
type transportCreds struct {
	certs      *Certs
	clientAuth tls.ClientAuthType
	anyName    bool // any server certificate of the CA
}

func (t *transportCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if t.anyName {
		cfg, err := t.certs.ClientConfigAnyName()
		if err != nil {
			conn.Close()
			return nil, nil, err
		}
		return credentials.NewTLS(cfg).ClientHandshake(ctx, authority, conn)
	}
	return credentials.NewTLS(t.certs.ClientConfig(hostOf(authority))).ClientHandshake(ctx, authority, conn)
}

func (t *transportCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	cfg, err := t.certs.ServerConfig(t.clientAuth, "h2")
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return credentials.NewTLS(cfg).ServerHandshake(conn)
}

func (t *transportCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.3"}
}
func (t *transportCreds) Clone() credentials.TransportCredentials { c := *t; return &c }
func (t *transportCreds) OverrideServerName(string) error         { return nil }

// GRPCServerOptions are the options of a gRPC server with TLS from certs (nil: plaintext) whose
// calls are authenticated by auth: each call's context carries its Identity (FromContext), and a
// call that proves none while security is on is refused with codes.Unauthenticated.
func GRPCServerOptions(certs *Certs, auth *Authenticator) []grpc.ServerOption {
	var opts []grpc.ServerOption
	if certs != nil {
		opts = append(opts, grpc.Creds(&transportCreds{certs: certs, clientAuth: tls.VerifyClientCertIfGiven}))
	}
	authn := func(ctx context.Context) (context.Context, error) {
		var cs *tls.ConnectionState
		if p, ok := peer.FromContext(ctx); ok {
			if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
				cs = &ti.State
			}
		}
		var token, user string
		md, _ := metadata.FromIncomingContext(ctx) // (a copy: taken once per call)
		if md != nil {
			if v := md.Get("authorization"); len(v) > 0 {
				var found bool
				if token, found = strings.CutPrefix(v[0], "Bearer "); !found {
					return nil, status.Error(codes.Unauthenticated, "the authorization header is not 'Bearer <token>'")
				}
			}
			if v := md.Get("cellstore-user"); len(v) > 0 {
				user = v[0]
			}
		}
		id, err := auth.Authenticate(cs, token, user)
		if err != nil {
			return nil, status.Error(codes.Unauthenticated, err.Error())
		}
		if v := md.Get(mdOnBehalfOf); len(v) > 0 {
			if id, err = auth.proxied(id, v[0], md.Get(mdOnBehalfOfGroups)); err != nil {
				// A detailed refusal: callers do not mistake it for a broken connection.
				return nil, (&pb.ErrorDetail{Code: pb.ErrorCode_ERROR_CODE_ACCESS_DENIED, Message: err.Error()}).Status()
			}
		}
		return NewContext(ctx, id), nil
	}
	opts = append(opts,
		// Streams per connection: gRPC's default has no bound (clients queue past it).
		grpc.MaxConcurrentStreams(MaxConcurrentStreams),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			ctx, err := authn(ctx)
			if err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			ctx, err := authn(ss.Context())
			if err != nil {
				return err
			}
			return h(srv, &identityStream{ServerStream: ss, ctx: ctx})
		}))
	return opts
}

// MaxConcurrentStreams bounds the calls in flight on one connection to a server made with
// GRPCServerOptions; a client past it waits for one to end.
const MaxConcurrentStreams = 1024

type identityStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *identityStream) Context() context.Context { return s.ctx }
