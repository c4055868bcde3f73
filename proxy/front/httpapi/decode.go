package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// badInput is a body the front could not decode into a ScoreRequest. status is 400 when the body
// is not the JSON the route expects, 422 when it is but a value cannot be what the field means.
// field is the path in the route's vocabulary ("documents[2]", "options.truncation"); "" when the
// problem is the body's as a whole.
type badInput struct {
	status         int
	field, problem string
}

func (e *badInput) Error() string {
	if e.field == "" {
		return e.problem
	}
	return e.field + ": " + e.problem
}

func malformed(field, format string, args ...any) error {
	return &badInput{status: http.StatusBadRequest, field: field, problem: fmt.Sprintf(format, args...)}
}

func unacceptable(field, format string, args ...any) error {
	return &badInput{status: http.StatusUnprocessableEntity, field: field, problem: fmt.Sprintf(format, args...)}
}

// checkUTF8 fails a body that is not valid UTF-8, naming the field that holds the first invalid
// byte. encoding/json and protojson would otherwise decode it (the first replacing the bytes with
// U+FFFD, so that the core would score text the client never sent).
func checkUTF8(body []byte) error {
	if utf8.Valid(body) {
		return nil
	}
	off := 0
	for off < len(body) {
		r, n := utf8.DecodeRune(body[off:])
		if r == utf8.RuneError && n == 1 {
			break
		}
		off += n
	}
	if field := pathAt(body, int64(off)); field != "" {
		return malformed(field, "invalid UTF-8")
	}
	return malformed("", "invalid UTF-8 in the request body at byte %d", off)
}

// pathSeg is one step of a JSON path: an object member, or an array element when index >= 0.
type pathSeg struct {
	key   string
	index int
}

type jsonPath []pathSeg

// String writes p as "items[3].text".
func (p jsonPath) String() string {
	var b strings.Builder
	for _, s := range p {
		if s.index >= 0 {
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s.key)
	}
	return b.String()
}

// pathAt returns the path of the JSON value (or member name) in body that holds byte off; where
// body stops being JSON first, the path of the value being read there. "" is the body itself.
func pathAt(body []byte, off int64) string {
	type frame struct {
		object bool
		key    string
		hasKey bool // the member name is read, its value not yet
		index  int
	}
	var stack []frame
	path := func() string {
		var p jsonPath
		for _, f := range stack {
			switch {
			case !f.object:
				p = append(p, pathSeg{index: f.index})
			case f.hasKey:
				p = append(p, pathSeg{key: f.key, index: -1})
			}
		}
		return p.String()
	}
	// done moves the innermost container past the value just read.
	done := func() {
		if n := len(stack); n > 0 {
			stack[n-1].hasKey = false
			stack[n-1].index++
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.Token()
		if err != nil {
			return path()
		}
		end := dec.InputOffset()
		if n := len(stack); n > 0 && stack[n-1].object && !stack[n-1].hasKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:n-1]
				if end > off {
					return path()
				}
				done()
				continue
			}
			key, _ := tok.(string)
			stack[n-1].key, stack[n-1].hasKey = key, true
			if end > off {
				return path()
			}
			continue
		}
		if d, ok := tok.(json.Delim); ok && d == ']' {
			stack = stack[:len(stack)-1]
		}
		if end > off {
			return path()
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{object: true})
		case json.Delim('['):
			stack = append(stack, frame{})
		default:
			done()
		}
	}
}

// jsonError names the problem in an encoding/json error: the byte offset of a syntax error, or
// the field and types of a type mismatch.
func jsonError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return malformed("", "invalid JSON body at byte %d: %v", se.Offset, se)
	case errors.As(err, &te) && te.Field != "" && strings.HasPrefix(te.Value, "number") && jsonTypeName(te.Type.Kind().String()) == "a number":
		// A number where one is due, but one its type cannot hold (9999…, -1 for an unsigned).
		return malformed(te.Field, "out of range: %s", strings.TrimPrefix(te.Value, "number "))
	case errors.As(err, &te) && te.Field != "":
		return malformed(te.Field, "must be %s, got %s", jsonTypeName(te.Type.Kind().String()), te.Value)
	case errors.As(err, &te):
		return malformed("request body", "must be a JSON object, got %s", te.Value)
	}
	return malformed("", "invalid JSON body: %v", err)
}

func jsonTypeName(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice":
		return "an array"
	case "struct", "map":
		return "an object"
	}
	return "a number"
}

var (
	// scoreStrict decodes the common body, one with only fields the protocol knows, in one pass.
	scoreStrict = protojson.UnmarshalOptions{}
	// scoreLenient decodes a body with unknown fields, once checkProtoJSON has passed it.
	scoreLenient = protojson.UnmarshalOptions{DiscardUnknown: true}
	// EmitUnpopulated: an item's index 0 or score 0 must appear rather than vanish.
	scoreMarshal = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}
)

