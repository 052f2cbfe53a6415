package slacktest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"unicode/utf8"
)

// Block Kit limits the fake enforces on chat.postMessage and chat.update (invalid_blocks).
const (
	maxBlocks         = 50
	maxSectionText    = 3000
	maxButtonText     = 75
	maxActionElements = 25
	maxActionID       = 255
	maxButtonValue    = 2000
)

// Button is a button of a posted message's actions blocks.
type Button struct {
	BlockID  string `json:"block_id,omitempty"`
	ActionID string `json:"action_id"`
	Value    string `json:"value"`
	Text     string `json:"-"`
	Style    string `json:"style,omitempty"`
}

type rawBlock struct {
	Type    string `json:"type"`
	BlockID string `json:"block_id"`
	Text    *struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"text"`
	Elements []struct {
		Type string `json:"type"`
		Text struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"text"`
		ActionID string `json:"action_id"`
		Value    string `json:"value"`
		Style    string `json:"style"`
	} `json:"elements"`
}

// checkBlocks validates blocks (a JSON array) as Slack does the parts the fake models: at most
// 50 blocks; a section's text at most 3,000 characters; an actions block of 1 to 25 elements,
// buttons with plain_text of at most 75 characters, an action_id (unique in the message) and
// value within their lengths, style primary or danger. It returns the problems, as
// invalid_blocks' messages.
func checkBlocks(raw string) []string {
	var blocks []rawBlock
	if err := json.Unmarshal([]byte(raw), &blocks); err != nil {
		return []string{"[ERROR] blocks is not a JSON array of blocks"}
	}
	var out []string
	bad := func(i int, format string, a ...any) {
		out = append(out, fmt.Sprintf("[ERROR] block %d: ", i)+fmt.Sprintf(format, a...))
	}
	if len(blocks) > maxBlocks {
		out = append(out, fmt.Sprintf("[ERROR] no more than %d items allowed [json-pointer:/blocks]", maxBlocks))
	}
	seen := map[string]bool{}
	for i, b := range blocks {
		switch b.Type {
		case "section":
			if b.Text == nil || b.Text.Text == "" {
				bad(i, "a section needs text")
			} else if n := utf8.RuneCountInString(b.Text.Text); n > maxSectionText {
				bad(i, "section text of %d characters, more than %d", n, maxSectionText)
			}
		case "actions":
			if len(b.Elements) == 0 || len(b.Elements) > maxActionElements {
				bad(i, "an actions block holds 1 to %d elements, not %d", maxActionElements, len(b.Elements))
			}
			for _, e := range b.Elements {
				switch {
				case e.Type != "button":
					continue
				case e.Text.Type != "plain_text" || e.Text.Text == "" || utf8.RuneCountInString(e.Text.Text) > maxButtonText:
					bad(i, "a button's text must be plain_text of 1 to %d characters", maxButtonText)
				case e.ActionID == "" || len(e.ActionID) > maxActionID || seen[e.ActionID]:
					bad(i, "action_id %q missing, too long or not unique", e.ActionID)
				case len(e.Value) > maxButtonValue:
					bad(i, "value longer than %d characters", maxButtonValue)
				case e.Style != "" && e.Style != "primary" && e.Style != "danger":
					bad(i, "style %q is not primary or danger", e.Style)
				}
				seen[e.ActionID] = true
			}
		case "":
			bad(i, "a block without a type")
		}
	}
	return out
}

// Buttons returns the buttons of m's actions blocks, in order.
func (m Message) Buttons() []Button {
	var blocks []rawBlock
	if json.Unmarshal([]byte(m.Blocks), &blocks) != nil {
		return nil
	}
	var out []Button
	for _, b := range blocks {
		if b.Type != "actions" {
			continue
		}
		for _, e := range b.Elements {
			if e.Type == "button" {
				out = append(out, Button{BlockID: b.BlockID, ActionID: e.ActionID, Value: e.Value, Text: e.Text.Text, Style: e.Style})
			}
		}
	}
	return out
}

// SectionTexts returns the texts of m's section blocks, in order.
func (m Message) SectionTexts() []string {
	var blocks []rawBlock
	if json.Unmarshal([]byte(m.Blocks), &blocks) != nil {
		return nil
	}
	var out []string
	for _, b := range blocks {
		if b.Type == "section" && b.Text != nil {
			out = append(out, b.Text.Text)
		}
	}
	return out
}

// Interaction is an interactivity payload of type block_actions: a person pressed a button of
// a message, as Slack POSTs it to the Interactivity Request URL (form field payload) or sends it
// in a Socket Mode "interactive" frame.
type Interaction struct {
	Type                string          `json:"type"` // "block_actions"
	Token               string          `json:"token"`
	APIAppID            string          `json:"api_app_id"`
	TriggerID           string          `json:"trigger_id"`
	User                InteractionUser `json:"user"`
	Team                InteractionTeam `json:"team"`
	Enterprise          *struct{}       `json:"enterprise"`
	IsEnterpriseInstall bool            `json:"is_enterprise_install"`
	Container           Container       `json:"container"`
	Channel             InteractionChan `json:"channel"`
	Message             *Event          `json:"message,omitempty"`
	State               map[string]any  `json:"state"`
	ResponseURL         string          `json:"response_url"`
	Actions             []Action        `json:"actions"`
}

// InteractionUser is who pressed.
type InteractionUser struct {
	ID       string `json:"id"`
	Username string `json:"username"`
	Name     string `json:"name"`
	TeamID   string `json:"team_id"`
}

// InteractionTeam is the workspace.
type InteractionTeam struct {
	ID     string `json:"id"`
	Domain string `json:"domain"`
}

