// Package yamlconf decodes the binaries' YAML configuration files strictly, one rule for all of
// them. Safe for concurrent use (it holds no state).
package yamlconf

import (
	"bytes"
	"errors"
	"io"

	"gopkg.in/yaml.v3"
)

// ErrSecondDocument is Decode's error for a file with more than one YAML document.
var ErrSecondDocument = errors.New("more than one YAML document (---): only the first would be read")

// Decode decodes b over out's current values (so defaults set before stay where the file is
// silent). Unknown keys are errors: a misspelt key would otherwise keep its default without a
// word. So is a second document after "---", which nothing would read. Empty input leaves out
// as it was.
func Decode(b []byte, out any) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(out); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
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

// empty reports whether a document holds nothing (a trailing "---", or only comments).
func empty(n *yaml.Node) bool {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	return n.Kind == 0 || n.Kind == yaml.DocumentNode && len(n.Content) == 0 || n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}