// decodeScore decodes a /v1/score body (the proto3 JSON mapping of ScoreRequest; unknown fields
// are ignored, unknown enum names are not). Its errors name the field by its path.
func decodeScore(body []byte, maxItems int) (*relevancev1.ScoreRequest, error) {
	if err := checkUTF8(body); err != nil {
		return nil, err
	}
	// protojson builds every item before the core's limit applies: 8 MiB of {} items took
	// ~420 MiB. The items are counted first, on the bytes, no further than the limit.
	if maxItems > 0 && topLevelArrayLen(body, "items", maxItems+1) > maxItems {
		return nil, unacceptable("items", "more than %d items, limit %d", maxItems, maxItems)
	}
	// Unknown fields are ignored (proto3 JSON's forward compatibility), but the rerank routes'
	// cache switch turned off is refused: a caller who carried it over would get cached scores,
	// silently. (Carried over as true it asks for what happens anyway.)
	if hasKey(body, "cache") {
		var c struct {
			Cache *bool `json:"cache"`
		}
		if json.Unmarshal(body, &c) == nil && c.Cache != nil && !*c.Cache {
			return nil, unacceptable("cache", `is not a /v1/score field: send "options": {"no_cache": true} to bypass the score cache`)
		}
	}
	req := &relevancev1.ScoreRequest{}
	if scoreStrict.Unmarshal(body, req) == nil {
		return req, nil
	}
	// Unknown fields, or a real problem: protojson names only a field's own name (not its path),
	// and with DiscardUnknown it drops an unknown enum name silently.
	if err := checkProtoJSON(body, req.ProtoReflect().Descriptor()); err != nil {
		return nil, err
	}
	if err := misplacedOption(body); err != nil {
		return nil, err
	}
	req.Reset()
	if err := scoreLenient.Unmarshal(body, req); err != nil {
		return nil, malformed("", "invalid JSON body: %v", err) // what checkProtoJSON does not foresee
	}
	return req, nil
}

// misplacedOption refuses a top-level key that is a field of options (ScoreOptions), not of the
// request: ignored as an unknown field, {"truncation": "TRUNCATION_NONE"} scored with the default
// truncation, silently, what the caller had asked to be refused.
func misplacedOption(body []byte) error {
	req := (&relevancev1.ScoreRequest{}).ProtoReflect().Descriptor().Fields()
	opts := (&relevancev1.ScoreOptions{}).ProtoReflect().Descriptor().Fields()
	for i := range opts.Len() {
		fd := opts.Get(i)
		for _, name := range []string{string(fd.Name()), fd.JSONName()} {
			if req.ByName(protoreflect.Name(name)) == nil && req.ByJSONName(name) == nil && hasKey(body, name) {
				return unacceptable(name, "is a field of options, not of the request: send \"options\": {\"%s\": …}", fd.Name())
			}
		}
	}
	return nil
}

// checkProtoJSON walks body against md's proto3 JSON mapping and reports, by path, the first value
// protojson would refuse: malformed JSON, a value of the wrong JSON type, a null list element, an
// integer out of range, a field given twice; and an enum name the enum lacks. Unknown fields are
// skipped. It is the error path only: what it accepts, protojson decides.
func checkProtoJSON(body []byte, md protoreflect.MessageDescriptor) error {
	w := &protoWalker{dec: json.NewDecoder(bytes.NewReader(body))}
	w.dec.UseNumber()
	tok, err := w.token()
	if err != nil {
		return err
	}
	if tok != json.Delim('{') {
		return malformed("request body", "must be a JSON object, got %s", kindOf(tok))
	}
	if err := w.message(md); err != nil {
		return err
	}
	if _, err := w.dec.Token(); err != io.EOF {
		return malformed("", "invalid JSON body: data after the top-level object")
	}
	return nil
}

type protoWalker struct {
	dec  *json.Decoder
	path jsonPath
}

func (w *protoWalker) token() (json.Token, error) {
	tok, err := w.dec.Token()
	if err == nil {
		return tok, nil
	}
	// A json.Decoder's SyntaxError.Offset counts from where the current token began, not from the
	// start of the body: the path says where instead.
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = errors.New("unexpected end of JSON input")
	}
	if len(w.path) == 0 {
		return nil, malformed("", "invalid JSON body: %v", err)
	}
	return nil, malformed(w.path.String(), "invalid JSON: %v", err)
}

