package request

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// limits are the proxy's defaults.
var limits = Limits{MaxItems: 1000, MaxItemBytes: 32 << 10, MaxQueryBytes: 8 << 10}

func TestValidateRules(t *testing.T) {
	items := func(texts ...string) []*relevancev1.Item {
		out := []*relevancev1.Item{{Text: "ok"}}
		for _, s := range texts {
			out = append(out, &relevancev1.Item{Text: s})
		}
		return out
	}
	many := make([]*relevancev1.Item, 1001)
	for i := range many {
		many[i] = &relevancev1.Item{Text: "x"}
	}
	tests := []struct {
		name  string
		req   *relevancev1.ScoreRequest
		field string // "" when req is valid
		want  string // problem
	}{
		{name: "valid", req: &relevancev1.ScoreRequest{Query: "q", Items: items("a"),
			Options: &relevancev1.ScoreOptions{Truncation: relevancev1.Truncation_TRUNCATION_NONE}}},
		{name: "valid at every limit", req: &relevancev1.ScoreRequest{Query: strings.Repeat("q", 8192),
			Instruction: strings.Repeat("i", 8192), Items: append(many[:999:999], &relevancev1.Item{Text: strings.Repeat("x", 32768)})}},
		{name: "nil request", req: nil, field: "request", want: "missing"},
		{name: "empty query", req: &relevancev1.ScoreRequest{Items: items("a")}, field: "query", want: "empty"},
		{name: "long query", req: &relevancev1.ScoreRequest{Query: strings.Repeat("q", 9000), Items: items("a")},
			field: "query", want: "9000 bytes, limit 8192"},
		{name: "bad query", req: &relevancev1.ScoreRequest{Query: "\xff", Items: items("a")}, field: "query", want: "invalid UTF-8"},
		{name: "white-space query", req: &relevancev1.ScoreRequest{Query: " \t\n ", Items: items("a")}, field: "query", want: "only white space"},
		{name: "long query before bad query", req: &relevancev1.ScoreRequest{Query: strings.Repeat("\xff", 9000), Items: items("a")},
			field: "query", want: "9000 bytes, limit 8192"},
		{name: "long instruction", req: &relevancev1.ScoreRequest{Query: "q", Instruction: strings.Repeat("i", 8193), Items: items("a")},
			field: "instruction", want: "8193 bytes, limit 8192"},
		{name: "bad instruction", req: &relevancev1.ScoreRequest{Query: "q", Instruction: "\xc3", Items: items("a")},
			field: "instruction", want: "invalid UTF-8"},
		{name: "no items", req: &relevancev1.ScoreRequest{Query: "q"}, field: "items", want: "empty"},
		{name: "too many items", req: &relevancev1.ScoreRequest{Query: "q", Items: many}, field: "items", want: "1001 items, limit 1000"},
		{name: "bad request_id", req: &relevancev1.ScoreRequest{RequestId: "r\xfe", Query: "q", Items: items("a")},
			field: "request_id", want: "invalid UTF-8"},
		{name: "request_id before items", req: &relevancev1.ScoreRequest{RequestId: "r\xfe", Query: "q", Items: items("\xff")},
			field: "request_id", want: "invalid UTF-8"},
		{name: "nil item", req: &relevancev1.ScoreRequest{Query: "q", Items: []*relevancev1.Item{nil}}, field: "items[0]", want: "missing"},
		{name: "long text", req: &relevancev1.ScoreRequest{Query: "q", Items: items(strings.Repeat("x", 40000))},
			field: "items[1].text", want: "40000 bytes, limit 32768"},
		{name: "bad text", req: &relevancev1.ScoreRequest{Query: "q", Items: items("a\xffb")}, field: "items[1].text", want: "invalid UTF-8"},
		{name: "bad id", req: &relevancev1.ScoreRequest{Query: "q", Items: []*relevancev1.Item{{Text: "a"}, {Id: "\xc0", Text: "b"}}},
			field: "items[1].id", want: "invalid UTF-8"},
		{name: "first bad item wins", req: &relevancev1.ScoreRequest{Query: "q", Items: items("a", "\xff", strings.Repeat("x", 40000))},
			field: "items[2].text", want: "invalid UTF-8"},
		{name: "bad model", req: &relevancev1.ScoreRequest{Query: "q", Items: items("a"), Model: "m\xff"}, field: "model", want: "invalid UTF-8"},
		{name: "unknown truncation", req: &relevancev1.ScoreRequest{Query: "q", Items: items("a"),
			Options: &relevancev1.ScoreOptions{Truncation: relevancev1.Truncation(7)}}, field: "options.truncation", want: "unknown value 7"},
		{name: "negative truncation", req: &relevancev1.ScoreRequest{Query: "q", Items: items("a"),
			Options: &relevancev1.ScoreOptions{Truncation: relevancev1.Truncation(-1)}}, field: "options.truncation", want: "unknown value -1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.req, limits)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != tc.field+": "+tc.want {
				t.Errorf("Validate = %v %q, want InvalidArgument %q", st.Code(), st.Message(), tc.field+": "+tc.want)
			}
			field, problem, ok := Violation(err)
			if d := cmp.Diff([]any{tc.field, tc.want, true}, []any{field, problem, ok}); d != "" {
				t.Errorf("Violation (-want +got):\n%s", d)
			}
		})
	}
}

