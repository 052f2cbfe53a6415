package sdk

import (
	"testing"

	"github.com/hermes-host/hermes-host/abi"
)

type replyTransport string

func (t replyTransport) HostCall(string, []byte) []byte { return []byte(t) }

// TestCallDecodesReply checks how call reads the host's abi.Reply in one pass: the result lands
// in the caller's value, a failure is the host's error, and anything malformed is an internal
// error rather than a zero result taken for an answer.
func TestCallDecodesReply(t *testing.T) {
	defer UseTransport(nil)
	c := &Context{Profile: "main"}
	for _, tc := range []struct {
		name, reply string
		code        string // expected error code, "" for success
		value       string
		found       bool
	}{
		{"result", `{"ok":true,"result":{"value":"YWJj","found":true}}`, "", "abc", true},
		{"no result", `{"ok":true}`, "", "", false},
		{"null result", `{"ok":true,"result":null}`, "", "", false},
		{"host error", `{"error":{"code":"denied","message":"no"}}`, abi.CodeDenied, "", false},
		{"failure without error", `{"ok":false}`, abi.CodeInternal, "", false},
		{"malformed reply", `{"ok":tru`, abi.CodeInternal, "", false},
		{"malformed result", `{"ok":true,"result":{"found":"yes"}}`, abi.CodeInternal, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			UseTransport(replyTransport(tc.reply))
			v, found, err := c.KVGet("k")
			if tc.code != "" {
				if abi.CodeOf(err) != tc.code {
					t.Fatalf("err %v (code %q), want code %q", err, abi.CodeOf(err), tc.code)
				}
				return
			}
			if err != nil || string(v) != tc.value || found != tc.found {
				t.Fatalf("got %q %v %v, want %q %v", v, found, err, tc.value, tc.found)
			}
		})
	}
	// A call without a result value (KVSet) accepts a reply that carries one.
	UseTransport(replyTransport(`{"ok":true,"result":{"anything":[1,2]}}`))
	if err := c.KVSet("k", []byte("v")); err != nil {
		t.Fatal(err)
	}
}
