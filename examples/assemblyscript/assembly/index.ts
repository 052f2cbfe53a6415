// asdemo: a hermes-host platform plugin in AssemblyScript, written from abi/SPEC.md alone,
// against the raw Extism kernel imports (no PDK). It is the same stand-in platform as the Go
// skeleton that `hermes-host new plugin` writes: the platform posts {"id", "chat_id", "user_id",
// "text"} to the webhook, and send POSTs {"chat_id", "text"} to the profile's api_url, which
// answers {"message_id"}.

import { JSONValue, member, parse, quote, text } from "./json";
import { decodeBase64, encodeBase64 } from "./base64";

// ---- Extism kernel (SPEC section 1.2) --------------------------------------------------------

@external("extism:host/env", "input_length")
declare function input_length(): i64;
@external("extism:host/env", "input_load_u8")
declare function input_load_u8(offset: i64): u32;
@external("extism:host/env", "input_load_u64")
declare function input_load_u64(offset: i64): u64;
@external("extism:host/env", "alloc")
declare function alloc(length: i64): i64;
@external("extism:host/env", "free")
declare function free(offset: i64): void;
@external("extism:host/env", "length")
declare function length(offset: i64): i64;
@external("extism:host/env", "load_u8")
declare function load_u8(offset: i64): u32;
@external("extism:host/env", "load_u64")
declare function load_u64(offset: i64): u64;
@external("extism:host/env", "store_u8")
declare function store_u8(offset: i64, value: u32): void;
@external("extism:host/env", "store_u64")
declare function store_u64(offset: i64, value: u64): void;
@external("extism:host/env", "output_set")
declare function output_set(offset: i64, length: i64): void;
@external("extism:host/env", "error_set")
declare function error_set(offset: i64): void;

// ---- Host functions (SPEC section 5) ---------------------------------------------------------

@external("extism:host/user", "hermes_http")
declare function hermes_http(request: i64): i64;

// ---- Moving bytes through kernel memory -------------------------------------------------------

// Kernel memory is reached one call per 8 bytes (then per byte for the tail), as the PDKs do.

function readInput(): Uint8Array {
  const n = <i32>input_length();
  const out = new Uint8Array(n);
  let i = 0;
  for (; i + 8 <= n; i += 8) store<u64>(out.dataStart + <usize>i, input_load_u64(<i64>i));
  for (; i < n; i++) out[i] = <u8>input_load_u8(<i64>i);
  return out;
}

// toKernel copies s (as UTF-8) into a new kernel block and returns its offset.
function toKernel(s: string): i64 {
  const bytes = Uint8Array.wrap(String.UTF8.encode(s));
  const n = bytes.length;
  const off = alloc(<i64>n);
  let i = 0;
  for (; i + 8 <= n; i += 8) store_u64(off + <i64>i, load<u64>(bytes.dataStart + <usize>i));
  for (; i < n; i++) store_u8(off + <i64>i, bytes[i]);
  return off;
}

function fromKernel(off: i64): string {
  const n = <i32>length(off);
  const bytes = new Uint8Array(n);
  let i = 0;
  for (; i + 8 <= n; i += 8) store<u64>(bytes.dataStart + <usize>i, load_u64(off + <i64>i));
  for (; i < n; i++) bytes[i] = <u8>load_u8(off + <i64>i);
  return String.UTF8.decode(bytes.buffer);
}

function output(json: string): i32 {
  const off = toKernel(json);
  output_set(off, length(off));
  return 0;
}

// fail reports an export error as a JSON Error (SPEC section 2.1) and returns non-zero.
function fail(code: string, message: string): i32 {
  error_set(toKernel('{"code":' + quote(code) + ',"message":' + quote(message) + "}"));
  return 1;
}

// abort replaces AssemblyScript's default (an `env.abort` import this host would refuse).
export function abort(message: string | null, file: string | null, line: u32, column: u32): void {
  unreachable();
}

// ---- The call context every request but describe's carries ------------------------------------

class Request {
  constructor(public body: JSONValue, public config: JSONValue) {}
}

// request parses the input as a request object with a profile; null means fail() was called.
let failure: i32 = 0;
function request(): Request | null {
  const v = parse(String.UTF8.decode(readInput().buffer));
  if (v == null || !v.isObject()) {
    failure = fail("bad_request", "malformed request: not a JSON object");
    return null;
  }
  const profile = v.get("profile");
  if (profile == null || !profile.isString() || profile.str.length == 0) {
    failure = fail("bad_request", "request has no profile");
    return null;
  }
  let config = v.get("config");
  if (config == null) config = JSONValue.object();
  if (!config.isObject()) {
    failure = fail("bad_request", "config is not an object");
    return null;
  }
  return new Request(v, config);
}

