// Package telegram is the Telegram profile of the conformance suite. It loads a Telegram
// adapter (.wasm) through the production runtime, points its profiles at a telegramtest fake of
// the Bot API, and checks the behaviours adapters tend to get wrong: getUpdates offsets (and
// their survival across a restart), forum topics and the General topic, mention gating, group
// migration service messages, the UTF-16 length limit, the mapping of 429, migrated groups and
// other refusals, ambiguous answers after the message was posted (never resent), answers slower
// than the call deadline (a typed result, never a crash; a slow getMe at configure accepts the
// profile), the "message thread not found" retry, and the webhook secret.
//
// The adapter is configured with the first-party plugin's configuration keys, which a Telegram
// adapter must accept to be checked: token, api_base, and for webhook mode mode="webhook",
// webhook_url and secret_token. It must learn its username with getMe (no bot_username is given)
// and register its webhook with setWebhook either in configure or in poll.
package telegram

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/conformance"
	tgt "github.com/hermes-host/hermes-host/conformance/telegramtest"
	"github.com/hermes-host/hermes-host/host"
)

// Options tune a run.
type Options struct {
	// CallTimeout bounds each call into the plugin (default: the host's default, 10s).
	CallTimeout time.Duration
	// CacheDir is the compilation cache; empty uses the user cache directory.
	CacheDir string
	// Timeout bounds every wait for the fake or the plugin (default 20s).
	Timeout time.Duration
}

// Profiles the suite configures, one bot (token) each so that checks do not share state.
const (
	profPoll    = "poll"
	profStray   = "stray"
	profInbound = "inbound"
	profSend    = "send"
	profHook    = "hook"
	// profConflict polls a second fake that counts getUpdates timeouts in real seconds, so its
	// long poll stays parked until another client's getUpdates terminates it.
	profConflict = "conflict"
	// profSlowMe is loaded on its own by checkSlowGetMe, with a getMe slower than the deadline.
	profSlowMe = "slowme"
)

var tokens = map[string]string{
	profPoll:     "700000001:conformance-poll",
	profStray:    "700000002:conformance-stray",
	profInbound:  "700000003:conformance-inbound",
	profSend:     "700000004:conformance-send",
	profHook:     "700000005:conformance-hook",
	profConflict: "700000006:conformance-conflict",
	profSlowMe:   "700000007:conformance-slowme",
}

const (
	hookSecret = "conformance_Secret-42"
	fakeSecond = 20 * time.Millisecond // a getUpdates timeout "second" on the fake
	pollWait   = 2 * time.Second       // the wait the suite polls with
	maxPolls   = 10                    // polls a check makes at most while waiting for something
)

// Chats of the suite (each used by one profile only).
var (
	ada        = tgt.Person(111001, "Ada")
	bob        = tgt.Person(111002, "Bob")
	forumID    = int64(-1001700000001)
	groupID    = int64(-4700000002)
	oldGroupID = int64(-4700000003)
	newGroupID = int64(-1001700000003)
	migFromID  = int64(-4700000004)
	migToID    = int64(-1001700000004)
	channelID  = int64(-1001700000009)
)

// suite is one run's state.
type suite struct {
	ctx     context.Context
	opts    Options
	path    string
	rep     *conformance.Report
	checks  conformance.Checks
	tg      *tgt.Server
	tgLive  *tgt.Server // real-time seconds, for profConflict
	env     *host.Env
	p       *host.Plugin // the loaded adapter; nil between a close and the next load
	hook    *forwarder
	hookURL string
	// sendTokens maps each chat the suite sends to to the token its profile must use.
	sendTokens map[int64]string
	// offSend records Bot API methods that post into a chat, called from an export other than
	// send and let through (reaching the fake).
	offSend *conformance.OffSend
}

