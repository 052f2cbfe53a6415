package main

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/hermes-host/hermes-host/abi"
)

// This file turns decoded pushes into abi.InboundEvents. It is pure (no host calls), so it is
// unit-tested and fuzzed natively.

// Recall callbacks: a group message recalled (the ids are in recall_msg_seq_list), a private
// message withdrawn (the push's own msg_id / msg_seq name it).
const (
	callbackGroupRecall = "Group.CallbackAfterRecallMsg"
	callbackC2CRecall   = "C2C.CallbackAfterMsgWithDraw"
)

// mentionElemType is the elem_type of a TIMCustomElem that mentions a user ({text, user_id}).
const mentionElemType = 1002

// maxQuote bounds the quoted text carried into a message.
const maxQuote = 500

// mapOptions is what mapping needs besides the push.
type mapOptions struct {
	BotID string // the bot's own account: mentions of it address the bot; its messages are echoes
}

// recallTarget names a recalled message. Chat and user may be missing from the push (the caller
// looks them up among recent messages); Seq names the message when its id is missing.
type recallTarget struct {
	ChatType, ChatID, UserID string
	MsgID                    string
	Seq                      uint64
}

// mapped is what a push becomes: a message (or an observation), or recalls, or nothing (Skip
// says why).
type mapped struct {
	Event   *abi.InboundEvent
	Recalls []recallTarget
	Skip    string
	Seq     uint64 // the message's msg_seq, remembered for recalls that name only it
}

// mapPush maps one push.
func mapPush(p *push, o mapOptions) mapped {
	switch p.Callback {
	case callbackGroupRecall, callbackC2CRecall:
		return mapped{Recalls: recalls(p)}
	}
	if p.From == "" {
		return mapped{Skip: "push without from_account"}
	}
	if o.BotID != "" && p.From == o.BotID {
		return mapped{Skip: "the bot's own message"}
	}
	src := abi.Source{ChatType: abi.ChatDM, ChatID: p.From, ChatName: p.Nick, UserID: p.From, UserName: p.Nick}
	if p.GroupCode != "" {
		src.ChatType, src.ChatID, src.ChatName = abi.ChatGroup, p.GroupCode, p.GroupName
		if src.ChatName == "" {
			src.ChatName = p.GroupCode
		}
	}
	if src.UserName == "" {
		src.UserName = p.From
	}
	src.MessageID = p.MsgID
	if src.MessageID == "" {
		src.MessageID = p.MsgKey
	}
	text, mentioned, texts := renderBody(p.Body, o.BotID)
	text = slashCommand(text)
	if text == "" && !mentioned {
		return mapped{Skip: "message without content"}
	}
	ev := &abi.InboundEvent{ID: eventID(p), Kind: abi.EventMessage, Source: src, Text: text, Mentioned: mentioned || src.ChatType == abi.ChatDM}
	if p.Time > 0 && p.Time < 1<<40 {
		ev.UnixMs = int64(p.Time) * 1000
	}
	if id, quote := quoted(p.CloudCustomData); id != "" || quote != "" {
		ev.ReplyTo = id
		if quote != "" {
			ev.Text = "[quoting " + quote + "]\n" + ev.Text
		}
	}
	if src.ChatType == abi.ChatGroup && !mentioned {
		// Group messages not addressed to the bot are context, not turns, except the owner's
		// slash commands (a message of one text element that starts with "/").
		// The owner's commands count as addressed to the bot, so that the host's mention rule
		// (access groups' require_mention) agrees.
		owner := p.OwnerID != "" && p.From == p.OwnerID && texts == 1 && strings.HasPrefix(text, "/")
		if owner {
			ev.Mentioned = true
		} else {
			ev.Kind = abi.EventObserve
		}
	}
	return mapped{Event: ev, Seq: p.Seq}
}

// eventID deduplicates a push: its msg_id, else its msg_key, else what identifies the message
// otherwise (sender, sequence, random, time); "" when the push carries none of them.
func eventID(p *push) string {
	switch {
	case p.MsgID != "":
		return "msg:" + p.MsgID
	case p.MsgKey != "":
		return "msg:" + p.MsgKey
	case p.Seq != 0 || p.Random != 0 || p.Time != 0:
		return "msg:" + p.From + "/" + p.GroupCode + "/" + strconv.FormatUint(p.Seq, 10) + "/" +
			strconv.FormatUint(p.Random, 10) + "/" + strconv.FormatUint(p.Time, 10)
	}
	return ""
}

// recalls lists the messages a recall callback names.
func recalls(p *push) []recallTarget {
	base := recallTarget{ChatType: abi.ChatDM, ChatID: p.From, UserID: p.From}
	if p.GroupCode != "" {
		base.ChatType, base.ChatID = abi.ChatGroup, p.GroupCode
	}
	var out []recallTarget
	add := func(id string, seq uint64) {
		if id == "" && seq == 0 {
			return
		}
		t := base
		t.MsgID, t.Seq = id, seq
		out = append(out, t)
	}
	if p.Callback == callbackGroupRecall {
		for _, r := range p.Recalls {
			add(r.MsgID, r.Seq)
		}
	} else {
		id := p.MsgID
		if id == "" {
			id = p.MsgKey
		}
		add(id, p.Seq)
	}
	return out
}

