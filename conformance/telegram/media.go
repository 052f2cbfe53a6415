package telegram

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/png"
	"strings"

	"github.com/hermes-host/hermes-host/abi"
	tgt "github.com/hermes-host/hermes-host/conformance/telegramtest"
)

// --- attachments and buttons (ABI 1.2, by capability) ---

const mediaPrivate = int64(111012)

// checkMedia (capability attachments): a photo update is a message event with the largest
// size's file_id as its attachment; fetch returns the file's bytes and refuses a file over
// the Bot API's 20 MB before downloading; a photo goes out as a multipart sendPhoto with its
// bytes and caption; an upload answered 502 after it was posted is uncertain, not resent.
func (s *suite) checkMedia() (string, error) {
	bot := s.bot(profPoll)
	var buf bytes.Buffer
	png.Encode(&buf, image.NewRGBA(image.Rect(0, 0, 32, 24)))
	img := buf.Bytes()
	u, f := bot.Media(ada.ID, ada, tgt.Attach{Data: img}, "what is this?")
	evs, err := s.pollFor(profPoll, u)
	if err != nil {
		return "", err
	}
	ev := evs[0]
	if kindOf(ev) != abi.EventMessage || len(ev.Attachments) != 1 || ev.Attachments[0].Ref != f.ID || ev.Attachments[0].Kind != abi.AttachImage {
		return "", fmt.Errorf("photo update mapped to %s with attachments %+v, want one image with file_id %s (the largest size)",
			kindOf(ev), ev.Attachments, f.ID)
	}
	got, err := s.p.Fetch(s.ctx, profPoll, ev.Attachments[0], 1<<20)
	if err != nil {
		return "", fmt.Errorf("fetch of the photo: %w", err)
	}
	if !bytes.Equal(got.Data, img) {
		return "", fmt.Errorf("fetch of the photo returned %d bytes, not the %d of the file", len(got.Data), len(img))
	}
	downloads := len(s.tg.Downloads())
	big := s.tg.PutFile(tgt.File{Data: []byte("x"), Size: 25 << 20})
	if _, err := s.p.Fetch(s.ctx, profPoll, abi.Attachment{Kind: abi.AttachDocument, Ref: big.ID, Size: 25 << 20}, 100<<20); abi.CodeOf(err) != abi.CodeTooLarge {
		return "", fmt.Errorf("fetch of a 25 MB file answered %v, want too_large", err)
	}
	if n := len(s.tg.Downloads()); n != downloads {
		return "", errors.New("a file over the Bot API's 20 MB limit was downloaded")
	}

	s.tg.AddPrivate(tgt.Person(mediaPrivate, "Media"))
	photo := abi.OutboundMessage{ChatID: itoa(mediaPrivate), Text: "a chart",
		Attachments: []abi.Attachment{{Kind: abi.AttachImage, MIMEType: "image/png", Name: "chart.png", Data: img}}}
	if _, err := s.sendOK(photo); err != nil {
		return "", err
	}
	sent := s.tg.Sent(mediaPrivate, 0)
	if len(sent) != 1 || !strings.EqualFold(sent[0].Method, "sendPhoto") || sent[0].File == nil ||
		!bytes.Equal(sent[0].File.Data, img) || sent[0].Message.Caption != "a chart" {
		return "", fmt.Errorf("sent %+v, want one sendPhoto with the bytes and caption", sent)
	}
	s.tg.InjectFault("sendPhoto", tgt.ServerError(502).AfterEffect().ForChat(mediaPrivate))
	e, err := s.sendFail(photo)
	if err != nil {
		return "", err
	}
	if e.Kind != abi.SendUncertain {
		return "", fmt.Errorf("an upload answered 502 after it was posted is %s, want uncertain", e.Kind)
	}
	return "photo in, fetched, 25 MB refused undownloaded, sendPhoto out, 502 after upload uncertain", nil
}

// checkButtons (capability buttons): buttons become an inline keyboard with the ids as
// callback_data; a press comes back as a callback event for the message, from the presser,
// and is answered (answerCallbackQuery).
func (s *suite) checkButtons() (string, error) {
	bot := s.bot(profSend)
	s.tg.AddPrivate(tgt.Person(mediaPrivate, "Media"))
	ids, err := s.sendOK(abi.OutboundMessage{ChatID: itoa(mediaPrivate), Text: "approve?",
		Buttons: []abi.Button{{ID: "approve:1", Label: "Approve"}, {ID: "deny:1", Label: "Deny"}}})
	if err != nil {
		return "", err
	}
	if len(ids) != 1 {
		return "", fmt.Errorf("message_ids %v", ids)
	}
	presser := tgt.Person(mediaPrivate, "Media")
	u, err := bot.Press(mediaPrivate, parseIDOr(ids[0]), presser, "deny:1")
	if err != nil {
		m, _ := s.tg.Message(mediaPrivate, parseIDOr(ids[0]))
		return "", fmt.Errorf("%v (reply_markup %s)", err, m.ReplyMarkup)
	}
	evs, err := s.pollFor(profSend, u)
	if err != nil {
		return "", err
	}
	ev := evs[0]
	if ev.Kind != abi.EventCallback || ev.CallbackID != "deny:1" || ev.Source.MessageID != ids[0] || ev.Source.UserID != itoa(presser.ID) {
		return "", fmt.Errorf("press mapped to %+v, want a callback event deny:1 for message %s from %d", ev, ids[0], presser.ID)
	}
	answered := false
	for _, a := range s.tg.Answers() {
		answered = answered || a.QueryID == u.CallbackQuery.ID
	}
	if !answered {
		return "", errors.New("the press was not answered (answerCallbackQuery): the user's button keeps spinning")
	}
	return "inline keyboard, callback event, answered", nil
}
