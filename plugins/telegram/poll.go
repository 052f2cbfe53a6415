package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// allowedUpdates are the update kinds the plugin maps; Telegram drops the others for us.
var allowedUpdates = []string{"message", "edited_message", "channel_post", "edited_channel_post", "callback_query"}

// Timing of poll: back-offs (the host polls again after this long when there are no events)
// and request budgets.
const (
	backoffConflict = 5 * time.Second   // another getUpdates client is polling this bot
	backoffFailure  = 3 * time.Second   // network trouble, 5xx, malformed answers
	backoffRefused  = time.Minute       // token rejected, egress denied: needs the operator
	webhookRecheck  = 5 * time.Minute   // webhook mode: how often poll re-checks the registration
	pollMargin      = 4 * time.Second   // HTTP timeout beyond the long poll's own
	minPollInterval = time.Second       // never short-poll faster than this
	shortRequest    = 5 * time.Second   // getWebhookInfo, setWebhook, deleteWebhook, a short getUpdates
	maxLongPoll     = 100 * time.Second // the host's egress allows a request 120 s at most
)

// Cursor keys in the kv store, per token (an offset means nothing to another bot). The committed
// offset is what getUpdates is called with; the pending one is the offset after the batch the
// previous poll returned, committed at the start of the next poll (SPEC §2.5).
func offsetKey(cfg *Config) string  { return "offset:" + cfg.tokenKey() }
func pendingKey(cfg *Config) string { return "offset_next:" + cfg.tokenKey() }

