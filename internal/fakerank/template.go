package fakerank

import "strings"

// qwen3RerankTemplate is the Qwen3-Reranker prompt with the default instruction written in, as
// two servers carry it: vLLM's examples/pooling/score/template/qwen3_reranker.jinja (rendered
// with no instruction given) and the "rerank" chat template that llama.cpp's
// convert_hf_to_gguf.py (Qwen3Model._find_rerank_config / set_gguf_parameters) writes into a
// Qwen3-Reranker GGUF, where llama-server substitutes {query} and {document}.
const qwen3RerankTemplate = "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. " +
	"Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n" +
	"<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n" +
	"<Query>: {query}\n<Document>: {document}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"

func qwen3Rerank(query, doc string) string {
	return strings.NewReplacer("{query}", query, "{document}", doc).Replace(qwen3RerankTemplate)
}

// sglangRerank renders SGLang's examples/chat_template/qwen3_reranker.jinja: its default
// instruction ends with a period, and the assistant turn opens with no empty think block.
func sglangRerank(instruct, query, doc string) string {
	if instruct == "" {
		instruct = "Given a web search query, retrieve relevant passages that answer the query."
	}
	return "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. " +
		"Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n" +
		"<Instruct>: " + instruct + "\n<Query>: " + query + "\n<Document>: " + doc + "<|im_end|>\n<|im_start|>assistant\n"
}
