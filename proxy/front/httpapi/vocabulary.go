package httpapi

import "strings"

// vocabulary renames the core's canonical field paths (proxy/request: "items[3].text") to a
// route's own. Keys and values are paths with their list indices left out ("items[].text"); the
// indices are put back in order. A path not listed keeps its canonical name.
type vocabulary map[string]string

// name returns the route's name for the canonical path field.
func (v vocabulary) name(field string) string {
	var shape strings.Builder
	var indices []string
	for rest := field; ; {
		open := strings.IndexByte(rest, '[')
		if open < 0 {
			shape.WriteString(rest)
			break
		}
		n := strings.IndexByte(rest[open:], ']')
		if n < 0 {
			return field // not a path this package writes
		}
		shape.WriteString(rest[:open] + "[]")
		indices = append(indices, rest[open+1:open+n])
		rest = rest[open+n+1:]
	}
	to, ok := v[shape.String()]
	if !ok {
		return field
	}
	var out strings.Builder
	for _, idx := range indices {
		before, after, found := strings.Cut(to, "[]")
		if !found {
			break // the route's name has fewer lists than the canonical path
		}
		out.WriteString(before + "[" + idx + "]")
		to = after
	}
	out.WriteString(to)
	return out.String()
}
