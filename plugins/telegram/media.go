package main

import (
	"bytes"
	"encoding/json"
	"mime"
	"mime/multipart"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
)

// Telegram's limits on uploads and captions.
const (
	// MaxUpload is the largest file a bot may upload (multipart/form-data).
	MaxUpload = 50 << 20
	// MaxPhoto is the largest photo sendPhoto takes; a larger image goes as a document.
	MaxPhoto = 10 << 20
	// MaxCaption is the longest caption, in UTF-16 code units. A longer text is sent as a
	// message of its own right after the file (see sendMedia).
	MaxCaption = 1024
)

// uploadBudget bounds one send with an attachment: the upload (and a fallback or a follow-up
// text). Uploads take longer than texts; it stays under the host's default 10 s deadline.
const uploadBudget = 7 * time.Second

// uploadMethod is the Bot API method and file field for an attachment: sendPhoto for images
// (up to MaxPhoto), sendVoice, sendAudio, sendVideo, and sendDocument for everything else.
func uploadMethod(att *abi.Attachment) (method, field string) {
	switch {
	case att.Kind == abi.AttachImage && len(att.Data) <= MaxPhoto:
		return "sendPhoto", "photo"
	case att.Kind == abi.AttachVoice:
		return "sendVoice", "voice"
	case att.Kind == abi.AttachAudio:
		return "sendAudio", "audio"
	case att.Kind == abi.AttachVideo:
		return "sendVideo", "video"
	}
	return "sendDocument", "document"
}

// inlineKeyboard is reply_markup for buttons: callback_data is the button's id. Up to three
// buttons share a row (an approval's yes / no); more get a row each.
type inlineKeyboard struct {
	Rows [][]inlineButton `json:"inline_keyboard"`
}

type inlineButton struct {
	Text         string `json:"text"`
	CallbackData string `json:"callback_data"`
}

// keyboard builds reply_markup for buttons, or explains why they cannot be shown.
func keyboard(buttons []abi.Button) (*inlineKeyboard, string) {
	if len(buttons) == 0 {
		return nil, ""
	}
	if len(buttons) > 100 {
		return nil, "Telegram shows at most 100 buttons under a message"
	}
	k := &inlineKeyboard{}
	for i, b := range buttons {
		if !validButtonID(b.ID) {
			return nil, "button id " + strconv.Quote(b.ID) + " is not 1-64 bytes of [A-Za-z0-9:_-]"
		}
		if strings.TrimSpace(b.Label) == "" {
			return nil, "button " + strconv.Quote(b.ID) + " has no label"
		}
		btn := inlineButton{Text: b.Label, CallbackData: b.ID}
		if len(buttons) <= 3 {
			if i == 0 {
				k.Rows = append(k.Rows, nil)
			}
			k.Rows[0] = append(k.Rows[0], btn)
		} else {
			k.Rows = append(k.Rows, []inlineButton{btn})
		}
	}
	return k, ""
}

