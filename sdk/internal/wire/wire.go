// Package wire encodes and decodes, without reflection, the ABI messages a Go guest handles on
// every send and every inbound message: the send, webhook and poll exports' requests and
// results, and the requests and replies of the host calls they make on the way (an HTTP request,
// a dispatch).
//
// Inside Wasm, encoding/json is most of a plugin's own work per call: its scanner steps one
// byte at a time through a function value, and its reflection walks every field, and with
// wazero's close-on-deadline check every loop it runs exits compiled code at each iteration.
// The functions here write and read the same bytes with straight-line code.
//
// The encoders produce exactly what json.Marshal produces for the same value (field order,
// omitempty, HTML escaping, base64, sorted map keys), and the decoders produce exactly what
// json.Unmarshal produces, or report that they cannot: a decoder handles the well-formed input
// the host sends (exact member names, no duplicates, no nulls, valid UTF-8) and returns false
// on anything else, and the caller then decodes the same bytes with encoding/json, which also
// phrases the error if there is one. The package's tests check both claims against
// encoding/json, on fixed cases, on every field of every type, and by fuzzing.
package wire

import "github.com/hermes-host/hermes-host/abi"

// Marshal returns v's JSON, as json.Marshal writes it, when v is one of the types this package
// encodes (*abi.SendResult, *abi.WebhookResult, *abi.PollResult, *abi.HTTPRequest,
// *abi.DispatchRequest); ok is false for any other.
func Marshal(v any) (b []byte, ok bool) {
	switch v := v.(type) {
	case *abi.SendResult:
		return appendSendResult(make([]byte, 0, 128), v), true
	case *abi.WebhookResult:
		return appendWebhookResult(make([]byte, 0, 512), v), true
	case *abi.PollResult:
		return appendPollResult(make([]byte, 0, 512), v), true
	case *abi.HTTPRequest:
		return appendHTTPRequest(make([]byte, 0, 192+len(v.URL)+len(v.Body)*4/3), v), true
	case *abi.DispatchRequest:
		return appendDispatchRequest(make([]byte, 0, 384+len(v.Event.Text)), v), true
	}
	return nil, false
}

// Unmarshal decodes b into v, a pointer to the zero value of one of the requests this package
// decodes (*abi.SendRequest, *abi.WebhookRequest, *abi.PollRequest), and reports whether it did.
// When it reports false, for any other type or any input it leaves to encoding/json, *v is
// zero again and the caller decodes b with json.Unmarshal.
func Unmarshal(b []byte, v any) bool {
	switch v := v.(type) {
	case *abi.SendRequest:
		return decodeSendRequest(b, v) || reset(v)
	case *abi.WebhookRequest:
		return decodeWebhookRequest(b, v) || reset(v)
	case *abi.PollRequest:
		return decodePollRequest(b, v) || reset(v)
	}
	return false
}

// UnmarshalReply decodes a host function's reply envelope {"ok": …, "result": …} with its
// result into res: nil (the result is skipped), or a pointer to the zero value of
// abi.HTTPResponse or abi.DispatchReply. It reports the envelope's ok, and handled false for any
// other res, for every reply with an error member and for any input it leaves to encoding/json;
// *res is then zero again.
func UnmarshalReply(b []byte, res any) (ok, handled bool) {
	switch r := res.(type) {
	case nil:
		return decodeReply(b, nil)
	case *abi.HTTPResponse:
		if ok, handled = decodeReply(b, func(d *decoder) { d.httpResponse(r) }); !handled {
			reset(r)
		}
	case *abi.DispatchReply:
		if ok, handled = decodeReply(b, func(d *decoder) { d.dispatchReply(r) }); !handled {
			reset(r)
		}
	}
	return ok, handled
}

// reset sets *v to its zero value and reports false.
func reset[T any](v *T) bool {
	var zero T
	*v = zero
	return false
}
