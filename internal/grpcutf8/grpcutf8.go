// Package grpcutf8 makes a gRPC server answer INVALID_ARGUMENT, naming the field, when a request
// cannot be decoded: a string field that is not valid UTF-8, or bytes that are not well-formed
// protobuf wire data.
//
// protobuf-go rejects such a message while decoding it, and grpc-go reports every decoding error
// as INTERNAL ("grpc: failed to unmarshal the received message") before any handler or interceptor
// runs, so a client that sent bad input would be told the server broke. The codec here, when a
// decode of one of this project's request messages fails, walks the wire data to find the first
// bad field, records it against the (reset, empty) message and reports success; the interceptor,
// which receives that same message, turns the record into INVALID_ARGUMENT before the handler is
// called. The handler never sees such a request. Use both together: ServerOptions returns them.
//
// The error has the shape of the proxy's request contract (proxy/request.FieldError): message
// "<field>: <problem>" and one errdetails.BadRequest field violation, where field is a path such as
// "items[3].text" ("request" when no field can be named). It is built here rather than by
// proxy/request because scorer nodes use this package too and import nothing from the proxy.
//
// The codec and interceptor are safe for concurrent use.
package grpcutf8

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// violation is what was wrong with one request.
type violation struct{ field, problem string }

// bad maps a request message that failed to decode (by pointer) to its violation. Entries live
// from the codec's Unmarshal to the interceptor's check of the same request.
var bad sync.Map

// ServerOptions returns the codec and the unary interceptor. Pass them to grpc.NewServer; the
// interceptor is chained first so that no other interceptor sees a request that failed to decode.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(Codec()),
		grpc.ChainUnaryInterceptor(UnaryServerInterceptor),
	}
}

// Codec returns the recording proto codec, for servers that place UnaryServerInterceptor in their
// own chain (it must run before the handler, after any metrics interceptor that should count it).
func Codec() encoding.CodecV2 { return codec{base: encoding.GetCodecV2("proto")} }

// UnaryServerInterceptor fails the requests that the codec could not decode.
func UnaryServerInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if v, ok := bad.LoadAndDelete(req); ok {
		return nil, fieldError(v.(violation))
	}
	return handler(ctx, req)
}

// fieldError is INVALID_ARGUMENT "<field>: <problem>" with one BadRequest field violation.
func fieldError(v violation) error {
	st := status.New(codes.InvalidArgument, v.field+": "+v.problem)
	if d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
		{Field: v.field, Description: v.problem},
	}}); err == nil {
		st = d
	}
	return st.Err()
}

type codec struct{ base encoding.CodecV2 }

func (c codec) Name() string                           { return c.base.Name() }
func (c codec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.base.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	m, ok := v.(proto.Message)
	// Only this project's unary request messages: a streaming RPC (health Watch, reflection) never
	// passes the unary interceptor, so a record for it would never be collected.
	if !ok || !strings.HasPrefix(string(m.ProtoReflect().Descriptor().FullName()), "relevance.v1.") {
		return err
	}
	viol, found := inspect(data.Materialize(), m.ProtoReflect().Descriptor(), "", "request")
	if !found {
		// Well-formed as far as the walk sees, yet protobuf-go refused it (nesting too deep, a
		// malformed packed list): still the client's bytes.
		viol = violation{"request", "malformed protobuf: " + reason(err)}
	}
	proto.Reset(m)
	bad.Store(v, viol)
	return nil
}

// reason is a protobuf-go error's text without its "proto:" prefix (which protobuf-go writes with
// a space or a no-break space, varying between builds, so that nobody matches on it).
func reason(err error) string {
	return strings.TrimLeftFunc(strings.TrimPrefix(err.Error(), "proto:"), unicode.IsSpace)
}

// inspect walks the wire-format message b of type md and returns the first field that is not
// well-formed or holds invalid UTF-8 (at any depth), named by its path ("items[3].text"); self
// names b itself, for problems that belong to no one field.
func inspect(b []byte, md protoreflect.MessageDescriptor, prefix, self string) (violation, bool) {
	malformed := func(field string, n int) (violation, bool) {
		return violation{field, "malformed protobuf: " + reason(protowire.ParseError(n))}, true
	}
	seen := map[protowire.Number]int{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return malformed(self, n)
		}
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		name := self
		if fd != nil {
			name = prefix + string(fd.Name())
			if fd.IsList() {
				name = fmt.Sprintf("%s[%d]", name, seen[num])
				seen[num]++
			}
		}
		if typ != protowire.BytesType || fd == nil {
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return malformed(name, m)
			}
			b = b[m:]
			continue
		}
		val, m := protowire.ConsumeBytes(b)
		if m < 0 {
			return malformed(name, m)
		}
		b = b[m:]
		switch {
		case fd.Kind() == protoreflect.StringKind && !utf8.Valid(val):
			return violation{name, "invalid UTF-8"}, true
		case fd.Kind() == protoreflect.MessageKind && !fd.IsMap():
			if v, ok := inspect(val, fd.Message(), name+".", name); ok {
				return v, true
			}
		}
	}
	return violation{}, false
}
