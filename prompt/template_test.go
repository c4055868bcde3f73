package prompt

import (
	"bytes"
	"testing"
)

// TestIdentityCoversEveryPartOfTheTemplate: model fingerprints hash Identity, so every part of
// the prompt that shapes the tokens — head, tail, default instruction and the body's framing
// around instruction, query and document — must be in it: a build that changes any of them scores
// otherwise and must not share cached scores or a request with the old one.
func TestIdentityCoversEveryPartOfTheTemplate(t *testing.T) {
	id := Identity()
	for name, part := range map[string]string{
		"head": HeadText, "tail": TailText, "default instruction": DefaultInstruction,
		"body framing": BodyPrefix("\x00I", "\x00Q"), "query lead": QueryLead("\x00I"),
	} {
		if !bytes.Contains(id, []byte(part)) {
			t.Errorf("Identity does not cover the %s %q", name, part)
		}
	}
}
