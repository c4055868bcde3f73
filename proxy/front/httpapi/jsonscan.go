package httpapi

import (
	"bytes"
	"encoding/json"
)

// The scans here read a body's top-level object on its raw bytes, without decoding it: telling a
// body's dialect by its keys and counting an array before the decoder builds it must not cost a
// decode of up to max_body_bytes. They never fail: malformed JSON scans as whatever the scan
// makes of it, and the decoder that runs next reports it.

// topLevelMembers calls visit for each member of body's top-level object, in order, with its
// key (unescaped) and the offset of its value's first byte (len(body) when the body ends before
// it), until visit returns false. A body whose top level is not an object has no members.
func topLevelMembers(body []byte, visit func(key []byte, value int) bool) {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return
	}
	for i++; ; {
		i = skipSpace(body, i)
		if i >= len(body) || body[i] != '"' {
			return // '}' or malformed
		}
		end := skipString(body, i)
		key := body[i+1 : max(i+1, end-1)]
		if bytes.IndexByte(key, '\\') >= 0 {
			var s string
			if json.Unmarshal(body[i:end], &s) != nil {
				return
			}
			key = []byte(s)
		}
		i = skipSpace(body, end)
		if i >= len(body) || body[i] != ':' {
			visit(key, len(body)) // a key cut short of its value is still the body's key
			return
		}
		i = skipSpace(body, i+1)
		if !visit(key, i) || i >= len(body) {
			return
		}
		i = skipSpace(body, skipValue(body, i))
		if i >= len(body) || body[i] != ',' {
			return
		}
		i++
	}
}

// hasKey reports whether body's top-level object has a member named key (spelled with escapes or
// not); the same word in a value or a nested object does not count.
func hasKey(body []byte, key string) bool {
	if !bytes.Contains(body, []byte(key)) && bytes.IndexByte(body, '\\') < 0 {
		return false // the usual case, and a cheap one; a body with escapes still gets the scan
	}
	found := false
	topLevelMembers(body, func(k []byte, _ int) bool {
		found = string(k) == key
		return !found
	})
	return found
}

// topLevelArrayLen counts the elements of the array that body's top-level object holds under
// key, up to stop: 0 when there is none or the member is not an array.
func topLevelArrayLen(body []byte, key string, stop int) int {
	n := 0
	topLevelMembers(body, func(k []byte, v int) bool {
		if string(k) != key {
			return true
		}
		n = arrayLen(body, v, stop)
		return false
	})
	return n
}

// arrayLen counts the elements of the array that starts at body[at], up to stop.
func arrayLen(body []byte, at, stop int) int {
	if at >= len(body) || body[at] != '[' {
		return 0
	}
	i := skipSpace(body, at+1)
	if i >= len(body) || body[i] == ']' {
		return 0
	}
	n := 0
	for {
		if n++; n >= stop {
			return n
		}
		i = skipSpace(body, skipValue(body, i))
		if i >= len(body) || body[i] != ',' {
			return n
		}
		if i = skipSpace(body, i+1); i >= len(body) {
			return n // cut short after a comma: the decoder reports it
		}
	}
}

// skipSpace returns the offset of the first byte at or after i that is not JSON whitespace.
func skipSpace(body []byte, i int) int {
	for i < len(body) {
		switch body[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the offset just past the string whose opening quote is body[i] (len(body)
// when it is not closed).
func skipString(body []byte, i int) int {
	for j := i + 1; j < len(body); j++ {
		switch body[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(body)
}

// skipValue returns the offset just past the value that starts at body[i], which is not
// whitespace; a value that is neither a string nor an object nor an array (a number, a literal,
// or malformed bytes) runs to the next delimiter. It always moves past body[i].
func skipValue(body []byte, i int) int {
	switch body[i] {
	case '"':
		return skipString(body, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(body); j++ {
			switch body[j] {
			case '"':
				j = skipString(body, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(body)
	}
	j := i + 1
	for j < len(body) {
		switch body[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j
		}
		j++
	}
	return j
}
