package grpcutf8

import (
	"context"
	"net"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

type scorer struct {
	pb.UnimplementedScorerServer
	calls int
}

func (s *scorer) ScoreBatch(_ context.Context, r *pb.ScoreBatchRequest) (*pb.ScoreBatchResponse, error) {
	s.calls++
	return &pb.ScoreBatchResponse{Model: r.GetQuery()}, nil
}

// rawCodec sends pre-encoded bytes, so the test can put invalid UTF-8 on the wire (protobuf-go's
// Marshal refuses to).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	return proto.Unmarshal(b, v.(proto.Message))
}
func (rawCodec) Name() string { return "proto" }

var _ encoding.Codec = rawCodec{}

func TestInvalidUTF8IsInvalidArgument(t *testing.T) {
	defer goleak.VerifyNone(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	impl := &scorer{}
	srv := grpc.NewServer(ServerOptions()...)
	pb.RegisterScorerServer(srv, impl)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	item := func(id, text string) []byte {
		var b []byte
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, id)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		return protowire.AppendString(b, text)
	}
	msg := func(query string, items ...[]byte) []byte {
		var b []byte
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, query)
		for _, it := range items {
			b = protowire.AppendTag(b, 5, protowire.BytesType)
			b = protowire.AppendBytes(b, it)
		}
		return b
	}
	tests := []struct {
		name    string
		req     []byte
		code    codes.Code
		message string
	}{
		{"valid", msg("shoes", item("a", "red shoes"), item("b", "blue")), codes.OK, ""},
		{"bad query", msg("sho\xffes", item("a", "x")), codes.InvalidArgument, "query: invalid UTF-8"},
		{"bad third item text", msg("q", item("a", "x"), item("b", "y"), item("c", "\xc3\x28")), codes.InvalidArgument, "items[2].text: invalid UTF-8"},
		{"bad item id", msg("q", item("\xfe", "x")), codes.InvalidArgument, "items[0].id: invalid UTF-8"},
		{"garbage wire data", []byte{0x1a, 0x7f}, codes.Internal, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := impl.calls
			out := new(pb.ScoreBatchResponse)
			err := conn.Invoke(context.Background(), "/relevance.v1.Scorer/ScoreBatch", tc.req, out, grpc.ForceCodec(rawCodec{}))
			if got := status.Code(err); got != tc.code {
				t.Fatalf("code = %v, want %v (err %v)", got, tc.code, err)
			}
			if tc.message != "" && status.Convert(err).Message() != tc.message {
				t.Errorf("message = %q, want %q", status.Convert(err).Message(), tc.message)
			}
			if tc.code != codes.OK && impl.calls != before {
				t.Errorf("handler ran for a rejected request")
			}
		})
	}
	n := 0
	bad.Range(func(any, any) bool { n++; return true })
	if n != 0 {
		t.Errorf("%d records left behind", n)
	}
}
