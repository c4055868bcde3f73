package node

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// rawCodec sends pre-encoded bytes so that invalid UTF-8 reaches the wire (protobuf-go's
// Marshal refuses to write it).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)   { return v.([]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error { return proto.Unmarshal(b, v.(proto.Message)) }
func (rawCodec) Name() string                    { return "proto" }

var _ encoding.Codec = rawCodec{}

// TestInvalidUTF8OverTheWire: invalid UTF-8 sent by a client is INVALID_ARGUMENT naming the
// field, is counted in the request metrics, and never reaches the engine.
func TestInvalidUTF8OverTheWire(t *testing.T) {
	f := newFake()
	f.started = nil
	pe := &panicEngine{fakeEngine: f}
	h := start(t, testConfig(), loadEngine(pe), true)
	item := func(text string) []byte {
		b := protowire.AppendTag(nil, 2, protowire.BytesType)
		return protowire.AppendString(b, text)
	}
	msg := func(query, instruction string, items ...[]byte) []byte {
		b := protowire.AppendTag(nil, 3, protowire.BytesType)
		b = protowire.AppendString(b, query)
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendString(b, instruction)
		for _, it := range items {
			b = protowire.AppendTag(b, 5, protowire.BytesType)
			b = protowire.AppendBytes(b, it)
		}
		return b
	}
	tests := []struct {
		name string
		req  []byte
		want string // "" means OK
	}{
		{"valid", msg("shoes", "", item("red shoes")), ""},
		{"query", msg("sho\xffes", "", item("x")), "query: invalid UTF-8"},
		{"instruction", msg("q", "judge\xc3", item("x")), "instruction: invalid UTF-8"},
		{"second item", msg("q", "", item("fine"), item("b\xed\xa0\x80d")), "items[1].text: invalid UTF-8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := pe.tokenizeCalls.Load()
			out := new(pb.ScoreBatchResponse)
			err := h.conn.Invoke(ctxT(t), pb.Scorer_ScoreBatch_FullMethodName, tc.req, out, grpc.ForceCodec(rawCodec{}))
			if tc.want == "" {
				if err != nil || len(out.Scores) != 1 {
					t.Fatalf("valid request: %v (%d scores)", err, len(out.Scores))
				}
				return
			}
			if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != tc.want {
				t.Errorf("err = %v, want InvalidArgument %q", err, tc.want)
			}
			if pe.tokenizeCalls.Load() != before {
				t.Error("a request with invalid UTF-8 reached the engine")
			}
		})
	}
	if got := testutil.ToFloat64(h.n.m.requests.WithLabelValues("InvalidArgument")); got != 3 {
		t.Errorf("requests_total{code=InvalidArgument} = %v, want 3", got)
	}
	if got := testutil.ToFloat64(h.n.m.errors.WithLabelValues(reasonInvalid)); got != 3 {
		t.Errorf("errors_total{reason=invalid_argument} = %v, want 3", got)
	}
}
