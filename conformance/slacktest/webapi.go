package slacktest

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// methodError is a Web API refusal: HTTP 200 {"ok":false,"error":code}, with optional messages
// in response_metadata (as invalid_arguments carries).
type methodError struct {
	code       string
	messages   []string
	retryAfter int // seconds: answered as HTTP 429 with Retry-After
}

func (e *methodError) Error() string { return e.code }

func refuse(code string, messages ...string) *methodError {
	return &methodError{code: code, messages: messages}
}

// call is one Web API request being served.
type call struct {
	req  *Request
	team *Team // the bot token's team (nil for the app token)
	app  bool  // made with the app-level token
	json bool  // the parameters came in a JSON body
}

type method struct {
	app     bool // needs the app-level token (apps.*); others need a bot token
	handler func(s *Server, c *call) (apiResponse, *methodError)
}

var methods = map[string]method{
	"auth.test":                             {handler: (*Server).authTest},
	"chat.postMessage":                      {handler: (*Server).postMessage},
	"chat.update":                           {handler: (*Server).update},
	"assistant.threads.setStatus":           {handler: (*Server).setStatus},
	"assistant.threads.setTitle":            {handler: (*Server).setTitle},
	"assistant.threads.setSuggestedPrompts": {handler: (*Server).setSuggestedPrompts},
	"apps.connections.open":                 {app: true, handler: (*Server).connectionsOpen},
	"files.getUploadURLExternal":            {handler: (*Server).getUploadURLExternal},
	"files.completeUploadExternal":          {handler: (*Server).completeUploadExternal},
}

const maxBody = 16 << 20

// serveAPI serves POST (or GET) /api/<method>.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/api/")
	params, body, jsonBody, perr := readParams(r)
	rec := &Request{Method: name, Params: params, Header: r.Header.Clone(), Body: body, Time: s.cfg.clock.Now()}
	if auth := r.Header.Get("Authorization"); strings.HasPrefix(auth, "Bearer ") {
		rec.Token = strings.TrimPrefix(auth, "Bearer ")
	} else if !jsonBody {
		rec.Token = params["token"] // form and query only: a JSON body's token is not read
	}
	s.mu.Lock()
	s.requests = append(s.requests, rec)
	s.changedLocked()
	s.mu.Unlock()

	status, code := s.answerAPI(w, r, rec, perr, jsonBody)

	s.mu.Lock()
	rec.Status, rec.Error = status, code
	s.changedLocked()
	s.mu.Unlock()
}

// answerAPI serves one request and returns the status written (0 when cut) and the Slack error
// code answered ("" on success).
func (s *Server) answerAPI(w http.ResponseWriter, r *http.Request, rec *Request, perr error, jsonBody bool) (int, string) {
	var after *Fault
	if f, ok := s.takeFault(rec); ok {
		if !f.after {
			return s.apply(f, w, r, nil), f.code
		}
		after = &f
	}
	m, known := methods[rec.Method]
	if !known {
		return s.refuse(w, refuse("unknown_method"))
	}
	if perr != nil {
		return s.refuse(w, refuse("invalid_form_data"))
	}
	c := &call{req: rec, json: jsonBody}
	switch tok := rec.Token; {
	case tok == "":
		return s.refuse(w, refuse("not_authed"))
	case m.app && rec.Params["token"] != "" && r.Header.Get("Authorization") == "":
		// apps.connections.open reads the app token from the header only.
		return s.refuse(w, refuse("invalid_auth"))
	case tok == s.cfg.appToken:
		if !m.app {
			return s.refuse(w, refuse("not_allowed_token_type"))
		}
		c.app = true
	default:
		s.mu.Lock()
		c.team = s.tokens[tok]
		s.mu.Unlock()
		if c.team == nil {
			return s.refuse(w, refuse("invalid_auth"))
		}
		if m.app {
			return s.refuse(w, refuse("not_allowed_token_type"))
		}
	}
	res, merr := m.handler(s, c)
	if merr != nil {
		return s.refuse(w, merr)
	}
	if jsonBody && !strings.Contains(strings.ToLower(r.Header.Get("Content-Type")), "charset") {
		// Slack's nudge for JSON bodies without a charset.
		res["warning"] = "missing_charset"
		res["response_metadata"] = map[string]any{"warnings": []string{"missing_charset"}}
	}
	body := marshal(res)
	if after != nil {
		switch after.kind {
		case faultSlow:
			if !s.sleep(r.Context(), after.delay) {
				return 0, ""
			}
		case faultHold:
			if !s.hold(r) {
				return 0, ""
			}
		default:
			return s.apply(*after, w, r, body), after.code
		}
	}
	writeRaw(w, http.StatusOK, body)
	return http.StatusOK, ""
}

