// Package yuanbaotest is a loopback fake of the Yuanbao bot gateway, for tests and the
// conformance suite: the HTTP sign-token endpoint and the WebSocket gateway, speaking the
// gateway's ConnMsg protobuf framing through the official Go protobuf runtime (package ybpb,
// generated from ybpb/yuanbao.proto), independently of the plugin's own codec.
//
// What it does, as the real gateway does (per the Python adapter's behaviour):
//
//   - POST /api/v5/robotLogic/sign-token verifies the HMAC-SHA256 signature over
//     nonce+timestamp+app_key+app_secret with the bot's secret, and the Beijing-time timestamp
//     (format and clock skew), and answers {"code": 0, "data": {token, bot_id, duration, …}};
//     a scripted fault answers code 10099 ("retry"), another code, an HTTP error, or late.
//     It is rate limited, as Yuanbao's is (the limit there is not documented; the fake's is
//     DefaultSignLimit tokens per app_key per DefaultSignWindow, five a minute, WithSignLimit):
//     beyond it a request is answered HTTP 429 {"code": CodeRateLimited} and issues nothing, so a
//     client that signs on every reconnect instead of caching its token until it expires meets
//     it. Refused requests (a bad signature, a stale timestamp) do not count.
//   - GET /wss/connection upgrades to a WebSocket whose every binary frame is one ConnMsg. The
//     first request must be AUTH_BIND with a token the fake signed (unexpired); the answer is an
//     AuthBindRsp with a connect_id, or a refusal (code ≠ 0), or silence, as scripted. A bot has
//     one bound connection: a second bind closes the first with 4014 (instance conflict).
//   - ping requests are answered (unless told to skip some); send_c2c_message and
//     send_group_message are recorded in per-chat transcripts and answered with the request's
//     msg_id (late, with status ≠ 0 or code ≠ 0, never, or by dropping the socket, as
//     scripted); typing heartbeats are recorded; PushAcks mark pushes acknowledged.
//   - Pushes (protobuf or JSON, with or without need_ack) go to the bot's bound connection, or
//     wait for the next bind; a push that needed an acknowledgement and did not get one is
//     delivered again after the next bind. The socket can be closed with any code, or dropped
//     (no close frame) after a push or in the middle of writing one.
//
// Everything the fake receives is recorded for assertions, and Wait polls a condition. Field
// numbers are checked against golden bytes derived by hand from the field table in the fake's
// tests.
package yuanbaotest
