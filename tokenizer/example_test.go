package tokenizer_test

import (
	"fmt"
	"log"

	"github.com/relevance-scoring/relevance/tokenizer"
)

func Example() {
	tok, err := tokenizer.Default()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(tok.Encode("<|im_start|>user\nHello world"))
	fmt.Println(tok.EncodePlain("<|im_start|>"))
	yes, _ := tok.TokenID("yes")
	fmt.Println(yes, tok.Decode([]int32{9707, 1879}))
	// Output:
	// [151644 872 198 9707 1879]
	// [27 91 318 4906 91 29]
	// 9693 Hello world
}
