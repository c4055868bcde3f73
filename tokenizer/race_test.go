//go:build race

package tokenizer

// raceEnabled shrinks the heaviest inputs under the race detector, which slows the merge loop
// about tenfold; the full sizes run in the plain and purego test runs.
const raceEnabled = true
