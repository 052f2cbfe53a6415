package telegramtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"time"
)

// SecretHeader is the header carrying a webhook's secret_token.
const SecretHeader = "X-Telegram-Bot-Api-Secret-Token"

// SecretMode says what a bot's webhook pushes put in SecretHeader.
type SecretMode int

const (
	// SecretCorrect sends the secret_token given to setWebhook (no header when none was).
	SecretCorrect SecretMode = iota
	// SecretWrong sends a different, well-formed secret.
	SecretWrong
	// SecretMissing sends no header at all.
	SecretMissing
)

type webhook struct {
	url         string
	secret      string
	maxConn     int
	mode        SecretMode
	running     bool
	lastErrDate int64
	lastErrMsg  string
	deliveries  []WebhookDelivery
}

// description is a successful answer that also carries a description, as setWebhook's does.
type description struct {
	result any
	text   string
}

func validSecret(s string) bool {
	if len(s) < 1 || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// setWebhook serves setWebhook. Plain http:// URLs are accepted (the fake pushes to loopback
// receivers); real Telegram requires HTTPS on ports 443, 80, 88 or 8443.
func (s *Server) setWebhook(c *call) (any, *apiError) {
	raw := c.params["url"]
	if raw == "" {
		return s.deleteWebhook(c)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil, badRequest("bad webhook: Failed to resolve host: Name or service not known")
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return nil, badRequest("bad webhook: HTTPS url must be provided for webhook")
	}
	secret, hasSecret := c.params["secret_token"]
	if hasSecret && secret != "" && !validSecret(secret) {
		return nil, badRequest("secret token contains unallowed characters")
	}
	maxConn, hasMax, e := optInt(c.params, "max_connections")
	if e != nil {
		return nil, e
	}
	if !hasMax {
		maxConn = 40
	}
	var allowed []string
	if raw, ok := c.params["allowed_updates"]; ok {
		if err := json.Unmarshal([]byte(raw), &allowed); err != nil {
			return nil, badRequest("can't parse allowed updates")
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	b := c.bot
	if boolParam(c.params, "drop_pending_updates") {
		b.dropPendingLocked()
	}
	if _, ok := c.params["allowed_updates"]; ok {
		b.allowed = allowed
	}
	if b.poll != nil {
		b.poll.end <- errConflictWebhook
		b.poll = nil
	}
	b.hook.url, b.hook.secret, b.hook.maxConn = raw, secret, int(min(max(maxConn, 1), 100))
	if !b.hook.running {
		b.hook.running = true
		s.workers.Add(1)
		go s.push(b)
	}
	s.changedLocked()
	return description{true, "Webhook was set"}, nil
}

func (s *Server) deleteWebhook(c *call) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := c.bot
	if boolParam(c.params, "drop_pending_updates") {
		b.dropPendingLocked()
	}
	was := b.hook.url
	b.hook.url, b.hook.secret = "", ""
	s.changedLocked()
	if was == "" {
		return description{true, "Webhook is already deleted"}, nil
	}
	return description{true, "Webhook was deleted"}, nil
}

func (s *Server) getWebhookInfo(c *call) (any, *apiError) {
	return c.bot.WebhookInfo(), nil
}

// WebhookInfo returns what getWebhookInfo would answer.
func (b *Bot) WebhookInfo() WebhookInfo {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	info := WebhookInfo{
		URL:                b.hook.url,
		PendingUpdateCount: len(b.queue),
		LastErrorDate:      b.hook.lastErrDate,
		LastErrorMessage:   b.hook.lastErrMsg,
		AllowedUpdates:     slices.Clone(b.allowed),
	}
	if b.hook.url != "" {
		info.MaxConnections = b.hook.maxConn
	}
	return info
}

// SetWebhookSecretMode makes the bot's webhook pushes send the right secret, a wrong one, or none.
func (b *Bot) SetWebhookSecretMode(m SecretMode) {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	b.hook.mode = m
}

// Deliveries returns every webhook push attempt so far, oldest first.
func (b *Bot) Deliveries() []WebhookDelivery {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	return slices.Clone(b.hook.deliveries)
}

// WaitDeliveries waits until at least n webhook push attempts were made and returns them.
func (b *Bot) WaitDeliveries(n int, timeout time.Duration) ([]WebhookDelivery, error) {
	var got []WebhookDelivery
	err := b.s.Wait(timeout, func() bool {
		got = b.Deliveries()
		return len(got) >= n
	})
	return got, err
}

// push delivers the bot's updates to its webhook, one at a time in update_id order, while a
// webhook is set. An update is confirmed when the receiver answers 2xx; after the configured
// number of failed attempts it is dropped and the failure becomes the webhook's last error.
func (s *Server) push(b *Bot) {
	defer s.workers.Done()
	for {
		s.mu.Lock()
		if b.hook.url == "" || s.ctx.Err() != nil {
			b.hook.running = false
			s.mu.Unlock()
			return
		}
		next := b.takeLocked(1)
		if len(next) == 0 {
			ch := s.changed.C()
			s.mu.Unlock()
			select {
			case <-ch:
			case <-s.done:
			}
			continue
		}
		s.mu.Unlock()
		s.deliver(b, next[0])
	}
}

// deliver pushes u, retrying, until it is accepted, given up on, or the webhook changes.
func (s *Server) deliver(b *Bot, u Update) {
	body, _ := json.Marshal(u)
	for attempt := 1; ; attempt++ {
		s.mu.Lock()
		target, secret, mode := b.hook.url, b.hook.secret, b.hook.mode
		s.mu.Unlock()
		if target == "" {
			return // webhook deleted: the update stays queued for getUpdates
		}
		d := WebhookDelivery{UpdateID: u.UpdateID, Attempt: attempt, URL: target, Time: s.cfg.clock.Now()}
		req, _ := http.NewRequestWithContext(s.ctx, http.MethodPost, target, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		switch {
		case mode == SecretWrong:
			d.Secret, d.SecretSent = "wrong"+secret+"-x", true
		case mode == SecretCorrect && secret != "":
			d.Secret, d.SecretSent = secret, true
		}
		if d.SecretSent {
			req.Header.Set(SecretHeader, d.Secret)
		}
		resp, err := s.hook.Do(req)
		if err != nil {
			d.Err = err.Error()
		} else {
			d.Status = resp.StatusCode
			io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
		}
		ok := d.Status >= 200 && d.Status < 300

		s.mu.Lock()
		b.hook.deliveries = append(b.hook.deliveries, d)
		final := ok || attempt >= s.cfg.hookAttempts
		if !ok {
			b.hook.lastErrDate = d.Time.Unix()
			if d.Err != "" {
				b.hook.lastErrMsg = "Connection refused"
			} else {
				b.hook.lastErrMsg = fmt.Sprintf("Wrong response from the webhook: %d %s", d.Status, http.StatusText(d.Status))
			}
		}
		if final {
			b.confirmLocked(u.UpdateID + 1)
		}
		s.changedLocked()
		s.mu.Unlock()
		if final || !s.sleep(s.ctx, s.cfg.hookBackoff) {
			return
		}
	}
}
