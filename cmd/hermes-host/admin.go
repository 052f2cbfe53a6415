package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"time"

	"github.com/hermes-host/hermes-host/internal/config"
	"github.com/hermes-host/hermes-host/internal/gateway"
	"github.com/hermes-host/hermes-host/internal/httpguard"
)

// errNoToken: the data directory has no admin token, so no host has served from it.
var errNoToken = errors.New("no admin token")

// adminCall sends one request to the serving host's admin API (cfg.AdminListen, a wildcard
// address dialled on loopback) with the token from the data directory: a GET when body is nil,
// else a POST of body as JSON. A 200 answer is decoded into out; any other answer is an error
// carrying the host's message. A missing token is errNoToken; no host answering is the dial's
// error (syscall.ECONNREFUSED).
func adminCall(ctx context.Context, cfg *config.Config, path string, body, out any, timeout time.Duration) error {
	token, err := httpguard.ReadSecret(filepath.Join(cfg.DataDir, gateway.TokenFile))
	if err != nil {
		return fmt.Errorf("%w in %s: %v", errNoToken, cfg.DataDir, err)
	}
	addr, err := gateway.DialAddr(cfg.AdminListen)
	if err != nil {
		return fmt.Errorf("admin_listen %q: %w", cfg.AdminListen, err)
	}
	url := "http://" + addr + path
	method, rd := http.MethodGet, io.Reader(nil)
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		method, rd = http.MethodPost, bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct{ Message string }
		json.NewDecoder(resp.Body).Decode(&e)
		return fmt.Errorf("the host at %s answered %s: %s", url, resp.Status, e.Message)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s: not a hermes-host admin API: %w", url, err)
	}
	return nil
}
