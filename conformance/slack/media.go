package slack

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/hermes-host/hermes-host/abi"
	st "github.com/hermes-host/hermes-host/conformance/slacktest"
)

// Checks of adapters that declare "attachments" (files in and out) and "buttons" (ABI 1.2).

// checkFilesIn: a shared file is the event's attachment, and fetch reads its bytes with the
// token of the file's workspace (the second workspace's file with the second token: with the
// first, Slack answers its sign-in page); past max_bytes it fails too_large.
func (s *suite) checkFilesIn() (string, error) {
	data := append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte("conformance"), 300)...)
	var errs []error
	for _, team := range []*st.Team{s.slack.Team(), s.slack.Team(secondTeam)} {
		p := team.ShareFile(general, ann, team.MentionText("look"), st.FileSpec{Name: "shot.png", Mimetype: "image/png", Data: data})
		if err := s.slack.WaitAcked(s.opts.Timeout, p.EventIDs...); err != nil {
			return "", err
		}
		ev, err := s.one("file_share in "+team.ID, p.TS)
		if err != nil {
			return "", err
		}
		if len(ev.Attachments) != 1 || ev.Attachments[0].Kind != abi.AttachImage || ev.Attachments[0].Ref == "" {
			errs = append(errs, fmt.Errorf("%s: attachments %+v, want one image with a ref", team.ID, ev.Attachments))
			continue
		}
		res, err := s.p.Fetch(s.ctx, profEvents, ev.Attachments[0], 1<<20)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: fetch: %w", team.ID, err))
		case !bytes.Equal(res.Data, data):
			errs = append(errs, fmt.Errorf("%s: fetch returned %d bytes, not the file's %d (a sign-in page?)", team.ID, len(res.Data), len(data)))
		}
		if _, err := s.p.Fetch(s.ctx, profEvents, ev.Attachments[0], 64); abi.CodeOf(err) != abi.CodeTooLarge {
			errs = append(errs, fmt.Errorf("%s: fetch past max_bytes: %v, want too_large", team.ID, err))
		}
	}
	return "attachments fetched with their workspace's token; too_large past max_bytes", errors.Join(errs...)
}

// checkFilesOut: a file sent goes through the three steps into the thread with its bytes, and
// an answer lost after files.completeUploadExternal is uncertain, not resent.
func (s *suite) checkFilesOut() (string, error) {
	team := s.slack.Team()
	root := team.Say(general, ann, "the report, please")
	doc := func(text string) abi.OutboundMessage {
		return abi.OutboundMessage{ChatType: abi.ChatGroup, ChatID: general, ThreadID: root.TS, Text: text,
			Attachments: []abi.Attachment{{Kind: abi.AttachDocument, MIMEType: "application/pdf", Name: "report.pdf", Data: []byte("%PDF-1.7 conformance")}}}
	}
	before := len(s.slack.Uploads())
	res, err := s.send(doc("the report"))
	if err != nil {
		return "", err
	}
	if res.Error != nil || len(res.MessageIDs) != 1 {
		return "", fmt.Errorf("send a file: %+v", res)
	}
	up := s.slack.Uploads()
	if len(up) != before+1 {
		return "", fmt.Errorf("%d uploads, want one (files.getUploadURLExternal, the upload, files.completeUploadExternal)", len(up)-before)
	}
	if f := up[len(up)-1]; string(f.Data) != "%PDF-1.7 conformance" || !f.Completed || f.Channel != general || f.ThreadTS != root.TS {
		return "", fmt.Errorf("upload %+v: want the bytes shared into the thread", f)
	}
	completes := len(s.slack.Requests("files.completeUploadExternal"))
	s.slack.InjectFault("files.completeUploadExternal", st.AfterEffect(st.ServerError(502)))
	res, err = s.send(doc("shared?"))
	if err != nil {
		return "", err
	}
	if n := len(s.slack.Requests("files.completeUploadExternal")) - completes; n != 1 {
		return "", fmt.Errorf("%d files.completeUploadExternal requests after a 502, want 1 (resent inside send)", n)
	}
	if res.Error == nil || res.Error.Kind != abi.SendUncertain {
		return "", fmt.Errorf("a 502 after files.completeUploadExternal: %+v, want uncertain (a retry would share it twice)", res.Error)
	}
	return "three steps into the thread; a lost answer after the share is uncertain", nil
}

// checkButtons: buttons are shown as Block Kit buttons carrying their ids; a signed press is a
// callback event for the message, and every forged press is refused with 401, recording nothing.
func (s *suite) checkButtons() (string, error) {
	team := s.slack.Team()
	res, err := s.send(abi.OutboundMessage{ChatType: abi.ChatGroup, ChatID: general, Text: "approve?",
		Buttons: []abi.Button{{ID: "approve:c1", Label: "Approve", Style: abi.ButtonPrimary}, {ID: "deny:c1", Label: "Deny", Style: abi.ButtonDanger}}})
	if err != nil {
		return "", err
	}
	if res.Error != nil || len(res.MessageIDs) != 1 {
		return "", fmt.Errorf("send with buttons: %+v", res)
	}
	var msg *st.Message
	for _, m := range s.slack.Posted(team.ID, general, "-") {
		if m.TS == res.MessageIDs[0] {
			msg = &m
		}
	}
	if msg == nil {
		return "", fmt.Errorf("no post %s", res.MessageIDs[0])
	}
	p, err := team.PressButton(ann, *msg, "deny:c1")
	if err != nil {
		return "", fmt.Errorf("%w (buttons %+v)", err, msg.Buttons())
	}
	var errs []error
	for _, f := range st.Forgeries() {
		if d, err := s.slack.ForgeInteraction(f, p); err != nil || d.Status != 401 {
			errs = append(errs, fmt.Errorf("forged press, %v: answered %d %v, want 401", f, d.Status, err))
		}
	}
	if evs := s.recorded(msg.TS); len(evs) > 0 {
		errs = append(errs, fmt.Errorf("a forged press was accepted as %s", evs[0].ID))
	}
	if d, err := s.slack.Interact(p); err != nil || !d.OK() {
		return "", fmt.Errorf("press answered %d %v %s, want a 2xx", d.Status, err, d.Err)
	}
	ev, err := s.one("the press", msg.TS)
	if err != nil {
		return "", err
	}
	if kindOf(ev) != abi.EventCallback || ev.CallbackID != "deny:c1" || ev.Source.UserID != ann || ev.Source.ScopeID != team.ID {
		errs = append(errs, fmt.Errorf("press recorded as %+v, want a callback deny:c1 from %s", ev, ann))
	}
	return "buttons carry their ids; a signed press is a callback; forgeries refused", errors.Join(errs...)
}
