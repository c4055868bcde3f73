package tokenizer

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonScanner is a minimal pull parser for the parts of tokenizer.json that are large (the vocab
// object and the merges array, ~300k strings). encoding/json spends most of a load on reflection
// and on allocating a string per merge half; this scanner hands out byte slices that point into
// the input (or into a scratch buffer when the string has escapes), so merges cost no allocation.
// Small sections are still decoded with encoding/json from the raw bytes the scanner skips over.
type jsonScanner struct {
	data    []byte
	pos     int
	scratch []byte
}

func (s *jsonScanner) errorf(format string, args ...any) error {
	return fmt.Errorf("json offset %d: %s", s.pos, fmt.Sprintf(format, args...))
}

func (s *jsonScanner) skipSpace() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte without consuming it, or 0 at the end.
func (s *jsonScanner) peek() byte {
	s.skipSpace()
	if s.pos >= len(s.data) {
		return 0
	}
	return s.data[s.pos]
}

func (s *jsonScanner) expect(c byte) error {
	if s.peek() != c {
		if s.pos >= len(s.data) {
			return s.errorf("unexpected end of input, want %q", c)
		}
		return s.errorf("got %q, want %q", s.data[s.pos], c)
	}
	s.pos++
	return nil
}

// str reads a JSON string and returns its decoded bytes. The slice aliases the input or the
// scanner's scratch buffer: it is valid only until the next call.
func (s *jsonScanner) str() ([]byte, error) {
	if err := s.expect('"'); err != nil {
		return nil, err
	}
	start := s.pos
	// Find the closing quote with IndexByte (vectorised); a backslash before it means escapes.
	// Raw control characters are accepted: they are invalid JSON but harmless here.
	rest := s.data[start:]
	q := bytes.IndexByte(rest, '"')
	if q < 0 {
		s.pos = len(s.data)
		return nil, s.errorf("unterminated string")
	}
	if bytes.IndexByte(rest[:q], '\\') >= 0 {
		return s.strEscaped(start)
	}
	s.pos = start + q + 1
	return rest[:q], nil
}

func (s *jsonScanner) strEscaped(start int) ([]byte, error) {
	buf := s.scratch[:0]
	i := start
	for i < len(s.data) {
		c := s.data[i]
		switch {
		case c == '"':
			s.pos = i + 1
			s.scratch = buf
			return buf, nil
		case c != '\\':
			buf = append(buf, c)
			i++
			continue
		}
		if i+1 >= len(s.data) {
			break
		}
		e := s.data[i+1]
		i += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := s.hex4(i)
			if !ok {
				s.pos = i
				return nil, s.errorf("bad \\u escape")
			}
			i += 4
			if utf16.IsSurrogate(r) {
				// A high surrogate pairs with a following \uXXXX low surrogate; a lone one
				// becomes U+FFFD, as encoding/json does.
				if i+6 <= len(s.data) && s.data[i] == '\\' && s.data[i+1] == 'u' {
					if r2, ok := s.hex4(i + 2); ok {
						if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
							r = d
							i += 6
						} else {
							r = utf8.RuneError
						}
					} else {
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			buf = utf8.AppendRune(buf, r)
		default:
			s.pos = i - 1
			return nil, s.errorf("bad escape \\%c", e)
		}
	}
	s.pos = len(s.data)
	return nil, s.errorf("unterminated string")
}

func (s *jsonScanner) hex4(i int) (rune, bool) {
	if i+4 > len(s.data) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(s.data[i:i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	return rune(v), true
}

// int reads a JSON number that must be an integer fitting in int32 and ≥ 0.
func (s *jsonScanner) int() (int32, error) {
	s.skipSpace()
	start := s.pos
	var v int64
	for s.pos < len(s.data) && s.data[s.pos] >= '0' && s.data[s.pos] <= '9' {
		v = v*10 + int64(s.data[s.pos]-'0')
		if v > 1<<31-1 {
			return 0, s.errorf("integer out of range")
		}
		s.pos++
	}
	if s.pos == start {
		return 0, s.errorf("want a non-negative integer")
	}
	if s.pos < len(s.data) {
		switch s.data[s.pos] {
		case '.', 'e', 'E':
			return 0, s.errorf("want an integer")
		}
	}
	return int32(v), nil
}

// skipValue skips one JSON value of any kind and returns its raw bytes. It checks structure
// (brackets, strings) but not every detail of literals: a section that matters is re-decoded
// with encoding/json, which validates it.
func (s *jsonScanner) skipValue() ([]byte, error) {
	s.skipSpace()
	start := s.pos
	depth := 0
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch c {
		case '"':
			if _, err := s.str(); err != nil {
				return nil, err
			}
		case '{', '[':
			depth++
			s.pos++
		case '}', ']':
			depth--
			if depth < 0 {
				return nil, s.errorf("unexpected %q", c)
			}
			s.pos++
		case ',', ':':
			if depth == 0 {
				return nil, s.errorf("unexpected %q", c)
			}
			s.pos++
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			// literal: number, true, false, null
			for s.pos < len(s.data) {
				switch s.data[s.pos] {
				case ',', '}', ']', ' ', '\t', '\n', '\r', ':':
					goto done
				}
				s.pos++
			}
		done:
		}
		if depth == 0 {
			if start == s.pos {
				return nil, s.errorf("want a value")
			}
			return s.data[start:s.pos], nil
		}
	}
	return nil, s.errorf("unexpected end of input")
}

// object calls fn for each key of a JSON object; fn must consume the value.
func (s *jsonScanner) object(fn func(key string) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.pos++
		return nil
	}
	for {
		k, err := s.str()
		if err != nil {
			return err
		}
		key := string(k)
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := fn(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return s.errorf("want ',' or '}' in object")
		}
	}
}

// array calls fn for each element of a JSON array; fn must consume the element.
func (s *jsonScanner) array(fn func(i int) error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.pos++
		return nil
	}
	for i := 0; ; i++ {
		if err := fn(i); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			return s.errorf("want ',' or ']' in array")
		}
	}
}

// isNull consumes a null literal if one comes next.
func (s *jsonScanner) isNull() bool {
	s.skipSpace()
	if len(s.data)-s.pos >= 4 && string(s.data[s.pos:s.pos+4]) == "null" {
		s.pos += 4
		return true
	}
	return false
}

var errTrailing = errors.New("trailing data after the top-level object")