// ---- Exports ------------------------------------------------------------------------------

export function hermes_abi_v1_1(): void {}

export function describe(): i32 {
  return output(
    '{"name":"asdemo","version":"0.1.0","kind":"platform","platform":"asdemo",' +
      '"description":"AssemblyScript example platform plugin",' +
      '"capabilities":["webhook"],"message_limit":{"max":4000,"unit":"codepoint"},' +
      '"egress":["api.asdemo.example"]}'
  );
}

export function configure(): i32 {
  const req = request();
  if (req == null) return failure;
  const url = text(req.config, "api_url");
  if (url == null || url.length == 0) return output('{"problems":["api_url is required"]}');
  if (!url.startsWith("https://") && !url.startsWith("http://")) {
    return output('{"problems":["api_url must be an http(s) URL"]}');
  }
  return output("{}");
}

// decodeJSON parses base64-encoded JSON, or returns null.
function decodeJSON(b64: string | null): JSONValue | null {
  if (b64 == null) return null;
  const raw = decodeBase64(b64);
  if (raw == null) return null;
  return parse(String.UTF8.decode(raw.buffer));
}

function orEmpty(s: string | null): string {
  return s == null ? "" : s;
}

export function webhook(): i32 {
  const req = request();
  if (req == null) return failure;
  const update = decodeJSON(text(req.body, "body"));
  const id = text(update, "id");
  const chat = text(update, "chat_id");
  if (id == null || chat == null) {
    // A refusal is an HTTP answer, not an export error (SPEC section 2.1).
    return output('{"response":{"status":400,"body":' + quote(encodeBase64(String.UTF8.encode("bad update"))) + "}}");
  }
  const event =
    '{"id":' + quote("asdemo:" + id) + ',"kind":"message","text":' + quote(orEmpty(text(update, "text"))) +
    ',"source":{"chat_type":"dm","chat_id":' + quote(chat) + ',"user_id":' + quote(orEmpty(text(update, "user_id"))) +
    ',"message_id":' + quote(id) + "}}";
  return output('{"response":{"status":200},"events":[' + event + "]}");
}

export function send(): i32 {
  const req = request();
  if (req == null) return failure;
  const msg = member(req.body, "message");
  if (msg == null || !msg.isObject()) return fail("bad_request", "message is not an object");
  const chat = text(msg, "chat_id");
  const url = text(req.config, "api_url");
  if (chat == null) return fail("bad_request", "message.chat_id is required");
  if (url == null) return sendError("permanent", "config", "api_url is not configured");

  const payload = '{"chat_id":' + quote(chat) + ',"text":' + quote(orEmpty(text(msg, "text"))) + "}";
  const httpReq =
    '{"method":"POST","url":' + quote(url) + ',"headers":{"Content-Type":["application/json"]},"body":' +
    quote(encodeBase64(String.UTF8.encode(payload))) + "}";
  const reqOff = toKernel(httpReq);
  const replyOff = hermes_http(reqOff);
  free(reqOff);
  const reply = parse(fromKernel(replyOff));
  free(replyOff);
  if (reply == null || !reply.isObject()) return fail("internal", "unreadable reply from hermes_http");

  // Host functions answer an envelope {ok, result | error} (SPEC section 5).
  const ok = member(reply, "ok");
  if (ok == null || !ok.boolean) {
    const err = member(reply, "error");
    const code = orEmpty(text(err, "code"));
    const message = orEmpty(text(err, "message"));
    // "uncertain": the request was written and no answer came; the message may have been
    // posted, so the host must not send it again (SPEC section 2.6).
    const kind = code == "uncertain" ? "uncertain" : code == "denied" ? "permanent" : "retryable";
    return sendError(kind, code.length > 0 ? code : "io", message.length > 0 ? message : "egress failed");
  }
  const res = member(reply, "result");
  const status = member(res, "status");
  const st = status == null ? 0 : <i32>status.num;
  if (st == 429 || st >= 500) return sendError("retryable", st.toString(), "platform busy");
  if (st >= 300 || st < 200) return sendError("permanent", st.toString(), "platform refused the message");
  // Posted (2xx): a readable message_id is the platform's; an unreadable answer is still posted,
  // so it is reported delivered and never resent.
  const mid = text(decodeJSON(text(res, "body")), "message_id");
  return output('{"message_ids":[' + quote(mid == null || mid.length == 0 ? "unknown" : mid) + "]}");
}

function sendError(kind: string, code: string, message: string): i32 {
  return output('{"error":{"kind":' + quote(kind) + ',"code":' + quote(code) + ',"message":' + quote(message) + "}}");
}