// Run checks the Telegram adapter at wasmPath against a fake Bot API and reports each behaviour
// as a result. It never panics: a failure inside a check is that check's result.
func Run(ctx context.Context, wasmPath string, opts Options) *conformance.Report {
	if opts.Timeout <= 0 {
		opts.Timeout = 20 * time.Second
	}
	s := &suite{ctx: ctx, opts: opts, path: wasmPath, rep: &conformance.Report{File: wasmPath},
		sendTokens: map[int64]string{}}
	s.checks = conformance.Checks{Report: s.rep}
	var tgOpts []tgt.Option
	tgOpts = append(tgOpts, tgt.WithoutDefaultBot(), tgt.WithSecond(fakeSecond))
	for _, name := range sortedProfiles() {
		username := "conf_" + name + "_bot"
		if name == profHook {
			username = tgt.DefaultBotUsername // the bot the shipped samples mention
		}
		tgOpts = append(tgOpts, tgt.WithBot(tokens[name], username))
	}
	s.tg = tgt.New(nil, tgOpts...)
	defer s.tg.Close()
	s.tgLive = tgt.New(nil, tgt.WithoutDefaultBot(), tgt.WithBot(tokens[profConflict], "conf_conflict_bot"))
	defer s.tgLive.Close()
	s.hook = &forwarder{suite: s}
	hs := httptest.NewServer(s.hook)
	defer hs.Close()
	s.hookURL = hs.URL + "/hooks/telegram/" + profHook

	s.offSend = conformance.NewOffSend("the Bot API", postingMethod)
	env, err := host.NewEnv(host.EnvOptions{Egressed: s.offSend.Egressed})
	if err != nil {
		s.checks.Add("load", time.Now(), err, "")
		return s.rep
	}
	defer env.Close()
	s.env = env
	defer func() {
		if p := s.current(); p != nil {
			p.Close()
		}
	}()

	if !s.check("load (manifest, configure)", s.load) {
		return s.rep
	}
	s.check("poll: offset confirmed next poll", s.checkOffsets)
	s.check("poll: restart, no loss or replay", s.checkRestart)
	s.check("poll: stray webhook deleted", s.checkStrayWebhook)
	s.check("poll: 409 conflict backs off", s.checkConflict)
	s.check("inbound: topics and thread traps", s.checkTopics)
	s.check("inbound: mention gating", s.checkGating)
	s.check("inbound: /command@bot", s.checkCommands)
	s.check("inbound: bots, edits, service, migration", s.checkSkips)
	s.check("send: topics, General, replies", s.checkSendTopics)
	s.check("send: thread not found retried", s.checkThreadNotFound)
	s.check("send: UTF-16 limit respected", s.checkUTF16)
	s.check("send: 429 mapped to retry_after", s.checkFlood)
	s.check("send: migrated group mapped", s.checkMigrated)
	s.check("send: refusals typed", s.checkFailures)
	s.check("send: ambiguous answers never resent", s.checkAmbiguous)
	s.check("send: slow answer typed, no crash", s.checkSlowSend)
	if s.p.Manifest().Has(abi.CapEdit) {
		s.check("send: edit, not modified is ok", s.checkEdit)
	}
	if s.p.Manifest().Has(abi.CapTyping) {
		s.check("send: typing", s.checkTyping)
	}
	if s.p.Manifest().Has(abi.CapAttachments) {
		s.check("media: photo in, fetch, upload out", s.checkMedia)
	}
	if s.p.Manifest().Has(abi.CapButtons) {
		s.check("buttons: inline keyboard, press answered", s.checkButtons)
	}
	s.check("webhook: registered with secret", s.checkWebhookRegistered)
	s.check("webhook: secret enforced", s.checkWebhookSecret)
	s.check("webhook: shipped samples", s.checkSamples)
	s.check("configure: slow getMe accepts the profile", s.checkSlowGetMe)
	s.check("profiles: own token only", s.checkTokens)
	s.check("egress: messages posted only from send", s.offSend.Check)
	return s.rep
}

// postingMethod reports whether a Bot API method puts something into a chat or changes what
// it shows (webhook management does not).
func postingMethod(m string) bool {
	if strings.HasSuffix(m, "Webhook") {
		return false
	}
	for _, prefix := range []string{"send", "edit", "forward", "copy", "delete", "pin", "unpin", "setChat", "setMessageReaction"} {
		if strings.HasPrefix(m, prefix) {
			return true
		}
	}
	return false
}