// message reads an object's members up to its '}' (the '{' is read).
func (w *protoWalker) message(md protoreflect.MessageDescriptor) error {
	seen := map[protoreflect.FieldNumber]bool{}
	for {
		tok, err := w.token()
		if err != nil {
			return err
		}
		if tok == json.Delim('}') {
			return nil
		}
		key, _ := tok.(string)
		w.path = append(w.path, pathSeg{key: key, index: -1})
		fd := md.Fields().ByJSONName(key)
		if fd == nil {
			fd = md.Fields().ByName(protoreflect.Name(key))
		}
		switch {
		case fd == nil:
			err = w.skip()
		case seen[fd.Number()]:
			err = malformed(w.path.String(), "given twice")
		default:
			seen[fd.Number()] = true
			err = w.field(fd)
		}
		if err != nil {
			return err
		}
		w.path = w.path[:len(w.path)-1]
	}
}

// field reads one member's value.
func (w *protoWalker) field(fd protoreflect.FieldDescriptor) error {
	if !fd.IsList() {
		return w.value(fd, false)
	}
	tok, err := w.token()
	switch {
	case err != nil:
		return err
	case tok == nil:
		return nil
	case tok != json.Delim('['):
		return malformed(w.path.String(), "must be an array, got %s", kindOf(tok))
	}
	for i := 0; w.dec.More(); i++ {
		w.path = append(w.path, pathSeg{index: i})
		if err := w.value(fd, true); err != nil {
			return err
		}
		w.path = w.path[:len(w.path)-1]
	}
	_, err = w.token() // ']'
	return err
}

// value reads a singular value, or one list element when elem is set.
func (w *protoWalker) value(fd protoreflect.FieldDescriptor, elem bool) error {
	if fd.IsMap() || (fd.Message() != nil && fd.Message().FullName().Parent() == "google.protobuf") {
		return w.skip() // maps and well-known types have JSON forms of their own: protojson decides
	}
	tok, err := w.token()
	if err != nil {
		return err
	}
	if tok == nil {
		if elem {
			return malformed(w.path.String(), "must not be null")
		}
		return nil
	}
	at := w.path.String()
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if tok != json.Delim('{') {
			return malformed(at, "must be an object, got %s", kindOf(tok))
		}
		return w.message(fd.Message())
	case protoreflect.StringKind, protoreflect.BytesKind:
		if _, ok := tok.(string); !ok {
			return malformed(at, "must be a string, got %s", kindOf(tok))
		}
	case protoreflect.BoolKind:
		if _, ok := tok.(bool); !ok {
			return malformed(at, "must be a boolean, got %s", kindOf(tok))
		}
	case protoreflect.EnumKind:
		switch v := tok.(type) {
		case json.Number: // a number: proto3 enums are open, the core checks it
		case string:
			if fd.Enum().Values().ByName(protoreflect.Name(v)) == nil {
				return unacceptable(at, "unknown value %q", v)
			}
		default:
			return malformed(at, "must be a string, got %s", kindOf(tok))
		}
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		switch tok.(type) {
		case json.Number, string: // "NaN", "Infinity" and quoted numbers are allowed
		default:
			return malformed(at, "must be a number, got %s", kindOf(tok))
		}
	default: // integers, as a number or a quoted number
		var s string
		switch v := tok.(type) {
		case json.Number:
			s = string(v)
		case string:
			s = v
		default:
			return malformed(at, "must be a number, got %s", kindOf(tok))
		}
		if lo, hi := intRange(fd.Kind()); !isIntIn(s, lo, hi) {
			return malformed(at, "must be an integer in [%.0f, %.0f], got %s", lo, hi, s)
		}
	}
	return nil
}

// intRange is the range of an integer kind, as float64 (exact for the 32-bit kinds, within an
// ulp for the 64-bit ones: close enough for an error message).
func intRange(k protoreflect.Kind) (lo, hi float64) {
	switch k {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return math.MinInt32, math.MaxInt32
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return 0, math.MaxUint32
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return 0, math.MaxUint64
	}
	return math.MinInt64, math.MaxInt64
}

// isIntIn reports whether s is a number with an integral value within [lo, hi].
func isIntIn(s string, lo, hi float64) bool {
	f, err := strconv.ParseFloat(s, 64)
	return err == nil && f == math.Trunc(f) && f >= lo && f <= hi
}

// skip reads one whole value.
func (w *protoWalker) skip() error {
	tok, err := w.token()
	if err != nil {
		return err
	}
	return w.skipOpened(tok)
}

// skipOpened reads the rest of a value whose first token is tok.
func (w *protoWalker) skipOpened(tok json.Token) error {
	if tok != json.Delim('{') && tok != json.Delim('[') {
		return nil
	}
	for depth := 1; depth > 0; {
		tok, err := w.token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return nil
}

// kindOf names a token's JSON type as encoding/json's type errors do.
func kindOf(tok json.Token) string {
	switch tok.(type) {
	case nil:
		return "null"
	case bool:
		return "bool"
	case json.Number, float64:
		return "number"
	case string:
		return "string"
	}
	if tok == json.Delim('[') {
		return "array"
	}
	return "object"
}
