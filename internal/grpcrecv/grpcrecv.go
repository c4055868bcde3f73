// Package grpcrecv bounds how long a gRPC server waits for a call's request message to arrive.
//
// grpc-go has no such bound of its own, and a call's deadline (when it has one) or a server's
// own budget applies only from the handler on, once the message is in: a client that sends a
// call's headers and part of its message, and no more, with no deadline, holds the stream and
// the bytes it has sent (up to the server's receive limit) for as long as it keeps the
// connection open. Here a tap handle (TapHandle) arms a timer when a call's headers arrive that
// cancels the call if its message has not arrived within the timeout; the interceptors
// (UnaryServerInterceptor, StreamServerInterceptor) stop it once it has — for a streaming call,
// once its first message has. A call cut off ends CANCELLED, before its handler runs.
//
// Install all three on a server:
//
//	grpc.InTapHandle(grpcrecv.TapHandle(d)),
//	grpc.ChainUnaryInterceptor(grpcrecv.UnaryServerInterceptor, ...),
//	grpc.ChainStreamInterceptor(grpcrecv.StreamServerInterceptor, ...),
//
// with the interceptors first in their chains, so that no other work runs under the timer. The
// interceptors do nothing on a call without a timer, so they may stay installed when the tap is
// not (timeout 0).
//
// Everything here is safe for concurrent use: the timer is per call, in the call's context.
package grpcrecv

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/tap"
)

// timerKey is the context key of a call's receive timer.
type timerKey struct{}

// TapHandle returns a tap handle that arms, when a call's headers arrive, a timer that cancels
// the call unless its request message has arrived within d (the interceptors stop it). The
// context it derives is the stream's, which grpc-go cancels when the stream ends, releasing it.
// d must be > 0; a server with no bound installs no tap.
func TapHandle(d time.Duration) tap.ServerInHandle {
	return func(ctx context.Context, _ *tap.Info) (context.Context, error) {
		ctx, cancel := context.WithCancel(ctx)
		t := time.AfterFunc(d, cancel)
		return context.WithValue(ctx, timerKey{}, t), nil
	}
}

// Stop stops ctx's receive timer, if it has one: the request message has arrived. It reports
// false when the timer had already fired (the call is cancelled) or there is none.
func Stop(ctx context.Context) bool {
	t, ok := ctx.Value(timerKey{}).(*time.Timer)
	return ok && t.Stop()
}

// UnaryServerInterceptor stops the call's receive timer: grpc-go runs a unary call's
// interceptors once its request message has been received.
func UnaryServerInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	Stop(ctx)
	return handler(ctx, req)
}

// StreamServerInterceptor stops a streaming call's receive timer once its first message has
// arrived (a health Watch's request; reflection's first request). A stream the client opens
// without ever sending is cut off too.
func StreamServerInterceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if _, ok := ss.Context().Value(timerKey{}).(*time.Timer); !ok {
		return handler(srv, ss)
	}
	return handler(srv, &firstRecvStream{ServerStream: ss})
}

// firstRecvStream stops the receive timer after its first RecvMsg. (A stream's RecvMsg is
// called from one goroutine at a time, as grpc-go requires, so done needs no lock.)
type firstRecvStream struct {
	grpc.ServerStream
	done bool
}

func (s *firstRecvStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if !s.done {
		s.done = true
		Stop(s.Context())
	}
	return err
}