// renderBody turns a message body into text: text elements verbatim, mentions of others as
// their text (mentions of the bot are dropped and reported), media and cards as bracketed
// placeholders. It also returns how many text elements there were.
func renderBody(body []element, botID string) (text string, mentioned bool, texts int) {
	var parts []string
	for _, el := range body {
		c := el.Content
		switch el.Type {
		case "TIMTextElem":
			texts++
			if c.Text != "" {
				parts = append(parts, c.Text)
			}
		case "TIMCustomElem":
			s, me := customText(c.Data, botID)
			mentioned = mentioned || me
			if s != "" {
				parts = append(parts, s)
			}
		case "TIMImageElem":
			parts = append(parts, "[image]")
		case "TIMSoundElem":
			parts = append(parts, "[voice message]")
		case "TIMVideoFileElem":
			parts = append(parts, "[video]")
		case "TIMFileElem":
			if c.FileName != "" {
				parts = append(parts, "[file: "+clip(c.FileName, 200)+"]")
			} else {
				parts = append(parts, "[file]")
			}
		case "TIMFaceElem":
			if face, ok := jsonObject(c.Data); ok && strings.TrimSpace(face.str("name")) != "" {
				parts = append(parts, "[emoji: "+clip(strings.TrimSpace(face.str("name")), 50)+"]")
			} else {
				parts = append(parts, "[emoji]")
			}
		case "":
		default:
			parts = append(parts, "["+clip(el.Type, 50)+"]")
		}
	}
	return strings.TrimSpace(strings.Join(parts, " ")), mentioned, texts
}

// customText renders a TIMCustomElem from its data JSON, and reports a mention of botID. Keys
// are read in any spelling (elem_type, ElemType, elemType), as for JSON pushes.
func customText(data, botID string) (string, bool) {
	if strings.TrimSpace(data) == "" {
		return "[custom message]", false
	}
	custom, ok := jsonObject(data)
	if !ok {
		return clip(data, 1000), false
	}
	switch custom.uint("elemtype") {
	case mentionElemType:
		user := custom.str("userid")
		if botID != "" && user == botID {
			return "", true
		}
		if t := custom.str("text"); t != "" {
			return t, false
		}
		return "@" + user, false
	case 1007: // a link card; content is JSON with the link
		if inner, ok := jsonObject(custom.str("content")); ok && inner.str("link") != "" {
			return "[link: " + clip(inner.str("link"), 500) + "]", false
		}
		return "[link]", false
	case 1009: // a forwarded WeChat chat record
		if t := custom.str("text"); t != "" {
			return clip(t, 1000), false
		}
		return "[chat record]", false
	case 1010: // a share card
		if link := custom.str("link"); link != "" {
			return "[share card: " + clip(custom.str("title"), 200) + " | " + clip(link, 500) + "]", false
		}
		return "[share card: " + clip(custom.str("title"), 200) + "]", false
	}
	return "[custom message]", false
}

// jsonObject decodes a JSON object with normalized keys.
func jsonObject(data string) (jsonObj, bool) {
	var raw any
	d := json.NewDecoder(strings.NewReader(data))
	d.UseNumber()
	if d.Decode(&raw) != nil {
		return nil, false
	}
	o, ok := normalize(raw).(jsonObj)
	return o, ok
}

// slashCommand turns a leading full-width slash (typed with a Chinese input method) into "/".
func slashCommand(text string) string {
	if rest, ok := strings.CutPrefix(text, "／"); ok {
		return "/" + rest
	}
	return text
}

// quoted reads a quote from cloud_custom_data: {"quote": {"id", "desc", "sender_nickname",
// "sender_id"}}. It returns the quoted message's id and "sender: text".
func quoted(cloudCustomData string) (id, quote string) {
	if cloudCustomData == "" {
		return "", ""
	}
	var d struct {
		Quote *struct {
			ID     json.RawMessage `json:"id"`
			Desc   string          `json:"desc"`
			Nick   string          `json:"sender_nickname"`
			Sender string          `json:"sender_id"`
		} `json:"quote"`
	}
	if json.Unmarshal([]byte(cloudCustomData), &d) != nil || d.Quote == nil {
		return "", ""
	}
	q := d.Quote
	var s string
	if json.Unmarshal(q.ID, &s) == nil {
		id = s
	} else if n := strings.TrimSpace(string(q.ID)); n != "" && n != "null" && strings.Trim(n, "0123456789") == "" {
		id = n
	}
	desc := strings.TrimSpace(q.Desc)
	if desc == "" {
		return strings.TrimSpace(id), ""
	}
	who := strings.TrimSpace(q.Nick)
	if who == "" {
		who = strings.TrimSpace(q.Sender)
	}
	if who != "" {
		desc = who + ": " + desc
	}
	return strings.TrimSpace(id), clip(desc, maxQuote)
}