func (s *Server) refuse(w http.ResponseWriter, e *methodError) (int, string) {
	res := apiResponse{"ok": false, "error": e.code}
	if len(e.messages) > 0 {
		res["response_metadata"] = map[string]any{"messages": e.messages}
	}
	status := http.StatusOK
	if e.retryAfter > 0 {
		status = http.StatusTooManyRequests
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	writeRaw(w, status, marshal(res))
	return status, e.code
}

// readParams collects a request's parameters from its query string and its form-urlencoded or
// JSON body. JSON values other than strings keep their JSON text. jsonBody reports a JSON body.
func readParams(r *http.Request) (params map[string]string, body []byte, jsonBody bool, err error) {
	params = map[string]string{}
	for k, v := range r.URL.Query() {
		params[k] = v[0]
	}
	body, err = io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil || len(body) == 0 {
		return params, body, false, err
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch mt {
	case "application/json":
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(body, &obj); err != nil {
			return params, body, true, errors.New("invalid JSON")
		}
		for k, raw := range obj {
			var str string
			switch {
			case json.Unmarshal(raw, &str) == nil:
				params[k] = str
			case string(raw) == "null":
			default:
				params[k] = string(raw)
			}
		}
		return params, body, true, nil
	default: // Slack reads form-urlencoded bodies whatever the content type says
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return params, body, false, err
		}
		for k, v := range form {
			params[k] = v[0]
		}
		return params, body, false, nil
	}
}

func (s *Server) authTest(c *call) (apiResponse, *methodError) {
	t := c.team
	return ok(apiResponse{"url": "https://" + strings.ToLower(t.ID) + ".slack.com/", "team": t.Name, "user": "hermes",
		"team_id": t.ID, "user_id": t.BotUser, "bot_id": t.BotID, "is_enterprise_install": false}), nil
}

var tsRE = regexp.MustCompile(`^[0-9]{10}\.[0-9]{6}$`)

// postMessage serves chat.postMessage: channel (id) and text are required; thread_ts must name
// a message of the channel that can carry a thread; text longer than MaxTextLength characters
// is truncated, as Slack does.
func (s *Server) postMessage(c *call) (apiResponse, *methodError) {
	p := c.req.Params
	text := p["text"]
	if strings.TrimSpace(text) == "" && p["blocks"] == "" && p["attachments"] == "" {
		return nil, refuse("no_text")
	}
	s.mu.Lock()
	ch := c.team.channel(p["channel"])
	s.mu.Unlock()
	switch {
	case ch == nil:
		return nil, refuse("channel_not_found")
	case !ch.member:
		return nil, refuse("not_in_channel")
	}
	thread := p["thread_ts"]
	if thread != "" && !tsRE.MatchString(thread) {
		return nil, refuse("invalid_thread_ts", "[ERROR] "+thread+" is not a valid thread_ts")
	}
	if p["blocks"] != "" {
		if msgs := checkBlocks(p["blocks"]); len(msgs) > 0 {
			return nil, refuse("invalid_blocks", msgs...)
		}
	}
	if s.limiter != nil {
		if wait, ok := s.limiter.take(c.team.ID+"/"+ch.id, s.cfg.clock.Now()); !ok {
			return nil, &methodError{code: "ratelimited", retryAfter: max(1, int(math.Ceil(wait.Seconds())))}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if thread != "" {
		root := s.findLocked(c.team.ID, ch.id, thread)
		switch {
		case root == nil:
			return nil, refuse("thread_not_found")
		case root.System:
			return nil, refuse("cannot_reply_to_message")
		case root.ThreadTS != "":
			thread = root.ThreadTS // a reply's ts: the post joins that reply's thread
		}
	}
	m := &Message{Team: c.team.ID, Channel: ch.id, TS: s.nextTSLocked(), ThreadTS: thread, User: c.team.BotUser,
		BotID: c.team.BotID, Text: text, Token: c.req.Token, Blocks: p["blocks"], Time: s.cfg.clock.Now()}
	if utf8.RuneCountInString(text) > MaxTextLength {
		m.Text, m.Truncated = string([]rune(text)[:MaxTextLength]), true
	}
	s.messages = append(s.messages, m)
	s.changedLocked()
	if s.cfg.botEcho {
		s.echoLocked(c.team, ch, m)
	}
	msg := apiResponse{"type": "message", "user": m.User, "bot_id": m.BotID, "app_id": DefaultAppID, "text": m.Text, "ts": m.TS}
	if thread != "" {
		msg["thread_ts"] = thread
	}
	return ok(apiResponse{"channel": ch.id, "ts": m.TS, "message": msg}), nil
}

// findLocked returns the message ts of a channel, or nil. s.mu must be held.
func (s *Server) findLocked(team, channelID, ts string) *Message {
	for _, m := range s.messages {
		if m.Team == team && m.Channel == channelID && m.TS == ts {
			return m
		}
	}
	return nil
}

// update serves chat.update: only the bot's own messages can be edited.
func (s *Server) update(c *call) (apiResponse, *methodError) {
	p := c.req.Params
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := c.team.channel(p["channel"])
	if ch == nil {
		return nil, refuse("channel_not_found")
	}
	if strings.TrimSpace(p["text"]) == "" && p["blocks"] == "" {
		return nil, refuse("no_text")
	}
	m := s.findLocked(c.team.ID, ch.id, p["ts"])
	switch {
	case m == nil:
		return nil, refuse("message_not_found")
	case m.BotID != c.team.BotID:
		return nil, refuse("cant_update_message")
	}
	if p["blocks"] != "" {
		if msgs := checkBlocks(p["blocks"]); len(msgs) > 0 {
			return nil, refuse("invalid_blocks", msgs...)
		}
		m.Blocks = p["blocks"]
	}
	m.Edits = append(m.Edits, m.Text)
	m.Text = p["text"]
	s.changedLocked()
	return ok(apiResponse{"channel": ch.id, "ts": m.TS, "text": m.Text}), nil
}

// assistantArgs checks channel_id and thread_ts, which every assistant.threads method requires.
func (s *Server) assistantArgs(c *call) (*channel, *methodError) {
	p := c.req.Params
	if p["channel_id"] == "" || p["thread_ts"] == "" {
		var missing []string
		for _, k := range []string{"channel_id", "thread_ts"} {
			if p[k] == "" {
				missing = append(missing, "[ERROR] missing required field: "+k)
			}
		}
		return nil, refuse("invalid_arguments", missing...)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := c.team.channel(p["channel_id"])
	if ch == nil {
		return nil, refuse("channel_not_found")
	}
	return ch, nil
}

func (s *Server) setStatus(c *call) (apiResponse, *methodError) {
	ch, err := s.assistantArgs(c)
	if err != nil {
		return nil, err
	}
	p := c.req.Params
	if _, present := p["status"]; !present {
		return nil, refuse("invalid_arguments", "[ERROR] missing required field: status")
	}
	st := Status{Team: c.team.ID, Channel: ch.id, ThreadTS: p["thread_ts"], Status: p["status"], Time: s.cfg.clock.Now()}
	if raw := p["loading_messages"]; raw != "" {
		if json.Unmarshal([]byte(raw), &st.LoadingMessages) != nil {
			st.LoadingMessages = strings.Split(raw, ",")
		}
		if len(st.LoadingMessages) > 10 {
			return nil, refuse("invalid_arguments", "[ERROR] loading_messages: no more than 10 items allowed")
		}
	}
	s.mu.Lock()
	s.statuses = append(s.statuses, st)
	s.changedLocked()
	s.mu.Unlock()
	return ok(nil), nil
}

func (s *Server) setTitle(c *call) (apiResponse, *methodError) {
	if _, err := s.assistantArgs(c); err != nil {
		return nil, err
	}
	if c.req.Params["title"] == "" {
		return nil, refuse("invalid_arguments", "[ERROR] missing required field: title")
	}
	return ok(nil), nil
}

func (s *Server) setSuggestedPrompts(c *call) (apiResponse, *methodError) {
	if _, err := s.assistantArgs(c); err != nil {
		return nil, err
	}
	if c.req.Params["prompts"] == "" {
		return nil, refuse("invalid_arguments", "[ERROR] missing required field: prompts")
	}
	return ok(nil), nil
}

// connectionsOpen serves apps.connections.open: a one-use Socket Mode URL on the fake's socket
// address (SocketURL).
func (s *Server) connectionsOpen(c *call) (apiResponse, *methodError) {
	ticket := s.issueTicket()
	u := s.SocketURL() + "/link/?ticket=" + ticket + "&app_id=" + DefaultAppID
	return ok(apiResponse{"url": u}), nil
}
