// A small JSON parser and string quoting, enough for the ABI's messages. parse returns null for
// anything that is not exactly one well-formed JSON value.

export const KIND_NULL: i32 = 0;
export const KIND_BOOL: i32 = 1;
export const KIND_NUMBER: i32 = 2;
export const KIND_STRING: i32 = 3;
export const KIND_ARRAY: i32 = 4;
export const KIND_OBJECT: i32 = 5;

export class JSONValue {
  kind: i32 = KIND_NULL;
  boolean: bool = false;
  num: f64 = 0;
  str: string = "";
  items: JSONValue[] = [];
  keys: string[] = [];
  values: JSONValue[] = [];

  static object(): JSONValue {
    const v = new JSONValue();
    v.kind = KIND_OBJECT;
    return v;
  }
  isObject(): bool { return this.kind == KIND_OBJECT; }
  isString(): bool { return this.kind == KIND_STRING; }
  // get returns an object's member, or null.
  get(key: string): JSONValue | null {
    if (this.kind != KIND_OBJECT) return null;
    for (let i = this.keys.length - 1; i >= 0; i--) {
      if (this.keys[i] == key) return this.values[i];
    }
    return null;
  }
}

class Parser {
  pos: i32 = 0;
  failed: bool = false;
  depth: i32 = 0;
  constructor(public s: string) {}

  peek(): i32 { return this.pos < this.s.length ? this.s.charCodeAt(this.pos) : -1; }
  ws(): void {
    while (this.pos < this.s.length) {
      const c = this.s.charCodeAt(this.pos);
      if (c == 0x20 || c == 0x09 || c == 0x0a || c == 0x0d) this.pos++;
      else break;
    }
  }
  lit(word: string): bool {
    if (this.s.substr(this.pos, word.length) == word) {
      this.pos += word.length;
      return true;
    }
    return false;
  }

  value(): JSONValue {
    const v = new JSONValue();
    if (++this.depth > 64) { this.failed = true; return v; }
    this.ws();
    const c = this.peek();
    if (c == 0x7b) this.object(v);
    else if (c == 0x5b) this.array(v);
    else if (c == 0x22) { v.kind = KIND_STRING; v.str = this.string(); }
    else if (c == 0x74 && this.lit("true")) { v.kind = KIND_BOOL; v.boolean = true; }
    else if (c == 0x66 && this.lit("false")) { v.kind = KIND_BOOL; }
    else if (c == 0x6e && this.lit("null")) { v.kind = KIND_NULL; }
    else if (c == 0x2d || (c >= 0x30 && c <= 0x39)) { v.kind = KIND_NUMBER; v.num = this.number(); }
    else this.failed = true;
    this.depth--;
    return v;
  }

  object(v: JSONValue): void {
    v.kind = KIND_OBJECT;
    this.pos++;
    this.ws();
    if (this.peek() == 0x7d) { this.pos++; return; }
    while (!this.failed) {
      this.ws();
      if (this.peek() != 0x22) { this.failed = true; return; }
      const key = this.string();
      this.ws();
      if (this.peek() != 0x3a) { this.failed = true; return; }
      this.pos++;
      const val = this.value();
      v.keys.push(key);
      v.values.push(val);
      this.ws();
      const c = this.peek();
      this.pos++;
      if (c == 0x7d) return;
      if (c != 0x2c) { this.failed = true; return; }
    }
  }

  array(v: JSONValue): void {
    v.kind = KIND_ARRAY;
    this.pos++;
    this.ws();
    if (this.peek() == 0x5d) { this.pos++; return; }
    while (!this.failed) {
      v.items.push(this.value());
      this.ws();
      const c = this.peek();
      this.pos++;
      if (c == 0x5d) return;
      if (c != 0x2c) { this.failed = true; return; }
    }
  }

  string(): string {
    this.pos++; // opening quote
    let out = "";
    let start = this.pos;
    while (true) {
      if (this.pos >= this.s.length) { this.failed = true; return out; }
      const c = this.s.charCodeAt(this.pos);
      if (c == 0x22) {
        out += this.s.substring(start, this.pos);
        this.pos++;
        return out;
      }
      if (c < 0x20) { this.failed = true; return out; }
      if (c == 0x5c) {
        out += this.s.substring(start, this.pos);
        this.pos++;
        const e = this.peek();
        this.pos++;
        if (e == 0x22) out += '"';
        else if (e == 0x5c) out += "\\";
        else if (e == 0x2f) out += "/";
        else if (e == 0x62) out += "\b";
        else if (e == 0x66) out += "\f";
        else if (e == 0x6e) out += "\n";
        else if (e == 0x72) out += "\r";
        else if (e == 0x74) out += "\t";
        else if (e == 0x75) {
          const hex = this.s.substr(this.pos, 4);
          const code = I32.parseInt(hex, 16);
          if (hex.length != 4 || isNaN(<f64>code)) { this.failed = true; return out; }
          out += String.fromCharCode(code);
          this.pos += 4;
        } else { this.failed = true; return out; }
        start = this.pos;
        continue;
      }
      this.pos++;
    }
  }

  number(): f64 {
    const start = this.pos;
    if (this.peek() == 0x2d) this.pos++;
    let digits = 0;
    while (true) {
      const c = this.peek();
      if ((c >= 0x30 && c <= 0x39) || c == 0x2e || c == 0x65 || c == 0x45 || c == 0x2b || c == 0x2d) { this.pos++; digits++; }
      else break;
    }
    if (digits == 0) { this.failed = true; return 0; }
    return parseFloat(this.s.substring(start, this.pos));
  }
}

// member returns v's member key, or null when v is not an object or has no such member.
export function member(v: JSONValue | null, key: string): JSONValue | null {
  if (v == null) return null;
  return v.get(key);
}

// text returns v's member key when it is a string, else null.
export function text(v: JSONValue | null, key: string): string | null {
  const m = member(v, key);
  if (m == null || !m.isString()) return null;
  return m.str;
}

export function parse(s: string): JSONValue | null {
  const p = new Parser(s);
  const v = p.value();
  p.ws();
  if (p.failed || p.pos != s.length) return null;
  return v;
}

const HEX = "0123456789abcdef";

// quote returns s as a JSON string literal.
export function quote(s: string): string {
  let out = '"';
  let start = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c == 0x22 || c == 0x5c || c < 0x20) {
      out += s.substring(start, i);
      if (c == 0x22) out += '\\"';
      else if (c == 0x5c) out += "\\\\";
      else if (c == 0x0a) out += "\\n";
      else if (c == 0x0d) out += "\\r";
      else if (c == 0x09) out += "\\t";
      else out += "\\u00" + HEX.charAt(c >> 4) + HEX.charAt(c & 15);
      start = i + 1;
    }
  }
  return out + s.substring(start) + '"';
}
