package grpcutf8

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/testing/protocmp"

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

// TestUndecodableRequestIsInvalidArgument: invalid UTF-8 and malformed wire data are the client's
// fault: INVALID_ARGUMENT naming the field, and the handler never runs.
func TestUndecodableRequestIsInvalidArgument(t *testing.T) {
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
		{"truncated query", []byte{0x1a, 0x7f}, codes.InvalidArgument, "query: malformed protobuf: unexpected EOF"},
		{"field number zero", []byte{0x00, 0x01}, codes.InvalidArgument, "request: malformed protobuf: invalid field number"},
		{"truncated varint", []byte{0x10, 0xff}, codes.InvalidArgument, "batch_index: malformed protobuf: unexpected EOF"},
		{"truncated text inside the second item", msg("q", item("a", "x"), []byte{0x12, 0x05, 'a'}), codes.InvalidArgument,
			"items[1].text: malformed protobuf: unexpected EOF"},
		{"item cut short", append(msg("q"), 0x2a, 0x09, 0x0a), codes.InvalidArgument, "items[0]: malformed protobuf: unexpected EOF"},
		{"first problem wins", append(msg("\xff"), 0x00), codes.InvalidArgument, "query: invalid UTF-8"},
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
			if tc.code == codes.InvalidArgument {
				// The field and problem are also in a BadRequest detail, as proxy/request.FieldError puts them.
				field, problem, _ := strings.Cut(tc.message, ": ")
				want := []*errdetails.BadRequest_FieldViolation{{Field: field, Description: problem}}
				var got []*errdetails.BadRequest_FieldViolation
				for _, d := range status.Convert(err).Details() {
					if br, ok := d.(*errdetails.BadRequest); ok {
						got = append(got, br.GetFieldViolations()...)
					}
				}
				if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
					t.Errorf("field violations (-want +got):\n%s", d)
				}
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