func TestZeroLimitsMeanNoLimit(t *testing.T) {
	// Just over every default limit.
	long := strings.Repeat("x", 40000)
	req := &relevancev1.ScoreRequest{Query: long, Instruction: long, Items: make([]*relevancev1.Item, 1001)}
	for i := range req.Items {
		req.Items[i] = &relevancev1.Item{Text: long}
	}
	if err := Validate(req, Limits{}); err != nil {
		t.Errorf("Validate with zero Limits = %v, want nil", err)
	}
}

// TestEveryEnumFieldIsChecked: proto3 enums accept any number on the wire, so each enum field of
// ScoreRequest (at any depth) must be one Validate checks.
func TestEveryEnumFieldIsChecked(t *testing.T) {
	var found []string
	var walk func(md protoreflect.MessageDescriptor, prefix string, depth int)
	walk = func(md protoreflect.MessageDescriptor, prefix string, depth int) {
		for i := range md.Fields().Len() {
			fd := md.Fields().Get(i)
			switch fd.Kind() {
			case protoreflect.EnumKind:
				found = append(found, prefix+string(fd.Name()))
			case protoreflect.MessageKind:
				if depth < 5 {
					walk(fd.Message(), prefix+string(fd.Name())+".", depth+1)
				}
			}
		}
	}
	walk((&relevancev1.ScoreRequest{}).ProtoReflect().Descriptor(), "", 0)
	slices.Sort(found)
	if d := cmp.Diff(enumFields, found); d != "" {
		t.Errorf("enum fields of ScoreRequest (-checked +in the protocol):\n%s", d)
	}
}

func TestFieldErrorRoundTrip(t *testing.T) {
	err := FieldError("items[3].text", "%d bytes, limit %d", 40000, 32768)
	if got := err.Error(); got != "rpc error: code = InvalidArgument desc = items[3].text: 40000 bytes, limit 32768" {
		t.Errorf("Error() = %q", got)
	}
	field, problem, ok := Violation(fmt.Errorf("wrapped: %w", err))
	if field != "items[3].text" || problem != "40000 bytes, limit 32768" || !ok {
		t.Errorf("Violation(wrapped) = %q, %q, %v", field, problem, ok)
	}
	for _, other := range []error{
		nil,
		errors.New("items[3].text: invalid UTF-8"),
		status.Error(codes.InvalidArgument, "items[3].text: invalid UTF-8"), // no details: names no field
		status.Error(codes.Unavailable, "no node"),
	} {
		if f, p, ok := Violation(other); ok {
			t.Errorf("Violation(%v) = %q, %q, true; want false", other, f, p)
		}
	}
}
