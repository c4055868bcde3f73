// Package grpcutf8 makes a gRPC server answer INVALID_ARGUMENT, naming the field, when a request
// carries a string field that is not valid UTF-8.
//
// protobuf-go rejects such a message while decoding it, and grpc-go reports every decoding error
// as INTERNAL ("grpc: error unmarshalling request") before any handler or interceptor runs, so a
// client that sent bad text would be told the server broke. The codec here retries a failed decode
// with every invalid string field repaired (invalid bytes → U+FFFD) and records which field was
// bad against the decoded message; the interceptor, which receives that same message, turns the
// record into INVALID_ARGUMENT before the handler is called. Nothing is ever scored on repaired
// text. Use both together: ServerOptions returns them.
//
// The codec and interceptor are safe for concurrent use.
package grpcutf8

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// bad maps a decoded request message (by pointer) to the name of its first invalid string field.
// Entries live from the codec's Unmarshal to the interceptor's check of the same request.
var bad sync.Map

// ServerOptions returns the codec and the unary interceptor. Pass them to grpc.NewServer; the
// interceptor is chained first so that no other interceptor sees a repaired request.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(Codec()),
		grpc.ChainUnaryInterceptor(UnaryServerInterceptor),
	}
}

// Codec returns the repairing proto codec, for servers that place UnaryServerInterceptor in their
// own chain (it must run before the handler, after any metrics interceptor that should count it).
func Codec() encoding.CodecV2 { return codec{base: encoding.GetCodecV2("proto")} }

// UnaryServerInterceptor fails requests that the codec had to repair.
func UnaryServerInterceptor(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if field, ok := bad.LoadAndDelete(req); ok {
		return nil, status.Errorf(codes.InvalidArgument, "%s: invalid UTF-8", field)
	}
	return handler(ctx, req)
}

type codec struct{ base encoding.CodecV2 }

func (c codec) Name() string                           { return c.base.Name() }
func (c codec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.base.Unmarshal(data, v)
	if err == nil || !strings.Contains(err.Error(), "UTF-8") {
		return err
	}
	m, ok := v.(proto.Message)
	// Only this project's unary request messages: a streaming RPC (health Watch, reflection) never
	// passes the unary interceptor, so a record for it would never be collected.
	if !ok || !strings.HasPrefix(string(m.ProtoReflect().Descriptor().FullName()), "relevance.v1.") {
		return err
	}
	var field string
	fixed, ok := repair(nil, data.Materialize(), m.ProtoReflect().Descriptor(), "", &field)
	if !ok || field == "" {
		return err
	}
	proto.Reset(m)
	if err2 := proto.Unmarshal(fixed, m); err2 != nil {
		return err
	}
	bad.Store(v, field)
	return nil
}

// repair copies the wire-format message b to out, replacing invalid UTF-8 in string fields (at any
// depth) and naming the first such field in *first (e.g. "items[3].text"). It returns false when b
// is not well-formed wire data.
func repair(out, b []byte, md protoreflect.MessageDescriptor, prefix string, first *string) ([]byte, bool) {
	seen := map[protowire.Number]int{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false
		}
		tag := b[:n]
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		if typ != protowire.BytesType || fd == nil {
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return nil, false
			}
			out = append(append(out, tag...), b[:m]...)
			b = b[m:]
			continue
		}
		val, m := protowire.ConsumeBytes(b)
		if m < 0 {
			return nil, false
		}
		b = b[m:]
		name := prefix + string(fd.Name())
		if fd.IsList() {
			name = fmt.Sprintf("%s[%d]", name, seen[num])
			seen[num]++
		}
		switch {
		case fd.Kind() == protoreflect.StringKind && !utf8.Valid(val):
			if *first == "" {
				*first = name
			}
			val = []byte(strings.ToValidUTF8(string(val), "\uFFFD"))
		case fd.Kind() == protoreflect.MessageKind && !fd.IsMap():
			var ok bool
			if val, ok = repair(nil, val, fd.Message(), name+".", first); !ok {
				return nil, false
			}
		}
		out = append(out, tag...)
		out = protowire.AppendBytes(out, val)
	}
	return out, true
}