// InteractionChan is the channel of the message.
type InteractionChan struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// Container is where the pressed element is: a message.
type Container struct {
	Type        string `json:"type"` // "message"
	MessageTS   string `json:"message_ts"`
	ChannelID   string `json:"channel_id"`
	IsEphemeral bool   `json:"is_ephemeral"`
	ThreadTS    string `json:"thread_ts,omitempty"`
}

// Action is the element pressed.
type Action struct {
	ActionID string `json:"action_id"`
	BlockID  string `json:"block_id"`
	Text     struct {
		Type  string `json:"type"`
		Text  string `json:"text"`
		Emoji bool   `json:"emoji"`
	} `json:"text"`
	Value    string `json:"value"`
	Style    string `json:"style,omitempty"`
	Type     string `json:"type"` // "button"
	ActionTS string `json:"action_ts"`
}

// PressButton builds the block_actions payload of user pressing the button actionID of msg (a
// message the bot posted with blocks), or fails if msg has no such button.
func (t *Team) PressButton(user string, msg Message, actionID string) (Interaction, error) {
	var btn *Button
	for _, b := range msg.Buttons() {
		if b.ActionID == actionID {
			btn = &b
			break
		}
	}
	if btn == nil {
		return Interaction{}, fmt.Errorf("slacktest: message %s has no button %q", msg.TS, actionID)
	}
	s := t.s
	s.mu.Lock()
	s.interactSeq++
	n := s.interactSeq
	name := t.users[user]
	chName := ""
	if c := t.channels[msg.Channel]; c != nil {
		chName = c.name
	}
	now := s.cfg.clock.Now()
	s.mu.Unlock()
	a := Action{ActionID: btn.ActionID, BlockID: btn.BlockID, Value: btn.Value, Style: btn.Style, Type: "button",
		ActionTS: strconv.FormatInt(now.Unix(), 10) + "." + fmt.Sprintf("%06d", n)}
	a.Text.Type, a.Text.Text, a.Text.Emoji = "plain_text", btn.Text, true
	ev := Event{Type: "message", User: msg.User, BotID: msg.BotID, AppID: DefaultAppID, Text: msg.Text, TS: msg.TS,
		ThreadTS: msg.ThreadTS, Team: t.ID}
	return Interaction{
		Type: "block_actions", Token: VerificationToken, APIAppID: DefaultAppID,
		TriggerID: fmt.Sprintf("%d.%d.hermestrigger%d", now.Unix(), n, n),
		User:      InteractionUser{ID: user, Username: name, Name: name, TeamID: t.ID},
		Team:      InteractionTeam{ID: t.ID, Domain: "hermes-test"},
		Container: Container{Type: "message", MessageTS: msg.TS, ChannelID: msg.Channel, ThreadTS: msg.ThreadTS},
		Channel:   InteractionChan{ID: msg.Channel, Name: chName}, Message: &ev, State: map[string]any{"values": map[string]any{}},
		ResponseURL: fmt.Sprintf("https://hooks.slack.com/actions/%s/%d/hermes", t.ID, n),
		Actions:     []Action{a},
	}, nil
}

// SetInteractivityURL sets the Interactivity Request URL ("": the Events Request URL, which is
// where a Slack app whose adapter tells the two apart by their bodies points both).
func (s *Server) SetInteractivityURL(u string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.interactURL = u
}

// Interact POSTs p to the Interactivity Request URL once, as Slack does when a button is
// pressed: application/x-www-form-urlencoded, payload=<JSON>, signed as events are. Slack does
// not retry interactivity requests; the user sees an error without a 200 within 3 s.
func (s *Server) Interact(p Interaction) (Delivery, error) { return s.interact(p, nil) }

// ForgeInteraction sends p tampered with as f says (a bad signature, a stale timestamp...): it
// must be refused with a 401 and produce no event.
func (s *Server) ForgeInteraction(f Forgery, p Interaction) (Delivery, error) {
	return s.interact(p, &f)
}

func (s *Server) interact(p Interaction, f *Forgery) (Delivery, error) {
	s.mu.Lock()
	target := s.interactURL
	if target == "" {
		target = s.requestURL
	}
	s.mu.Unlock()
	if target == "" {
		return Delivery{}, errors.New("slacktest: no Interactivity Request URL set")
	}
	body := []byte(url.Values{"payload": {string(marshal(p))}}.Encode())
	form := func(h http.Header, b *[]byte) { h.Set("Content-Type", "application/x-www-form-urlencoded") }
	t := tamper(form)
	if f != nil {
		forge := s.forgeTamper(*f)
		t = func(h http.Header, b *[]byte) { form(h, b); forge(h, b) }
	}
	id := "interaction"
	if len(p.Actions) > 0 {
		id += ":" + p.Actions[0].ActionTS
	}
	d := s.attempt(target, id, body, 0, "", t)
	d.Reason = "block_actions"
	if f != nil {
		d.Reason = "forgery: " + f.String()
	}
	s.mu.Lock()
	s.deliveries = append(s.deliveries, d)
	s.changedLocked()
	s.mu.Unlock()
	return d, nil
}

// InteractSocket sends p in an "interactive" frame on a Socket Mode connection (Socket Mode
// must be on), resent like events until acknowledged by its envelope_id. It returns the id
// Acked and WaitAcked take.
func (s *Server) InteractSocket(p Interaction) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.socketMode {
		return "", errors.New("slacktest: Socket Mode is off")
	}
	s.interactSeq++
	id := fmt.Sprintf("In%09X", s.interactSeq)
	q := &pending{id: id, body: marshal(p), frameType: "interactive", started: true}
	s.envelopes[id] = q
	s.queue = append(s.queue, q)
	s.changedLocked()
	return id, nil
}
