package console

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/internal/demo"
)

// maxSay caps one chat message typed in the console.
const maxSay = 8 << 10

// chatHistory is how many messages the chat page shows when it loads.
const chatHistory = 200

// chatLine is one chat message as the page and its event stream show it.
type chatLine struct {
	Seq      int64  `json:"seq"`
	Time     string `json:"time"` // UTC, HH:MM:SS
	FromHost bool   `json:"from_host"`
	Text     string `json:"text"`
	Part     int    `json:"part,omitempty"`
	Parts    int    `json:"parts,omitempty"`
	Via      string `json:"via,omitempty"`  // how it came in, when not typed here: "/demo/inbox"
	User     string `json:"user,omitempty"` // who said it, when not the chat's own user
}

func lineOf(m demo.Message) chatLine {
	return chatLine{Seq: m.Seq, Time: m.At.UTC().Format("15:04:05"), FromHost: m.FromHost, Text: m.Text, Part: m.Part, Parts: m.Parts,
		Via: m.Via, User: m.UserID}
}

// chatSession is the session the demo chat is in, as the page's header and the stream's
// session events show it.
type chatSession struct {
	ID        string `json:"id"`
	CreatedBy string `json:"created_by"`
	ParentID  string `json:"parent_id,omitempty"`
	// Change says how the chat got here from the session shown before (stream events only).
	Change     string `json:"change,omitempty"`
	Generation int64  `json:"generation"`
	Started    string `json:"started"`
	Messages   int    `json:"messages"`
}

type chatView struct {
	Enabled bool
	Name    string
	Key     string
	Lines   []chatLine
	After   int64
	Epoch   string // the chat's numbering (demo.Chat.Epoch)
	Session *chatSession
	Error   string
	Text    string // what the operator typed, kept when sending failed
}

func (c *Console) chatPage(w http.ResponseWriter, r *http.Request, s *login) {
	c.showChat(w, r, s, http.StatusOK, "", "")
}

func (c *Console) showChat(w http.ResponseWriter, r *http.Request, s *login, status int, problem, text string) {
	v := chatView{Enabled: c.Chat != nil, Name: c.ChatName, Key: c.ChatKey, Error: problem, Text: text}
	if c.Chat != nil {
		msgs, _ := c.Chat.Since(0)
		if len(msgs) > chatHistory {
			msgs = msgs[len(msgs)-chatHistory:]
		}
		for _, m := range msgs {
			v.Lines = append(v.Lines, lineOf(m))
			v.After = m.Seq
		}
		v.Epoch = c.Chat.Epoch()
		ctx, cancel := pageCtx(r)
		defer cancel()
		v.Session = c.chatSession(ctx)
	}
	c.render(w, r, status, "chat", s, "Chat", v)
}

// chatSession returns the demo chat's current session, or nil before its first message.
func (c *Console) chatSession(ctx context.Context) *chatSession {
	if c.ChatKey == "" || c.Sessions == nil {
		return nil
	}
	route, ok, err := c.Sessions.Current(ctx, c.ChatKey)
	if err != nil || !ok {
		return nil
	}
	info, err := c.Sessions.Session(ctx, route.SessionID)
	if err != nil {
		return nil
	}
	return &chatSession{ID: info.ID, CreatedBy: info.CreatedBy, ParentID: info.ParentID, Generation: route.Generation,
		Started: info.StartedAt.UTC().Format("15:04:05"), Messages: info.Messages}
}

// chatPost sends what the operator typed into the demo chat. The page's script asks for JSON
// (Accept: application/json) and stays put; without script the form posts and the page reloads.
func (c *Console) chatPost(w http.ResponseWriter, r *http.Request, s *login) {
	asJSON := strings.Contains(r.Header.Get("Accept"), "application/json")
	answer := func(status int, problem, text string) {
		if asJSON {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			json.NewEncoder(w).Encode(map[string]any{"ok": problem == "", "error": problem})
			return
		}
		if problem == "" {
			http.Redirect(w, r, Prefix+"chat", http.StatusSeeOther)
			return
		}
		c.showChat(w, r, s, status, problem, text)
	}
	if c.Chat == nil {
		answer(http.StatusNotFound, "the demo platform is off", "")
		return
	}
	text := strings.TrimSpace(r.PostFormValue("text"))
	switch {
	case text == "":
		answer(http.StatusBadRequest, "type a message first", "")
		return
	case len(text) > maxSay:
		answer(http.StatusRequestEntityTooLarge, "the message is over "+strconv.Itoa(maxSay)+" bytes", text)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	if err := c.Chat.Say(ctx, text); err != nil {
		c.Log.Warn("console: chat message not accepted", "error", err)
		answer(http.StatusBadGateway, err.Error(), text)
		return
	}
	answer(http.StatusOK, "", "")
}

// chatEvents streams the chat: first an "epoch" event naming the chat's numbering, then a
// "message" event per message (its id is the message's seq) and a "session" event whenever the
// chat moves to another session (/new, /branch, /compress, /resume, an automatic reset). A page
// that knew another epoch (?epoch=, of a host since restarted) gets every message from the first.
func (c *Console) chatEvents(w http.ResponseWriter, r *http.Request, s *login) {
	if c.Chat == nil {
		http.Error(w, "the demo platform is off", http.StatusNotFound)
		return
	}
	st := startStream(w)
	after := resumeFrom(r)
	epoch := c.Chat.Epoch()
	if e := r.URL.Query().Get("epoch"); e != "" && e != epoch {
		after = 0
	}
	if st.send("epoch", "", map[string]string{"epoch": epoch}) != nil {
		return
	}
	shown := r.URL.Query().Get("session") // the session the page was rendered with
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	quiet := time.Now()
	for c.logins.alive(s) {
		msgs, changed := c.Chat.Since(after)
		for _, m := range msgs {
			if st.send("message", strconv.FormatInt(m.Seq, 10), lineOf(m)) != nil {
				return
			}
			after, quiet = m.Seq, time.Now()
		}
		if cur := c.chatSession(r.Context()); cur != nil && cur.ID != shown {
			cur.Change = change(shown, cur)
			if st.send("session", "", cur) != nil {
				return
			}
			shown, quiet = cur.ID, time.Now()
		}
		if time.Since(quiet) > keepAlive {
			if st.ping() != nil {
				return
			}
			quiet = time.Now()
		}
		select {
		case <-changed:
		case <-tick.C:
		case <-r.Context().Done():
			return
		case <-c.done:
			return
		}
	}
}

// change says how the chat moved from session prev to s.
func change(prev string, s *chatSession) string {
	switch {
	case prev == "":
		return "Conversation started"
	case s.ParentID == prev && s.CreatedBy == "compression":
		return "Compressed: the conversation continues"
	case s.ParentID == prev && s.CreatedBy == "branch":
		return "Branched: a copy of the conversation continues"
	case s.ParentID == prev:
		return "New conversation"
	default:
		return "Switched to another conversation"
	}
}
