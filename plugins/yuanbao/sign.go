package main

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// Sign-token: the bot proves its APP_SECRET over HTTP and gets the token AUTH_BIND presents.
const (
	signPath        = "/api/v5/robotLogic/sign-token"
	signRetryCode   = 10099 // "try again": retried up to signRetries times, signRetryDelay apart
	signRetries     = 3
	signRetryDelay  = time.Second
	signHTTPTimeout = 5 * time.Second
	tokenMargin     = 60 * time.Second // a cached token is refreshed this long before it expires
	defaultTokenTTL = time.Hour        // when the answer's duration is 0
	instanceID      = "17"             // the instance id Yuanbao assigns to Hermes
	tokenKey        = "token"          // kv: the cached token (JSON)
)

// token is a signed token, as cached in the kv store.
type token struct {
	Token   string `json:"token"`
	BotID   string `json:"bot_id"`
	Source  string `json:"source"`
	Product string `json:"product"`
	Expires int64  `json:"expires_ms"` // unix ms
	Config  string `json:"config"`     // the configuration digest it was signed for
}

// signError is an answer of sign-token other than success.
type signError struct {
	Status int    // HTTP status
	Code   int64  // the answer's code (0 when the body was not an answer)
	Msg    string // the answer's msg, or the start of the body
}

func (e *signError) Error() string {
	if e.Code != 0 {
		return fmt.Sprintf("sign-token refused: code %d: %s", e.Code, e.Msg)
	}
	return fmt.Sprintf("sign-token: HTTP %d: %s", e.Status, e.Msg)
}

// refused reports a definite refusal of the credentials (as opposed to a server in trouble).
func (e *signError) refused() bool {
	return e.Code != 0 && e.Code != signRetryCode || e.Status == 401 || e.Status == 403
}

// beijingTime formats t as sign-token wants it: Beijing time, seconds, explicit offset.
func beijingTime(t time.Time) string {
	return t.In(time.FixedZone("UTC+8", 8*3600)).Format("2006-01-02T15:04:05-07:00")
}

// signature is hex(HMAC-SHA256(key = secret, nonce + timestamp + appID + secret)).
func signature(nonce, timestamp, appID, secret string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(nonce + timestamp + appID + secret))
	return hex.EncodeToString(m.Sum(nil))
}

func newNonce() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// fetchToken signs a new token, retrying code 10099.
func fetchToken(c *sdk.Context, cfg *Config) (*token, error) {
	for attempt := 0; ; attempt++ {
		now, err := c.Now()
		if err != nil {
			return nil, err
		}
		nonce, ts := newNonce(), beijingTime(now)
		body, _ := json.Marshal(map[string]string{
			"app_key": cfg.AppID, "nonce": nonce, "signature": signature(nonce, ts, cfg.AppID, cfg.AppSecret), "timestamp": ts,
		})
		headers := map[string][]string{
			"Content-Type": {"application/json"}, "X-AppVersion": {Version}, "X-OperationSystem": {"hermes-host"},
			"X-Instance-Id": {instanceID}, "X-Bot-Version": {Version},
		}
		if cfg.RouteEnv != "" {
			headers["X-Route-Env"] = []string{cfg.RouteEnv}
		}
		resp, err := c.HTTP(&abi.HTTPRequest{Method: "POST", URL: cfg.APIDomain + signPath, Headers: headers, Body: body,
			TimeoutMs: signHTTPTimeout.Milliseconds(), MaxBytes: 64 << 10})
		if err != nil {
			return nil, err
		}
		var ans struct {
			Code json.Number `json:"code"`
			Msg  string      `json:"msg"`
			Data *struct {
				Token    string `json:"token"`
				BotID    string `json:"bot_id"`
				Duration int64  `json:"duration"`
				Product  string `json:"product"`
				Source   string `json:"source"`
			} `json:"data"`
		}
		if resp.Status != 200 || json.Unmarshal(resp.Body, &ans) != nil || ans.Code == "" {
			return nil, &signError{Status: resp.Status, Msg: clip(strings.TrimSpace(string(resp.Body)), 200)}
		}
		code, _ := ans.Code.Int64()
		switch {
		case code == 0 && ans.Data != nil && ans.Data.Token != "":
			d := time.Duration(ans.Data.Duration) * time.Second
			if d <= 0 {
				d = defaultTokenTTL
			}
			return &token{Token: ans.Data.Token, BotID: ans.Data.BotID, Source: ans.Data.Source, Product: ans.Data.Product,
				Expires: now.Add(d).UnixMilli(), Config: cfg.digest()}, nil
		case code == 0:
			return nil, &signError{Status: resp.Status, Code: -1, Msg: "success without a token"}
		case code == signRetryCode && attempt < signRetries:
			c.Log(abi.LevelWarn, "sign-token asked to retry", "code", strconv.FormatInt(code, 10), "attempt", strconv.Itoa(attempt+1))
			time.Sleep(signRetryDelay)
			continue
		}
		return nil, &signError{Status: resp.Status, Code: code, Msg: ans.Msg}
	}
}

// getToken returns the cached token when it is valid for this configuration and not about to
// expire, and signs a new one otherwise. A reconnect presents the cached token too, as Yuanbao's
// public clients do: sign-token is rate limited, and a bot whose socket drops every few seconds
// would otherwise sign as often. A token Yuanbao stops accepting is forgotten (forgetToken) and
// the next connect signs again.
func getToken(c *sdk.Context, cfg *Config) (*token, error) {
	now, err := c.Now()
	if err != nil {
		return nil, err
	}
	if raw, found, err := c.KVGet(tokenKey); err != nil {
		return nil, err
	} else if found {
		var t token
		if json.Unmarshal(raw, &t) == nil && t.Config == cfg.digest() && t.Token != "" &&
			time.UnixMilli(t.Expires).Sub(now) > tokenMargin {
			return &t, nil
		}
	}
	t, err := fetchToken(c, cfg)
	if err != nil {
		return nil, err
	}
	raw, _ := json.Marshal(t)
	if err := c.KVSet(tokenKey, raw); err != nil {
		return nil, err
	}
	return t, nil
}

// forgetToken drops the cached token (AUTH_BIND refused it, or Yuanbao closed the connection for
// good): the next connect signs a new one.
func forgetToken(c *sdk.Context) {
	if err := c.KVDelete(tokenKey); err != nil {
		c.Log(abi.LevelWarn, "could not forget the sign-token", "error", err.Error())
	}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
