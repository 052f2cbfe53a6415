package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/hermes-host/hermes-host/abi"
)

// fill sets every field reachable from v to a non-zero value: strings that need escaping
// (HTML characters, control bytes, U+2028, an invalid byte, non-ASCII), two elements in every
// slice and map. A field the codec forgets therefore changes the bytes or the decoded value.
func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString("a<b>&\"c\\\n\t\x01\u2028é\xff" + strconv.Itoa(*n))
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(*n) * 1_000_003)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), n)
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			v.SetBytes([]byte(`{"token":"x","n":[1,2.5e3,true,null]}`))
			return
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte("bytes\x00\xff" + strconv.Itoa(*n)))
			return
		}
		s := reflect.MakeSlice(v.Type(), 2, 2)
		fill(s.Index(0), n)
		fill(s.Index(1), n)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for range 2 {
			k := reflect.New(v.Type().Key()).Elem()
			e := reflect.New(v.Type().Elem()).Elem()
			fill(k, n)
			fill(e, n)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	default:
		panic("fill: unhandled kind " + v.Kind().String())
	}
}

func filled[T any]() *T {
	v := new(T)
	n := 0
	fill(reflect.ValueOf(v).Elem(), &n)
	return v
}

func sameAsMarshal[T any](t *testing.T, name string, v *T, appendJSON func([]byte, *T) []byte) {
	t.Helper()
	want, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	prefix := []byte("prefix")
	got := appendJSON(prefix, v)
	if !bytes.HasPrefix(got, prefix) {
		t.Fatalf("%s: the encoder dropped what it appended to", name)
	}
	if got := got[len(prefix):]; !bytes.Equal(got, want) {
		t.Errorf("%s:\n got %s\nwant %s", name, got, want)
	}
}

func TestEncodersMatchEncodingJSON(t *testing.T) {
	id := ""
	sendResults := map[string]*abi.SendResult{
		"zero":      {},
		"filled":    filled[abi.SendResult](),
		"sent":      {MessageIDs: []string{"42"}},
		"thread":    {MessageIDs: []string{}, ThreadID: &id},
		"error":     {Error: &abi.SendError{Kind: abi.SendRetryable, Message: "rate limited", RetryAfterMs: 3000}},
		"accepted0": {Error: &abi.SendError{Kind: abi.SendUncertain, Accepted: []string{}}},
	}
	for name, v := range sendResults {
		sameAsMarshal(t, "SendResult "+name, v, appendSendResult)
	}
	httpRequests := map[string]*abi.HTTPRequest{
		"zero":         {},
		"filled":       filled[abi.HTTPRequest](),
		"post":         {Method: "POST", URL: "https://api.telegram.org/bot1:x/sendMessage?a=1&b=2", Headers: map[string][]string{"Content-Type": {"application/json"}, "A": nil, "B": {}}, Body: []byte(`{"chat_id":1}`), TimeoutMs: 900},
		"empty body":   {Method: "GET", Body: []byte{}, Headers: map[string][]string{}},
		"unicode keys": {Headers: map[string][]string{"é": {"\u2029"}, "e": {"<"}, "E": {"&"}}},
	}
	for name, v := range httpRequests {
		sameAsMarshal(t, "HTTPRequest "+name, v, appendHTTPRequest)
	}
	noKind := filled[abi.InboundEvent]()
	noKind.Kind = ""
	webhookResults := map[string]*abi.WebhookResult{
		"zero":    {},
		"filled":  filled[abi.WebhookResult](),
		"no kind": {Response: abi.HTTPResponse{Status: 200}, Events: []abi.InboundEvent{*noKind, {}}},
	}
	for name, v := range webhookResults {
		sameAsMarshal(t, "WebhookResult "+name, v, appendWebhookResult)
	}
	pollResults := map[string]*abi.PollResult{
		"zero":   {},
		"filled": filled[abi.PollResult](),
		"status": {BackoffMs: 5000, Status: &abi.ProfileStatus{State: abi.StatusDegraded}},
		"empty":  {Events: []abi.InboundEvent{}},
	}
	for name, v := range pollResults {
		sameAsMarshal(t, "PollResult "+name, v, appendPollResult)
	}
	dispatches := map[string]*abi.DispatchRequest{
		"zero":    {},
		"filled":  filled[abi.DispatchRequest](),
		"no kind": {Event: *noKind},
	}
	for name, v := range dispatches {
		sameAsMarshal(t, "DispatchRequest "+name, v, appendDispatchRequest)
	}
}

