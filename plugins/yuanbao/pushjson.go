package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"sort"
	"strconv"
	"strings"
)

// Pushes may also arrive as JSON (the data of the ConnMsg is then a JSON object), in either of
// two spellings: the bot proxy's snake_case (from_account, msg_body, cloud_custom_data) or
// Tencent IM's callback PascalCase (From_Account, GroupId, MsgBody, MsgKey, CloudCustomData).
// Keys are compared after lower-casing them and dropping underscores, so both spellings (and
// camelCase) read the same.

// isJSONObject reports whether data looks like a JSON object (rather than protobuf).
func isJSONObject(data []byte) bool {
	data = bytes.TrimSpace(data)
	return len(data) > 1 && data[0] == '{' && data[len(data)-1] == '}' && json.Valid(data)
}

// jsonObj is a JSON object with normalized keys.
type jsonObj map[string]any

func normKey(k string) string { return strings.ToLower(strings.ReplaceAll(k, "_", "")) }

func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(jsonObj, len(x))
		for k, val := range x {
			out[normKey(k)] = normalize(val)
		}
		return out
	case []any:
		for i := range x {
			x[i] = normalize(x[i])
		}
		return x
	}
	return v
}

// str returns the first of keys that holds a string (or a number, as text).
func (o jsonObj) str(keys ...string) string {
	for _, k := range keys {
		switch v := o[k].(type) {
		case string:
			if v != "" {
				return v
			}
		case json.Number:
			return v.String()
		}
	}
	return ""
}

// uint returns the first of keys that holds a non-negative integer (or a string of one).
func (o jsonObj) uint(keys ...string) uint64 {
	for _, k := range keys {
		var s string
		switch v := o[k].(type) {
		case json.Number:
			s = v.String()
		case string:
			s = v
		default:
			continue
		}
		if n, err := strconv.ParseUint(s, 10, 64); err == nil {
			return n
		}
	}
	return 0
}

func (o jsonObj) list(keys ...string) []any {
	for _, k := range keys {
		if l, ok := o[k].([]any); ok {
			return l
		}
	}
	return nil
}

// obj returns the object under key; a string holding a JSON object is decoded (Tencent IM sends
// MsgContent either way).
func (o jsonObj) obj(key string) jsonObj {
	switch v := o[key].(type) {
	case jsonObj:
		return v
	case string:
		var inner any
		d := json.NewDecoder(strings.NewReader(v))
		d.UseNumber()
		if d.Decode(&inner) == nil {
			if m, ok := normalize(inner).(jsonObj); ok {
				return m
			}
		}
		return jsonObj{"text": v}
	}
	return nil
}

var errNotPush = errors.New("JSON push without sender, body or callback")

// parseJSONPush decodes a JSON push.
func parseJSONPush(data []byte) (*push, error) {
	var raw any
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(&raw); err != nil {
		return nil, err
	}
	o, ok := normalize(raw).(jsonObj)
	if !ok {
		return nil, errNotPush
	}
	p := &push{
		Callback:         o.str("callbackcommand"),
		From:             o.str("fromaccount"),
		To:               o.str("toaccount"),
		Nick:             o.str("sendernickname", "nickname", "nickname"),
		GroupID:          o.str("groupid"),
		GroupCode:        o.str("groupcode", "groupid"),
		GroupName:        o.str("groupname"),
		Seq:              o.uint("msgseq"),
		Random:           o.uint("msgrandom", "random"),
		Time:             o.uint("msgtime", "eventtime"),
		MsgKey:           o.str("msgkey"),
		MsgID:            o.str("msgid", "msgkey"),
		CloudCustomData:  o.str("cloudcustomdata"),
		OwnerID:          o.str("botownerid"),
		PrivateFromGroup: o.str("privatefromgroupcode"),
	}
	if le, ok := o["logext"].(jsonObj); ok {
		p.TraceID = le.str("traceid")
	}
	for _, item := range o.list("msgbody") {
		e, ok := item.(jsonObj)
		if !ok {
			continue
		}
		c := e.obj("msgcontent")
		el := element{Type: e.str("msgtype")}
		if c != nil {
			el.Content = content{Text: c.str("text"), UUID: c.str("uuid"), Desc: c.str("desc"), Ext: c.str("ext"),
				Sound: c.str("sound"), URL: c.str("url"), FileSize: c.uint("filesize"), FileName: c.str("filename")}
			switch v := c["data"].(type) {
			case string:
				el.Content.Data = v
			case jsonObj, []any:
				b, _ := json.Marshal(v)
				el.Content.Data = string(b)
			}
			for _, im := range c.list("imageinfoarray") {
				if m, ok := im.(jsonObj); ok {
					el.Content.Images = append(el.Content.Images, imageInfo{Type: m.uint("type"), Size: m.uint("size"),
						Width: m.uint("width"), Height: m.uint("height"), URL: m.str("url")})
				}
			}
		}
		p.Body = append(p.Body, el)
	}
	for _, item := range o.list("recallmsgseqlist") {
		if m, ok := item.(jsonObj); ok {
			p.Recalls = append(p.Recalls, recallRef{Seq: m.uint("msgseq"), MsgID: m.str("msgid")})
		}
	}
	if p.From == "" && len(p.Body) == 0 && p.Callback == "" {
		return nil, errNotPush
	}
	return p, nil
}

// decodePush reads a push's data: JSON when it is a JSON object, protobuf otherwise.
func decodePush(data []byte) (*push, error) {
	if isJSONObject(data) {
		return parseJSONPush(data)
	}
	return parsePush(data)
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