// poll receives updates by long polling (mode poll), or, in webhook mode, makes sure Telegram
// pushes them to the webhook and asks to be polled again later.
func poll(c *sdk.Context, req *abi.PollRequest) (*abi.PollResult, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return nil, err
	}
	if p := cfg.problems(); len(p) > 0 {
		c.Log(abi.LevelError, "invalid configuration", "problems", strings.Join(p, "; "))
		return backoff(backoffRefused), nil
	}
	a := &api{c: c, cfg: cfg}
	wait := min(time.Duration(max(req.WaitMs, 0))*time.Millisecond, maxLongPoll)
	b := newBudget(wait + pollSlack) // every request of this poll ends within it
	if cfg.Mode == ModeWebhook {
		return ensureWebhook(a, b)
	}

	// The host calls poll again only after it has durably recorded the previous batch: that
	// batch can now be confirmed to Telegram, by asking for updates after it.
	offset, err := commitOffset(c, cfg)
	if err != nil {
		return nil, err
	}
	me, err := a.me(b)
	if err != nil {
		return failure(a, "cannot learn the bot's identity (getMe)", err), nil
	}

	raw, failed := fetch(a, b, offset, wait)
	if failed != nil {
		return failed, nil
	}
	events, next, queries := mapBatch(c, raw, mapOptions{Me: me, RequireMention: cfg.requireMention()}, offset)
	// Button presses are acknowledged after the batch is handed over (or returned): a failed
	// answer only leaves the user's spinner turning a little longer, never loses the press.
	defer answerCallbacks(a, b, queries)
	out := &abi.PollResult{Events: events}
	if len(raw) == 0 && wait < minPollInterval {
		out.BackoffMs = (minPollInterval - wait).Milliseconds()
	}
	// Preferred path: hand each event to the host now (hermes_dispatch records it durably and
	// deduplicates it), then confirm the batch. A crash anywhere in between makes Telegram send
	// the batch again and the host ignores the repeats: nothing lost, nothing doubled.
	if dispatched, err := dispatchAll(c, events); err != nil {
		return failure(a, "the host could not record the updates", err), nil
	} else if dispatched {
		out.Events = nil
		if next > offset {
			if err := c.KVSet(offsetKey(cfg), []byte(strconv.FormatInt(next, 10))); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	// Last: from here the batch is handed to the host, which records it before the next poll.
	if next > offset {
		if err := c.KVSet(pendingKey(cfg), []byte(strconv.FormatInt(next, 10))); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// dispatchAll hands events to the host one by one. It reports false (and dispatches nothing)
// when the host offers no dispatch function; then the events are returned from poll instead.
func dispatchAll(c *sdk.Context, events []abi.InboundEvent) (bool, error) {
	for i, ev := range events {
		if _, err := c.Dispatch(ev); err != nil {
			if i == 0 && abi.CodeOf(err) == abi.CodeUnavailable {
				return false, nil
			}
			return true, err
		}
	}
	return len(events) > 0, nil
}

// fetch long-polls getUpdates from offset for up to wait (less if b has less left), deleting a
// stray webhook (409 "webhook is active") once. On failure it returns the back-off to answer
// instead.
func fetch(a *api, b budget, offset int64, wait time.Duration) ([]json.RawMessage, *abi.PollResult) {
	raw, err := getUpdates(a, b, offset, wait)
	var ae *apiError
	if errors.As(err, &ae) && ae.r.Status == 409 && ae.r.is("webhook is active") {
		if err := deleteStrayWebhook(a, b); err != nil {
			return nil, failure(a, "deleteWebhook failed", err)
		}
		raw, err = getUpdates(a, b, offset, 0)
	}
	switch {
	case errors.As(err, &ae) && ae.r.Status == 409:
		a.c.Log(abi.LevelWarn, "another client is polling this bot (getUpdates conflict); backing off",
			"description", ae.r.describe(), "backoff_ms", strconv.FormatInt(backoffConflict.Milliseconds(), 10))
		return nil, backoff(backoffConflict)
	case err != nil:
		return nil, failure(a, "getUpdates failed", err)
	}
	return raw, nil
}

// deleteStrayWebhook removes a webhook that blocks polling: left over from webhook mode, or set
// by another deployment of the same bot, which stops receiving updates from now on. The
// operator is told once per webhook URL, loudly, which URL was removed.
func deleteStrayWebhook(a *api, b budget) error {
	var info struct {
		URL string `json:"url"`
	}
	if t, ok := b.timeout(shortRequest); ok {
		a.do("getWebhookInfo", struct{}{}, t, &info) // only to name it: deleting is what matters
	}
	t, ok := b.timeout(shortRequest)
	if !ok {
		return errNoTime("deleteWebhook")
	}
	if err := a.do("deleteWebhook", struct{}{}, t, nil); err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(info.URL))
	key := "stray_webhook:" + a.cfg.tokenKey()
	if told, _, _ := a.c.KVGet(key); string(told) != hex.EncodeToString(sum[:]) {
		a.c.Log(abi.LevelWarn, "deleted the webhook set on this bot: this profile polls (mode poll), and Telegram "+
			"refuses getUpdates while a webhook is set; if another deployment receives this bot's updates "+
			"through that webhook, it no longer does (use mode webhook there, or another bot token here)",
			"webhook_url", info.URL)
		a.c.KVSet(key, []byte(hex.EncodeToString(sum[:])))
	}
	return nil
}

// mapBatch maps a getUpdates batch to events, logging what it skips, and returns them with the
// offset after the batch (at least next) and the ids of the batch's callback queries, mapped or
// skipped, all of which are to be answered.
func mapBatch(c *sdk.Context, raw []json.RawMessage, opts mapOptions, next int64) ([]abi.InboundEvent, int64, []string) {
	var events []abi.InboundEvent
	var queries []string
	for _, u := range raw {
		if q := callbackQueryID(u); q != "" {
			queries = append(queries, q)
		}
		id, ev, skip, err := parseUpdate(u, opts)
		if id > 0 {
			next = max(next, id+1)
		}
		switch {
		case err != nil:
			c.Log(abi.LevelWarn, "skipping a malformed update", "update_id", strconv.FormatInt(id, 10), "error", err.Error())
		case ev == nil:
			c.Log(abi.LevelDebug, "skipping update", "update_id", strconv.FormatInt(id, 10), "reason", skip)
		default:
			events = append(events, *ev)
		}
	}
	return events, next, queries
}

// answerTimeout bounds one answerCallbackQuery.
const answerTimeout = 2 * time.Second

// answerCallbacks acknowledges button presses (answerCallbackQuery), which stops the spinner on
// the pressed button. Best effort, within what is left of b: a failure is logged and the press
// itself is already the host's (Telegram lets a query go unanswered; the client gives up
// waiting after a while).
func answerCallbacks(a *api, b budget, queries []string) {
	for _, q := range queries {
		t, ok := b.timeout(answerTimeout)
		if !ok {
			a.c.Log(abi.LevelWarn, "no time left to answer a button press (answerCallbackQuery)", "callback_query_id", q)
			return
		}
		if err := a.do("answerCallbackQuery", struct {
			ID string `json:"callback_query_id"`
		}{q}, t, nil); err != nil {
			a.c.Log(abi.LevelWarn, "answerCallbackQuery failed (the press was received all the same)",
				"callback_query_id", q, "error", a.scrub(err.Error()))
		}
	}
}

// commitOffset makes the pending offset (after the batch the previous poll returned) the
// committed one, and returns the committed offset (0 before any update).
func commitOffset(c *sdk.Context, cfg *Config) (int64, error) {
	pending, found, err := c.KVGet(pendingKey(cfg))
	if err != nil {
		return 0, err
	}
	if found {
		if err := c.KVSet(offsetKey(cfg), pending); err != nil {
			return 0, err
		}
		if err := c.KVDelete(pendingKey(cfg)); err != nil {
			return 0, err
		}
	}
	raw, found, err := c.KVGet(offsetKey(cfg))
	if err != nil || !found {
		return 0, err
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n < 0 {
		c.Log(abi.LevelError, "ignoring a corrupt stored offset", "value", string(raw))
		return 0, nil
	}
	return n, nil
}

// getUpdates long-polls for up to wait (whole seconds; shortened to what b leaves after the
// HTTP margin) and returns the raw updates, each decoded separately so that one malformed update
// does not hide the others.
func getUpdates(a *api, b budget, offset int64, wait time.Duration) ([]json.RawMessage, error) {
	wait = min(wait, b.left()-pollMargin)
	timeout, ok := b.timeout(max(wait, 0) + pollMargin)
	if !ok {
		return nil, errNoTime("getUpdates")
	}
	p := struct {
		Offset         int64    `json:"offset,omitempty"`
		Limit          int      `json:"limit"`
		Timeout        int64    `json:"timeout"`
		AllowedUpdates []string `json:"allowed_updates"`
	}{offset, 100, int64(max(wait, 0) / time.Second), allowedUpdates}
	var raw []json.RawMessage
	return raw, a.do("getUpdates", p, timeout, &raw)
}

// ensureWebhook registers the webhook (webhook mode) when Telegram does not have it, or has it
// with other settings than this configuration's, and asks to be polled again later. The
// registration is checked with getWebhookInfo at every such poll and remembered (as a digest of
// URL and secret) in the kv store, so a webhook deleted or replaced elsewhere is restored.
func ensureWebhook(a *api, b budget) (*abi.PollResult, error) {
	cfg := a.cfg
	if _, err := a.me(b); err != nil { // warm the identity cache the webhook export reads
		return failure(a, "cannot learn the bot's identity (getMe)", err), nil
	}
	sum := sha256.Sum256([]byte(cfg.WebhookURL + "\x00" + cfg.SecretToken))
	digest := hex.EncodeToString(sum[:])
	key := "webhook:" + cfg.tokenKey()
	stored, _, err := a.c.KVGet(key)
	if err != nil {
		return nil, err
	}
	var info struct {
		URL string `json:"url"`
	}
	t, ok := b.timeout(shortRequest)
	if !ok {
		return failure(a, "getWebhookInfo not sent", errNoTime("getWebhookInfo")), nil
	}
	if err := a.do("getWebhookInfo", struct{}{}, t, &info); err != nil {
		return failure(a, "getWebhookInfo failed", err), nil
	}
	if info.URL == cfg.WebhookURL && string(stored) == digest {
		return backoff(webhookRecheck), nil
	}
	p := struct {
		URL            string   `json:"url"`
		SecretToken    string   `json:"secret_token"`
		AllowedUpdates []string `json:"allowed_updates"`
	}{cfg.WebhookURL, cfg.SecretToken, allowedUpdates}
	if t, ok = b.timeout(shortRequest); !ok {
		return failure(a, "setWebhook not sent", errNoTime("setWebhook")), nil
	}
	if err := a.do("setWebhook", p, t, nil); err != nil {
		return failure(a, "setWebhook failed", err), nil
	}
	if err := a.c.KVSet(key, []byte(digest)); err != nil {
		return nil, err
	}
	a.c.Log(abi.LevelInfo, "webhook registered", "url", cfg.WebhookURL)
	return backoff(webhookRecheck), nil
}

// failure logs a failed Bot API or transport call and answers with a back-off suited to it.
func failure(a *api, what string, err error) *abi.PollResult {
	wait := backoffFailure
	var ae *apiError
	switch {
	case errors.As(err, &ae) && ae.unauthorized():
		wait = backoffRefused
	case errors.As(err, &ae) && ae.r.retryAfter() > 0:
		wait = time.Duration(ae.r.retryAfter()) * time.Millisecond
	case abi.CodeOf(err) == abi.CodeDenied:
		wait = backoffRefused
	}
	level := abi.LevelWarn
	if wait == backoffRefused {
		level = abi.LevelError
	}
	a.c.Log(level, what, "error", a.scrub(err.Error()), "backoff_ms", strconv.FormatInt(wait.Milliseconds(), 10))
	return backoff(wait)
}

func backoff(d time.Duration) *abi.PollResult { return &abi.PollResult{BackoffMs: d.Milliseconds()} }
