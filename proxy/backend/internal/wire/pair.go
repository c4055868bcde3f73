package wire

import (
	"fmt"

	"google.golang.org/grpc/codes"

	"github.com/relevance-scoring/relevance/prompt"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/backend"
)

// Instruction says how a server-side template takes the request's instruction.
type Instruction int

const (
	// FixedInstruction: the server's template has the default instruction written in; a request
	// with another one cannot be served with template=server.
	FixedInstruction Instruction = iota
	// SentInstruction: the kind sends the instruction in a request field of its own.
	SentInstruction
)

// Pair is what a pair API (one query, many documents) is sent for a batch under tmpl.
//
// TemplateProxy: the query is prompt.HeadText + prompt.BodyPrefix(instruction, query) (the
// prefix every item shares) and each document " " + text + prompt.TailText. Every kind here
// that takes the proxy's prompt concatenates query and document with nothing between them
// (vLLM's "LLM as reranker" path, a byte-level-BPE pair encoding in TEI and Infinity), so the
// model reads exactly the prompt our scorer builds, and servers with prefix caching see one
// prefix per query. The split is the one prompt.BodyPrefix documents: the prefix ends at
// "<Document>:" and the document's text starts with the space that joins its first word.
//
// TemplateServer: query and documents go as they are. With FixedInstruction, an instruction
// other than the default is refused (InvalidArgument) rather than silently dropped.
func Pair(node, tmpl string, instr Instruction, req *relevancev1.ScoreBatchRequest) (string, []string, error) {
	items := req.GetItems()
	docs := make([]string, len(items))
	if tmpl == backend.TemplateProxy {
		for i, it := range items {
			docs[i] = " " + it.GetText() + prompt.TailText
		}
		return prompt.HeadText + prompt.BodyPrefix(req.GetInstruction(), req.GetQuery()), docs, nil
	}
	if in := req.GetInstruction(); instr == FixedInstruction && in != "" && in != prompt.DefaultInstruction {
		return "", nil, Errorf(node, codes.InvalidArgument,
			"instruction: the server's template has a fixed instruction (%q); configure template: %s for custom instructions",
			prompt.DefaultInstruction, backend.TemplateProxy)
	}
	for i, it := range items {
		docs[i] = it.GetText()
	}
	return req.GetQuery(), docs, nil
}

// InstructionOrDefault is the request's instruction, or the default one.
func InstructionOrDefault(req *relevancev1.ScoreBatchRequest) string {
	if in := req.GetInstruction(); in != "" {
		return in
	}
	return prompt.DefaultInstruction
}

// CheckItems refuses a batch over the node's configured document limit before it is sent.
func CheckItems(node string, n int, limits backend.Limits) error {
	if limits.MaxItems > 0 && n > limits.MaxItems {
		return backend.ItemLimitError(fmt.Sprintf("node %s: request over the server's limit: %d documents, the limit is %d per request", node, n, limits.MaxItems), n, limits.MaxItems)
	}
	return nil
}

// KindError is a kind package's constructor given another kind's Spec.
func KindError(want, got string) error {
	return fmt.Errorf("kind: must be %q for this constructor, got %q", want, got)
}
