// Package prompt is the Qwen3-Reranker prompt contract shared by the proxy and the scorer nodes:
// the template text around each (query, document) pair and the one way of counting its tokens
// for planning (Counter). The node builds the token ids themselves (scorer/prompt); the proxy
// only counts them, and both read the template from here, so a template change reaches planning
// and scoring together.
//
// A prompt is
//
//	<|im_start|>system\n{System}<|im_end|>\n<|im_start|>user\n            HeadText (exact ids)
//	<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}    body, one plain-text string
//	<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n            TailText (exact ids)
//
// Everything before the document (HeadText + BodyPrefix) is the shared prefix of a query's items.
//
// Everything here is immutable and safe for concurrent use.
package prompt

// System is the reranker's system prompt.
const System = `Judge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be "yes" or "no".`

// DefaultMaxTokens is a scorer node's prompt limit when its configuration sets none: longer
// prompts are cut (or refused). The proxy assumes it of a node that has not reported its own.
const DefaultMaxTokens = 8192

// DefaultInstruction is used when a request gives none.
const DefaultInstruction = "Given a web search query, retrieve relevant passages that answer the query"

// The template around the body; their special tokens are matched as added tokens.
const (
	HeadText = "<|im_start|>system\n" + System + "<|im_end|>\n<|im_start|>user\n"
	TailText = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
)

// QueryLead is the prompt body up to the query, "<Query>:" included, without the space that
// joins the query's first word (byte-level BPE puts that space in the word's token): with
// HeadText it is the template every query of the instruction shares, which a node computes once
// and keeps (the shared template KV). "" means DefaultInstruction.
func QueryLead(instruction string) string {
	if instruction == "" {
		instruction = DefaultInstruction
	}
	return "<Instruct>: " + instruction + "\n<Query>:"
}

// BodyPrefix is the prompt body up to the document, "<Document>:" included: with HeadText it is
// the shared prefix of every item of a query. A document's own body text is " "+document (the
// space joins its first word under byte-level BPE). "" means DefaultInstruction.
func BodyPrefix(instruction, query string) string {
	if instruction == "" {
		instruction = DefaultInstruction
	}
	return "<Instruct>: " + instruction + "\n<Query>: " + query + "\n<Document>:"
}

// Identity is the template as the scores depend on it: head, tail, default instruction and the
// body's framing around an instruction and a query (placeholders that no text contains), for
// model fingerprints: a build that frames the prompt otherwise scores otherwise.
func Identity() []byte {
	return []byte(HeadText + "\x00" + TailText + "\x00" + DefaultInstruction + "\x00" + BodyPrefix("\x00I", "\x00Q"))
}