// decodeBoth decodes input with encoding/json and with decode; when decode handles the input,
// encoding/json must accept it and give the same value.
func decodeBoth[T any](t testing.TB, input []byte, decode func([]byte, *T) bool) (handled bool) {
	t.Helper()
	var fast T
	if !decode(input, &fast) {
		return false
	}
	var want T
	if err := json.Unmarshal(input, &want); err != nil {
		t.Fatalf("%T: handled %q, which encoding/json rejects: %v", fast, input, err)
	}
	if !reflect.DeepEqual(fast, want) {
		t.Fatalf("%T from %q:\n got %#v\nwant %#v", fast, input, fast, want)
	}
	return true
}

// The reply decoders, as functions of the same shape as the request decoders.

func replyHTTP(b []byte, r *replyOf[abi.HTTPResponse]) bool {
	var handled bool
	r.OK, handled = decodeReply(b, func(d *decoder) { d.httpResponse(&r.Result) })
	return handled
}

func replyDispatch(b []byte, r *replyOf[abi.DispatchReply]) bool {
	var handled bool
	r.OK, handled = decodeReply(b, func(d *decoder) { d.dispatchReply(&r.Result) })
	return handled
}

func replyNone(b []byte, r *okOnly) bool {
	var handled bool
	r.OK, handled = decodeReply(b, nil)
	return handled
}

// replyOf is the envelope as encoding/json reads it for the comparison. A reply the decoders
// handle has no error member, so Error stays nil on both sides.
type replyOf[T any] struct {
	OK     bool       `json:"ok"`
	Result T          `json:"result"`
	Error  *abi.Error `json:"error"`
}

// okOnly is the envelope without a result, as replyNone reads it: encoding/json ignores the
// result member, the decoder skips it.
type okOnly struct {
	OK bool `json:"ok"`
}

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func TestDecodersMatchEncodingJSON(t *testing.T) {
	// What the host sends: json.Marshal of every field filled, and of the zero value.
	for _, v := range []*abi.SendRequest{filled[abi.SendRequest](), {}, {Message: abi.OutboundMessage{Attachments: []abi.Attachment{}, Buttons: []abi.Button{{}}}}} {
		if !decodeBoth(t, mustMarshal(v), decodeSendRequest) {
			t.Errorf("SendRequest %s: not handled", mustMarshal(v))
		}
	}
	for _, v := range []*abi.WebhookRequest{filled[abi.WebhookRequest](), {}, {Headers: map[string][]string{"A": {}}, Body: []byte{}}} {
		if !decodeBoth(t, mustMarshal(v), decodeWebhookRequest) {
			t.Errorf("WebhookRequest %s: not handled", mustMarshal(v))
		}
	}
	for _, v := range []*abi.PollRequest{filled[abi.PollRequest](), {}} {
		if !decodeBoth(t, mustMarshal(v), decodePollRequest) {
			t.Errorf("PollRequest %s: not handled", mustMarshal(v))
		}
	}
	// Replies as the host writes them: abi.Reply with the result's JSON.
	for _, v := range []*abi.HTTPResponse{filled[abi.HTTPResponse](), {}} {
		in := mustMarshal(abi.Reply{OK: true, Result: mustMarshal(v)})
		if !decodeBoth(t, in, replyHTTP) {
			t.Errorf("HTTP reply %s: not handled", in)
		}
	}
	for _, v := range []*abi.DispatchReply{filled[abi.DispatchReply](), {}} {
		in := mustMarshal(abi.Reply{OK: true, Result: mustMarshal(v)})
		if !decodeBoth(t, in, replyDispatch) {
			t.Errorf("dispatch reply %s: not handled", in)
		}
	}
	for _, in := range []string{`{"ok":true}`, `{"ok":false}`, `{"ok":true,"result":{"a":[1,{"b":null}]}}`, `{"result":"x","ok":true}`} {
		if !decodeBoth(t, []byte(in), replyNone) {
			t.Errorf("reply %s: not handled", in)
		}
	}

	// Well-formed input that is not what json.Marshal writes is still handled.
	handled := []string{
		" \n{ \"message\" : {\"chat_id\":\"\\u00e9\\ud83d\\ude00\\\"\\/\\b\\f\\n\\r\\t\"} , \"profile\":\"p\",\"deadline_ms\":-0}\t",
		`{"profile":"p","future_member":{"x":[true,false,null,-1.5e-3,"s"]},"message":{"chat_id":"1","part":2,"parts":3}}`,
		`{"profile":"p","config":[ 1 , 2 ],"message":{"chat_id":"é😀","attachments":[{"kind":"image","data":"AAEC"}]}}`,
		`{"profile":"p","config":"s","message":{"buttons":[]}}`,
	}
	for _, in := range handled {
		if !decodeBoth(t, []byte(in), decodeSendRequest) {
			t.Errorf("%s: not handled", in)
		}
	}

	// What the decoders leave to encoding/json: each is either an error there or decoded by
	// rules not worth copying.
	fallBack := []string{
		``, `null`, `[]`, `{`, `{"profile":"p"} x`, `{"profile":"p",}`,
		`{"Profile":"p"}`,                            // matched case-insensitively by encoding/json
		`{"proﬁle":"p"}`,                             // non-ASCII key
		`{"profile":"p","profile":"q"}`,              // duplicate
		`{"profile":null}`,                           // null leaves the field alone
		`{"config":null}`,                            // RawMessage("null")
		`{"message":{"part":1.0}}`,                   // not an integer
		`{"message":{"part":99999999999999999999}}`,  // overflows
		`{"message":{"text":"\ud800"}}`,              // lone surrogate
		"{\"message\":{\"text\":\"\xff\"}}",          // invalid UTF-8
		"{\"message\":{\"text\":\"\x01\"}}",          // raw control byte
		`{"message":{"attachments":[{"data":"!"}]}}`, // bad base64
		`{"message":{"text":"a\x"}}`,
		`{"x":` + deep(maxDepth+1) + `}`,
	}
	for _, in := range fallBack {
		if decodeBoth(t, []byte(in), decodeSendRequest) {
			t.Errorf("%s: handled, should be left to encoding/json", in)
		}
	}
	for _, in := range []string{`{"ok":false,"error":{"code":"denied","message":"no"}}`, `{"ok":true,"result":null}`, `{"OK":true}`} {
		if decodeBoth(t, []byte(in), replyHTTP) {
			t.Errorf("reply %s: handled, should be left to encoding/json", in)
		}
	}
}