// sendMedia uploads msg's one attachment with its Text as caption, within uploadBudget. The
// outcome is sendFailure's with duplicates: once the upload may have reached Telegram (a reset,
// no answer in time, a 5xx) the result is uncertain and the host never repeats it.
//
// A Text longer than MaxCaption (but within MaxText) is not cut: the file goes without a
// caption, then the Text as a message of its own; both message ids are returned. If that
// second message fails after the file was sent, the result is uncertain (repeating would post
// the file twice) and says so.
func sendMedia(a *api, b budget, msg *abi.OutboundMessage, markup *inlineKeyboard) *abi.SendResult {
	if len(msg.Attachments) > 1 {
		return failed(abi.SendPermanent, "too_many_attachments", strconv.Itoa(len(msg.Attachments))+
			" attachments in one message; Telegram sends one file per message; not sent")
	}
	att := &msg.Attachments[0]
	switch {
	case len(att.Data) == 0:
		return failed(abi.SendPermanent, "empty_file", "the attachment has no bytes; not sent")
	case len(att.Data) > MaxUpload:
		return failed(abi.SendPermanent, abi.CodeTooLarge, "a file of "+strconv.Itoa(len(att.Data))+
			" bytes exceeds Telegram's upload limit of "+strconv.Itoa(MaxUpload)+" bytes; not sent")
	case utf16Len(msg.Text) > MaxText:
		return failed(abi.SendPermanent, "message_too_long", "caption of "+strconv.Itoa(utf16Len(msg.Text))+
			" UTF-16 units exceeds Telegram's "+strconv.Itoa(MaxText)+" for a message; not sent")
	}
	caption, followUp := msg.Text, ""
	if utf16Len(caption) > MaxCaption {
		caption, followUp = "", msg.Text
	}
	u := upload{ChatID: msg.ChatID, Caption: caption, Att: att}
	if msg.ThreadID != generalTopic {
		u.Thread = threadParam(a.c, msg.ThreadID)
	}
	if id, err := strconv.ParseInt(msg.ReplyTo, 10, 64); err == nil && id > 0 {
		u.Reply = &replyParameters{MessageID: id, AllowSendingWithoutReply: true}
	}
	if followUp == "" {
		u.Markup = markup // the buttons go under the last message
	}
	method, field := uploadMethod(att)
	r, err := a.upload(b, method, field, &u)
	var moved *string
	if err == nil && !r.OK && u.Thread != 0 && r.is("message thread not found") {
		a.c.Log(abi.LevelWarn, "topic not found; sending without message_thread_id", "chat_id", msg.ChatID, "thread_id", msg.ThreadID)
		u.Thread = 0
		none := ""
		moved = &none
		r, err = a.upload(b, method, field, &u)
	}
	if err == nil && !r.OK && r.Status == 400 && method == "sendPhoto" &&
		(r.is("photo_invalid_dimensions") || r.is("image_process_failed") || r.is("photo_ext_invalid")) {
		// Refused before anything was posted: Telegram takes the same bytes as a document.
		a.c.Log(abi.LevelInfo, "Telegram refused the image as a photo; sending it as a document", "description", r.describe())
		method, field = "sendDocument", "document"
		r, err = a.upload(b, method, field, &u)
	}
	if err != nil && abi.CodeOf(err) == abi.CodeTooLarge && strings.Contains(err.Error(), "request body") {
		// The host's egress refused the body before sending it.
		return failed(abi.SendPermanent, abi.CodeTooLarge, a.scrub(err.Error())+"; not sent")
	}
	if res := sendFailure(a, r, err, true); res != nil {
		return res
	}
	ids := sentID(r)
	if followUp == "" {
		return &abi.SendResult{MessageIDs: ids, ThreadID: moved}
	}
	p := sendMessageParams{ChatID: msg.ChatID, MessageThreadID: u.Thread, Text: followUp, ReplyMarkup: markup}
	r2, err := a.within(b, "sendMessage", p)
	if res := sendFailure(a, r2, err, true); res != nil {
		res.Error.Kind = abi.SendUncertain
		res.Error.Message = "the file was sent (" + method + ", message " + strings.Join(ids, ",") +
			"), but its text, too long for a caption, failed as the following message: " + res.Error.Message
		return res
	}
	return &abi.SendResult{MessageIDs: append(ids, sentID(r2)...), ThreadID: moved}
}

// upload is one multipart send of a file.
type upload struct {
	ChatID  string
	Thread  int64
	Caption string
	Reply   *replyParameters
	Markup  *inlineKeyboard
	Att     *abi.Attachment
}

// upload POSTs u to method as multipart/form-data, the file in field, with what is left of b.
func (a *api) upload(b budget, method, field string, u *upload) (*reply, error) {
	t, ok := b.timeout(b.left())
	if !ok {
		return nil, errNoTime(method)
	}
	body, ctype, err := u.encode(field)
	if err != nil {
		return nil, abi.Errorf(abi.CodeInternal, "%s: encode the upload: %v", method, err)
	}
	return a.post(method, ctype, body, t)
}

// encode builds the multipart body.
func (u *upload) encode(field string) ([]byte, string, error) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	put := func(k, v string) {
		if v != "" {
			w.WriteField(k, v)
		}
	}
	put("chat_id", u.ChatID)
	if u.Thread != 0 {
		put("message_thread_id", strconv.FormatInt(u.Thread, 10))
	}
	put("caption", u.Caption)
	if u.Reply != nil {
		raw, _ := json.Marshal(u.Reply)
		put("reply_parameters", string(raw))
	}
	if u.Markup != nil {
		raw, _ := json.Marshal(u.Markup)
		put("reply_markup", string(raw))
	}
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", mime.FormatMediaType("form-data", map[string]string{"name": field, "filename": fileName(u.Att)}))
	ct := u.Att.MIMEType
	if _, _, err := mime.ParseMediaType(ct); err != nil || ct == "" {
		ct = "application/octet-stream"
	}
	h.Set("Content-Type", ct)
	part, err := w.CreatePart(h)
	if err != nil {
		return nil, "", err
	}
	part.Write(u.Att.Data)
	if err := w.Close(); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), w.FormDataContentType(), nil
}

// fileName is the name the file is uploaded under: the attachment's own (without any path,
// control characters or quotes), else one made from its kind and type.
func fileName(att *abi.Attachment) string {
	name := att.Name
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	name = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '"' {
			return -1
		}
		return r
	}, name)
	if strings.Trim(name, ". ") != "" {
		return name
	}
	ext := ""
	if exts, _ := mime.ExtensionsByType(att.MIMEType); len(exts) > 0 {
		ext = exts[0]
	}
	switch att.MIMEType {
	case "image/jpeg":
		ext = ".jpg"
	case "audio/ogg":
		ext = ".ogg"
	}
	kind := att.Kind
	if kind == "" {
		kind = "file"
	}
	return kind + ext
}
