// Package yamlconf decodes the binaries' YAML configuration files strictly, one rule for all of
// them. Safe for concurrent use (it holds no state).
package yamlconf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// ErrSecondDocument is Decode's error for a file with more than one YAML document.
var ErrSecondDocument = errors.New("more than one YAML document (---): only the first would be read")

// Decode decodes b over out's current values (so defaults set before stay where the file is
// silent). Unknown keys are errors: a misspelt key would otherwise keep its default without a
// word. So is a second document after "---", which nothing would read. Empty input leaves out
// as it was. A fraction where a whole number is wanted is an error too: yaml.v3 would cut
// max_batch_items: 32.9 to 32, and 0.9 to 0, which validation then reports as "got 0".
func Decode(b []byte, out any) error {
	// The first document as a tree, for the whole-number check (a config file is small: parsing
	// it twice costs nothing); then decoded strictly (Node.Decode cannot refuse unknown keys).
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(b)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	if err := wholeNumbers(&doc, reflect.TypeOf(out), ""); err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(out); err != nil {
		return err
	}
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return err
		case !empty(&n):
			return ErrSecondDocument
		}
	}
}

// wholeNumbers reports a float scalar in n where t, the type it decodes into, wants an integer
// (durations aside: yaml.v3 reads those from strings), naming its key path.
func wholeNumbers(n *yaml.Node, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch n.Kind {
	case yaml.DocumentNode, yaml.AliasNode:
		for _, c := range n.Content {
			if err := wholeNumbers(c, t, path); err != nil {
				return err
			}
		}
		if n.Kind == yaml.AliasNode && n.Alias != nil {
			return wholeNumbers(n.Alias, t, path)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.ShortTag() == "!!merge" { // "<<: *anchor" or "<<: [*a, *b]": their keys are this one's
				merged := []*yaml.Node{v}
				if v.Kind == yaml.SequenceNode {
					merged = v.Content
				}
				for _, m := range merged {
					if err := wholeNumbers(m, t, path); err != nil {
						return err
					}
				}
				continue
			}
			var ft reflect.Type
			switch t.Kind() {
			case reflect.Struct:
				ft = fieldType(t, k.Value)
			case reflect.Map:
				ft = t.Elem()
			}
			if ft == nil {
				continue // unknown keys are the decoder's to report
			}
			if err := wholeNumbers(v, ft, join(path, k.Value)); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for i, c := range n.Content {
				if err := wholeNumbers(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
	case yaml.ScalarNode:
		if n.ShortTag() != "!!float" || t == reflect.TypeFor[time.Duration]() {
			break
		}
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			if !whole(n.Value) {
				return fmt.Errorf("line %d: %s: want a whole number, got %s", n.Line, path, n.Value)
			}
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			// yaml.v3 converts a negative float into an unsigned field by wrapping it (-1.0
			// became 18446744073709551615).
			if !whole(n.Value) || strings.HasPrefix(strings.TrimSpace(n.Value), "-") {
				return fmt.Errorf("line %d: %s: want a whole number ≥ 0, got %s", n.Line, path, n.Value)
			}
		}
	}
	return nil
}

// whole reports whether a YAML float is a whole number (1e9, 32.0): yaml.v3 decodes those into
// integers exactly.
func whole(s string) bool {
	v, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	return err == nil && !math.IsInf(v, 0) && v == math.Trunc(v)
}

// fieldType is the type of t's field that YAML key name decodes into (yaml.v3's rule: the tag's
// name, else the field's name lowercased), or nil.
func fieldType(t reflect.Type, name string) reflect.Type {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "-" {
			continue
		}
		if tag == "" {
			tag = strings.ToLower(f.Name)
		}
		if tag == name {
			return f.Type
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// empty reports whether a document holds nothing (a trailing "---", or only comments).
func empty(n *yaml.Node) bool {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	return n.Kind == 0 || n.Kind == yaml.DocumentNode && len(n.Content) == 0 || n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}