func deep(n int) string {
	return strings.Repeat("[", n) + strings.Repeat("]", n)
}

// FuzzDecoders feeds the same bytes to every decoder: whatever one handles, encoding/json must
// accept and decode to the same value.
func FuzzDecoders(f *testing.F) {
	f.Add(mustMarshal(filled[abi.SendRequest]()))
	f.Add(mustMarshal(filled[abi.WebhookRequest]()))
	f.Add(mustMarshal(filled[abi.PollRequest]()))
	f.Add(mustMarshal(abi.Reply{OK: true, Result: mustMarshal(filled[abi.HTTPResponse]())}))
	f.Add(mustMarshal(abi.Reply{OK: true, Result: mustMarshal(filled[abi.DispatchReply]())}))
	f.Add([]byte(`{"profile":"p","message":{"chat_id":"\u00e9\ud83d\ude00"},"x":[{"y":-0.5E+2}]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		decodeBoth(t, in, decodeSendRequest)
		decodeBoth(t, in, decodeWebhookRequest)
		decodeBoth(t, in, decodePollRequest)
		decodeBoth(t, in, replyHTTP)
		decodeBoth(t, in, replyDispatch)
		decodeBoth(t, in, replyNone)
	})
}

// FuzzEncoders decodes the fuzzer's bytes with encoding/json into each encoded type and
// checks the encoder writes what json.Marshal writes for the value.
func FuzzEncoders(f *testing.F) {
	f.Add(mustMarshal(filled[abi.SendResult]()))
	f.Add(mustMarshal(filled[abi.HTTPRequest]()))
	f.Add(mustMarshal(filled[abi.WebhookResult]()))
	f.Add(mustMarshal(filled[abi.PollResult]()))
	f.Add(mustMarshal(filled[abi.DispatchRequest]()))
	f.Fuzz(func(t *testing.T, in []byte) {
		encodeBoth(t, in, appendSendResult)
		encodeBoth(t, in, appendHTTPRequest)
		encodeBoth(t, in, appendWebhookResult)
		encodeBoth(t, in, appendPollResult)
		encodeBoth(t, in, appendDispatchRequest)
	})
}

func encodeBoth[T any](t *testing.T, in []byte, appendJSON func([]byte, *T) []byte) {
	var v T
	if json.Unmarshal(in, &v) != nil {
		return
	}
	sameAsMarshal(t, reflect.TypeFor[T]().String(), &v, appendJSON)
}

// BenchmarkSendMessages encodes and decodes what one send moves through the SDK (its request,
// the HTTP request and reply of its one platform call, its result), with this package and
// with encoding/json, and reports the ratio. Natively; inside Wasm the gap is wider
// (RATIONALE.md, Throughput).
func BenchmarkSendMessages(b *testing.B) {
	req := mustMarshal(abi.SendRequest{
		Call:    abi.Call{Profile: "main", Config: json.RawMessage(`{"outbox_url":"http://127.0.0.1:8485/outbox","secret":"s3cret"}`), DeadlineMs: 30000},
		Message: abi.OutboundMessage{ChatType: abi.ChatDM, ChatID: "5", Text: "the answer", DeliveryID: "d1"},
	})
	httpReq := &abi.HTTPRequest{Method: "POST", URL: "http://127.0.0.1:8485/outbox", Headers: map[string][]string{"Content-Type": {"application/json"}},
		Body: []byte(`{"chat_type":"dm","chat_id":"5","text":"the answer","delivery_id":"d1"}`), TimeoutMs: 26999}
	reply := mustMarshal(abi.Reply{OK: true, Result: mustMarshal(abi.HTTPResponse{Status: 200, Headers: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{"ok":true,"message_id":"m1"}`)})})
	result := &abi.SendResult{MessageIDs: []string{"m1"}}
	var per [2]float64
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			var r abi.SendRequest
			if json.Unmarshal(req, &r) != nil {
				b.Fatal("request")
			}
			mustMarshal(httpReq)
			var rep struct {
				OK     bool              `json:"ok"`
				Result *abi.HTTPResponse `json:"result"`
			}
			rep.Result = new(abi.HTTPResponse)
			if json.Unmarshal(reply, &rep) != nil {
				b.Fatal("reply")
			}
			mustMarshal(result)
		}
		per[0] = float64(b.Elapsed()) / float64(b.N)
	})
	b.Run("wire", func(b *testing.B) {
		for b.Loop() {
			var r abi.SendRequest
			if !decodeSendRequest(req, &r) {
				b.Fatal("request")
			}
			appendHTTPRequest(nil, httpReq)
			var resp abi.HTTPResponse
			if _, ok := decodeReply(reply, func(d *decoder) { d.httpResponse(&resp) }); !ok {
				b.Fatal("reply")
			}
			appendSendResult(nil, result)
		}
		per[1] = float64(b.Elapsed()) / float64(b.N)
		if per[0] > 0 {
			b.ReportMetric(per[0]/per[1], "x-faster")
		}
	})
}

