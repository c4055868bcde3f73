// Package request is the contract of a relevance.v1.ScoreRequest: what the proxy accepts, checked
// once, by Validate, whichever front (gRPC, HTTP /v1/score, the rerank routes) the request came in
// through. The fronts only decode; they do not repeat these rules.
//
// The contract:
//   - query: not empty nor only white space, at most Limits.MaxQueryBytes bytes, valid UTF-8;
//   - instruction: at most Limits.MaxQueryBytes bytes, valid UTF-8;
//   - items: 1 to Limits.MaxItems entries, none missing (nil); each item's text at most
//     Limits.MaxItemBytes bytes and valid UTF-8, its id valid UTF-8;
//   - request_id and model: valid UTF-8;
//   - options.truncation: one of the Truncation values the protocol defines.
//
// The first broken rule, in that order, is the error: a gRPC status INVALID_ARGUMENT whose message
// is "<field>: <problem>" and whose details hold one errdetails.BadRequest with one FieldViolation
// naming the same field and problem. Fields are canonical paths in the protocol's vocabulary
// (snake_case proto names, list indices in brackets): "query", "items", "items[3]",
// "items[3].text", "options.truncation"; "request" names the message as a whole. A front that
// speaks another vocabulary renames the path (never the problem) with Violation.
//
// Everything here is a pure function, safe for concurrent use.
package request

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// Limits bound the size of a request. Zero in a field means no limit on it.
type Limits struct {
	// MaxItems is the most items one request may carry.
	MaxItems int
	// MaxItemBytes is the longest item text, in bytes.
	MaxItemBytes int
	// MaxQueryBytes is the longest query, and the longest instruction, in bytes.
	MaxQueryBytes int
}

// Validate checks req against the contract (see the package doc) and lim. It returns nil or the
// first violation as a FieldError.
func Validate(req *relevancev1.ScoreRequest, lim Limits) error {
	switch q, in := req.GetQuery(), req.GetInstruction(); {
	case req == nil:
		return FieldError("request", "missing")
	case q == "":
		return FieldError("query", "empty")
	case over(len(q), lim.MaxQueryBytes):
		return FieldError("query", "%d bytes, limit %d", len(q), lim.MaxQueryBytes)
	case !utf8.ValidString(q):
		return FieldError("query", "invalid UTF-8")
	case strings.TrimSpace(q) == "":
		// The prompt has no query to put in (the nodes refuse it): said here, as "query", not
		// as a node's tokenizer error.
		return FieldError("query", "only white space")
	case over(len(in), lim.MaxQueryBytes):
		return FieldError("instruction", "%d bytes, limit %d", len(in), lim.MaxQueryBytes)
	case !utf8.ValidString(in):
		return FieldError("instruction", "invalid UTF-8")
	case len(req.GetItems()) == 0:
		return FieldError("items", "empty")
	case over(len(req.GetItems()), lim.MaxItems):
		return FieldError("items", "%d items, limit %d", len(req.GetItems()), lim.MaxItems)
	case !utf8.ValidString(req.GetRequestId()):
		return FieldError("request_id", "invalid UTF-8")
	}
	for i, it := range req.GetItems() {
		switch {
		case it == nil:
			return FieldError(fmt.Sprintf("items[%d]", i), "missing")
		case over(len(it.GetText()), lim.MaxItemBytes):
			return FieldError(fmt.Sprintf("items[%d].text", i), "%d bytes, limit %d", len(it.GetText()), lim.MaxItemBytes)
		case !utf8.ValidString(it.GetText()):
			return FieldError(fmt.Sprintf("items[%d].text", i), "invalid UTF-8")
		case !utf8.ValidString(it.GetId()):
			return FieldError(fmt.Sprintf("items[%d].id", i), "invalid UTF-8")
		}
	}
	switch t := req.GetOptions().GetTruncation(); {
	case !utf8.ValidString(req.GetModel()):
		return FieldError("model", "invalid UTF-8")
	case t.Type().Descriptor().Values().ByNumber(t.Number()) == nil:
		// proto3 enums are open: the wire (and protojson, given a number) carries any int32.
		return FieldError("options.truncation", "unknown value %d", int32(t))
	}
	return nil
}

// enumFields lists the canonical paths of the request's enum fields that Validate checks; a test
// fails when the protocol gains an enum field that is not listed (and checked) here.
var enumFields = []string{"options.truncation"}

func over(n, limit int) bool { return limit > 0 && n > limit }

// FieldError returns the INVALID_ARGUMENT status error for a bad field: message
// "<field>: <problem>", with one errdetails.BadRequest FieldViolation{Field: field,
// Description: problem}. field is a canonical path ("items[3].text"); problem is formatted from
// format and args.
func FieldError(field, format string, args ...any) error {
	problem := fmt.Sprintf(format, args...)
	st := status.New(codes.InvalidArgument, field+": "+problem)
	if d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
		{Field: field, Description: problem},
	}}); err == nil { // WithDetails fails only for a non-OK code or an unmarshalable detail
		st = d
	}
	return st.Err()
}

// Violation reads back the field and problem of an error that carries an errdetails.BadRequest
// with one field violation (FieldError's, or a scorer node's). ok is false for any other error,
// which then names no field.
func Violation(err error) (field, problem string, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus || st.Code() != codes.InvalidArgument {
		return "", "", false
	}
	for _, d := range st.Details() {
		if br, isBR := d.(*errdetails.BadRequest); isBR && len(br.GetFieldViolations()) == 1 {
			v := br.GetFieldViolations()[0]
			return v.GetField(), v.GetDescription(), true
		}
	}
	return "", "", false
}
