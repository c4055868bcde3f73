module gemmgen

go 1.26.0

require github.com/relevance-scoring/relevance v0.0.0

require golang.org/x/sys v0.49.0

replace github.com/relevance-scoring/relevance => ../..