// TestEntryPoints: Marshal, Unmarshal and UnmarshalReply cover their types, decline others, and
// leave the value zero when they hand an input back, so encoding/json starts from what it would
// have started from. The inputs fail late (after members were already read).
func TestEntryPoints(t *testing.T) {
	if _, ok := Marshal(&abi.LogRequest{Message: "x"}); ok {
		t.Error("Marshal took a type it does not encode")
	}
	if b, ok := Marshal(&abi.DispatchRequest{}); !ok || !bytes.Equal(b, mustMarshal(&abi.DispatchRequest{})) {
		t.Errorf("Marshal(*DispatchRequest) = %s %v", b, ok)
	}
	var req abi.SendRequest
	if Unmarshal([]byte(`{"profile":"p","message":{"chat_id":"1","text":"\ud800"}}`), &req) {
		t.Error("a lone surrogate was handled")
	}
	if !reflect.DeepEqual(req, abi.SendRequest{}) {
		t.Errorf("handed back, the request is not zero: %+v", req)
	}
	var hook abi.WebhookRequest
	if Unmarshal([]byte(`{"profile":"p","method":"POST","Path":"/"}`), &hook) || !reflect.DeepEqual(hook, abi.WebhookRequest{}) {
		t.Errorf("a case-folded member: handled, or not zero: %+v", hook)
	}
	var poll abi.PollRequest
	if Unmarshal([]byte(`{"profile":"p","wait_ms":1.5}`), &poll) || !reflect.DeepEqual(poll, abi.PollRequest{}) {
		t.Errorf("a fraction: handled, or not zero: %+v", poll)
	}
	var other abi.TickRequest
	if Unmarshal([]byte(`{"profile":"p"}`), &other) {
		t.Error("Unmarshal took a type it does not decode")
	}
	var resp abi.HTTPResponse
	if _, handled := UnmarshalReply([]byte(`{"ok":true,"result":{"status":200,"body":"!"}}`), &resp); handled || !reflect.DeepEqual(resp, abi.HTTPResponse{}) {
		t.Errorf("bad base64: handled, or not zero: %+v", resp)
	}
	var disp abi.DispatchReply
	if _, handled := UnmarshalReply([]byte(`{"ok":true,"result":{"duplicate":true},"error":{"code":"x"}}`), &disp); handled || !reflect.DeepEqual(disp, abi.DispatchReply{}) {
		t.Errorf("an error member: handled, or not zero: %+v", disp)
	}
	if ok, handled := UnmarshalReply([]byte(`{"ok":true}`), &abi.KVGetReply{}); handled || ok {
		t.Error("UnmarshalReply took a result type it does not decode")
	}
	if ok, handled := UnmarshalReply([]byte(`{"ok":true,"result":{}}`), nil); !handled || !ok {
		t.Error("a reply without a result was not handled")
	}
}
