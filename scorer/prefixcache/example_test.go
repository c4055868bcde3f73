package prefixcache_test

import (
	"errors"
	"fmt"

	"github.com/relevance-scoring/relevance/scorer/prefixcache"
)

// A forward pass: look each group's prefix up, compute the misses, publish on success only.
func Example() {
	c, _ := prefixcache.New(prefixcache.Options{BudgetBytes: 1 << 20})
	pass := func(prefixes [][]int32, fail bool) error {
		ep := c.Begin()
		for _, p := range prefixes {
			l, err := ep.Acquire(prefixcache.KeyOf("qwen3-small", p))
			if err != nil {
				return err
			}
			switch {
			case l.Hit:
				fmt.Println("hit: reuse", l.Value)
			case l.Local:
				fmt.Println("computed earlier in this pass:", l.Value)
			default:
				kv := fmt.Sprintf("kv%v", p) // compute the prefix KV here
				l.Res.Fill(kv, int64(len(p))*1024)
				fmt.Println("miss: computed", kv)
			}
		}
		if fail {
			ep.Abort() // nothing this pass computed becomes visible
			return errors.New("pass failed")
		}
		ep.Commit()
		return nil
	}
	_ = pass([][]int32{{1, 2}}, true)
	_ = pass([][]int32{{1, 2}, {1, 2}}, false)
	_ = pass([][]int32{{1, 2}}, false)
	// Output:
	// miss: computed kv[1 2]
	// miss: computed kv[1 2]
	// computed earlier in this pass: kv[1 2]
	// hit: reuse kv[1 2]
}