func sortedProfiles() []string {
	var out []string
	for name := range tokens {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// check runs one check and records it in the report.
func (s *suite) check(name string, f func() (string, error)) bool { return s.checks.Run(name, f) }

// profiles are the configurations the adapter is loaded with.
func (s *suite) profiles() map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for name, token := range tokens {
		if name == profSlowMe {
			continue // loaded on its own
		}
		cfg := map[string]any{"token": token, "api_base": s.tg.URL()}
		switch name {
		case profConflict:
			cfg["api_base"] = s.tgLive.URL()
		case profHook:
			cfg["mode"], cfg["webhook_url"], cfg["secret_token"] = "webhook", s.hookURL, hookSecret
		}
		out[name], _ = json.Marshal(cfg)
	}
	return out
}

// load (re)loads the adapter over the suite's environment: a second load is a restart with the
// same kv store.
func (s *suite) load() (string, error) {
	if p := s.current(); p != nil {
		p.Close()
		s.setPlugin(nil)
	}
	start := time.Now()
	p, err := host.LoadPlugin(s.ctx, s.path, host.PluginOptions{
		// The fakes stand in for api.telegram.org: the adapter's egress scopes apply to them.
		Env: s.env, Profiles: s.profiles(), Egress: host.Egress{Alias: map[string]string{
			hostOf(s.tg.URL()): "api.telegram.org", hostOf(s.tgLive.URL()): "api.telegram.org"}},
		CallTimeout: s.opts.CallTimeout, CacheDir: s.opts.CacheDir,
	})
	if err != nil {
		return "", err
	}
	s.setPlugin(p)
	info := p.Info()
	m := info.Manifest
	if s.rep.Manifest == nil {
		s.rep.Manifest = &m
	}
	var errs []error
	if m.Kind != abi.KindPlatform || m.Platform != "telegram" {
		errs = append(errs, fmt.Errorf("kind %q platform %q, want platform plugin for \"telegram\"", m.Kind, m.Platform))
	}
	if m.MessageLimit != (abi.MessageLimit{Max: tgt.MaxTextLength, Unit: abi.UnitUTF16}) {
		errs = append(errs, fmt.Errorf("message_limit %+v, want 4096 utf16", m.MessageLimit))
	}
	for _, c := range []string{abi.CapPoll, abi.CapWebhook, abi.CapThreads, abi.CapReplies} {
		if !m.Has(c) {
			errs = append(errs, fmt.Errorf("capability %q missing", c))
		}
	}
	for name, problems := range info.Profiles {
		if len(problems) > 0 {
			errs = append(errs, fmt.Errorf("profile %s rejected: %s", name, strings.Join(problems, "; ")))
		}
	}
	return fmt.Sprintf("%s %s, capabilities %s, loaded in %v", m.Name, m.Version, strings.Join(m.Capabilities, ","),
		time.Since(start).Round(time.Millisecond)), joinErrors(errs)
}

func (s *suite) bot(profile string) *tgt.Bot { return s.tg.BotByToken(tokens[profile]) }

// poll calls the adapter's poll export and checks the shape of the events.
func (s *suite) poll(profile string) (*abi.PollResult, error) {
	res, err := s.p.Poll(s.ctx, profile, pollWait)
	if err != nil {
		return nil, fmt.Errorf("poll %s: %w", profile, err)
	}
	for _, ev := range res.Events {
		if err := wellFormed(ev); err != nil {
			return nil, fmt.Errorf("poll %s: %w", profile, err)
		}
	}
	return res, nil
}

// pollFor polls until it has an event for each update (in order, nothing else) or the timeout.
func (s *suite) pollFor(profile string, want ...tgt.Update) ([]abi.InboundEvent, error) {
	var got []abi.InboundEvent
	deadline := time.Now().Add(s.opts.Timeout)
	for i := 0; i < maxPolls && len(got) < len(want) && time.Now().Before(deadline); i++ {
		res, err := s.poll(profile)
		if err != nil {
			return nil, err
		}
		got = append(got, res.Events...)
	}
	if err := sameIDs(got, want); err != nil {
		return nil, err
	}
	return got, nil
}

// wellFormed checks the invariants of any event.
func wellFormed(ev abi.InboundEvent) error {
	if _, err := strconv.ParseInt(strings.TrimPrefix(ev.ID, "update:"), 10, 64); err != nil || !strings.HasPrefix(ev.ID, "update:") {
		return fmt.Errorf("event id %q: want update:<update_id>", ev.ID)
	}
	if ev.Kind != "" && ev.Kind != abi.EventMessage && ev.Kind != abi.EventObserve && ev.Kind != abi.EventCallback {
		return fmt.Errorf("event %s: kind %q", ev.ID, ev.Kind)
	}
	if ev.Source.ChatID == "" {
		return fmt.Errorf("event %s: no chat_id", ev.ID)
	}
	if ev.Source.ThreadID != "" && ev.Source.ChatType != abi.ChatForum && ev.Source.ChatType != abi.ChatDM {
		return fmt.Errorf("event %s: thread_id %q on a %q chat", ev.ID, ev.Source.ThreadID, ev.Source.ChatType)
	}
	return nil
}

func sameIDs(got []abi.InboundEvent, want []tgt.Update) error {
	var g, w []string
	for _, e := range got {
		g = append(g, e.ID)
	}
	for _, u := range want {
		w = append(w, updateID(u))
	}
	if strings.Join(g, ",") != strings.Join(w, ",") {
		return fmt.Errorf("events %v, want %v", g, w)
	}
	return nil
}

func updateID(u tgt.Update) string { return "update:" + strconv.FormatInt(u.UpdateID, 10) }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// forwarder plays the host's POST /hooks/telegram/{profile}: it hands the fake's pushes to the
// adapter's webhook export and keeps the events it returns.
type forwarder struct {
	suite  *suite
	mu     sync.Mutex
	events []abi.InboundEvent
}

func (f *forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	p := f.suite.current()
	if p == nil {
		http.Error(w, "no plugin", http.StatusServiceUnavailable)
		return
	}
	res, err := p.Webhook(r.Context(), profHook, abi.WebhookRequest{
		Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Headers: r.Header, Body: body,
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	f.mu.Lock()
	f.events = append(f.events, res.Events...)
	f.mu.Unlock()
	for k, vs := range res.Response.Headers {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(res.Response.Status)
	w.Write(res.Response.Body)
}

func (f *forwarder) got() []abi.InboundEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]abi.InboundEvent(nil), f.events...)
}

// setPlugin installs the loaded plugin.
func (s *suite) setPlugin(p *host.Plugin) {
	s.hook.mu.Lock()
	defer s.hook.mu.Unlock()
	s.p = p
}

// current returns the loaded plugin (the forwarder runs on the fake's goroutines).
func (s *suite) current() *host.Plugin {
	s.hook.mu.Lock()
	defer s.hook.mu.Unlock()
	return s.p
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Host
}
