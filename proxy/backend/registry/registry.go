// Package registry builds a backend.Backend from a backend.Spec: one explicit list of the kinds
// and their constructors (no init() registration), and the validation of a node list with errors
// that name the node ("nodes[2].kind: must be one of …").
package registry

import (
	"errors"
	"fmt"

	"github.com/relevance-scoring/relevance/proxy/backend"
	"github.com/relevance-scoring/relevance/proxy/backend/infinity"
	"github.com/relevance-scoring/relevance/proxy/backend/llamacpp"
	"github.com/relevance-scoring/relevance/proxy/backend/scorer"
	"github.com/relevance-scoring/relevance/proxy/backend/sglang"
	"github.com/relevance-scoring/relevance/proxy/backend/tei"
	"github.com/relevance-scoring/relevance/proxy/backend/vllm"
)

// constructors is the list of kinds. Each wraps a package's New so that a failed construction
// is a nil interface, not a typed nil.
var constructors = map[string]func(backend.Spec) (backend.Backend, error){
	backend.KindInfinity: func(s backend.Spec) (backend.Backend, error) { return wrap(infinity.New(s)) },
	backend.KindLlamaCpp: func(s backend.Spec) (backend.Backend, error) { return wrap(llamacpp.New(s)) },
	backend.KindScorer:   func(s backend.Spec) (backend.Backend, error) { return wrap(scorer.New(s)) },
	backend.KindSGLang:   func(s backend.Spec) (backend.Backend, error) { return wrap(sglang.New(s)) },
	backend.KindTEI:      func(s backend.Spec) (backend.Backend, error) { return wrap(tei.New(s)) },
	backend.KindVLLM:     func(s backend.Spec) (backend.Backend, error) { return wrap(vllm.New(s)) },
}

func wrap[B backend.Backend](b B, err error) (backend.Backend, error) {
	if err != nil {
		return nil, err
	}
	return b, nil
}

// New builds the backend spec describes. Errors name the field ("kind: …", "template: …").
func New(spec backend.Spec) (backend.Backend, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	return constructors[spec.Kind](spec)
}

// NewAll builds one backend per spec, in order. On the first error it closes those already
// built and returns the error prefixed with the node's position: "nodes[2].kind: …".
func NewAll(specs []backend.Spec) ([]backend.Backend, error) {
	out := make([]backend.Backend, 0, len(specs))
	for i, s := range specs {
		b, err := New(s)
		if err != nil {
			errs := []error{fmt.Errorf("nodes[%d].%w", i, err)}
			for _, built := range out {
				errs = append(errs, built.Close())
			}
			return nil, errors.Join(errs...)
		}
		out = append(out, b)
	}
	return out, nil
}

// Validate checks a node list without connecting to anything, with the same errors as NewAll.
func Validate(specs []backend.Spec) error {
	for i, s := range specs {
		b, err := New(s)
		if err != nil {
			return fmt.Errorf("nodes[%d].%w", i, err)
		}
		_ = b.Close() // constructors only prepare clients; closing releases nothing in use
	}
	return nil
}
