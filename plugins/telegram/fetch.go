package main

import (
	"errors"
	"mime"
	"strconv"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/sdk"
)

// MaxDownload is the largest file the Bot API lets a bot download (getFile answers "file is
// too big" beyond it).
const MaxDownload = 20 << 20

// fetchBudget bounds one fetch (getFile and the download) under the host's call deadline.
const fetchBudget = 7 * time.Second

// errorPage is the least a download reads before it is cut, so that a front end's error page
// is read as an error and not as a file over a small limit.
const errorPage = 4096

// fileInfo is getFile's result.
type fileInfo struct {
	FileID   string `json:"file_id"`
	FileSize int64  `json:"file_size"`
	FilePath string `json:"file_path"`
}

// fetchFile (the fetch export) downloads an attachment's bytes: getFile turns its file_id (Ref) into a file_path, then
// GET <api_base>/file/bot<token>/<file_path>. Files the platform or the host claims are larger
// than MaxDownload or MaxBytes are refused with too_large before any download, and the
// download itself stops reading past the limit (the host's egress cuts it): too_large again.
// A file_id Telegram does not know is not_found; network trouble and 5xx are io (or timeout).
func fetchFile(c *sdk.Context, req *abi.FetchRequest) (*abi.FetchResult, error) {
	cfg, err := loadConfig(c)
	if err != nil {
		return nil, err
	}
	if p := cfg.problems(); len(p) > 0 {
		return nil, abi.Errorf(abi.CodeBadRequest, "invalid configuration: %s", strings.Join(p, "; "))
	}
	att := req.Attachment
	if att.Ref == "" {
		return nil, abi.Errorf(abi.CodeBadRequest, "the attachment has no Telegram file_id (ref)")
	}
	limit := int64(MaxDownload)
	if req.MaxBytes > 0 {
		limit = min(limit, req.MaxBytes)
	}
	if err := tooLarge(att.Size, limit); err != nil {
		return nil, err
	}
	a := &api{c: c, cfg: cfg}
	b := newBudget(fetchBudget)
	t, ok := b.timeout(b.left())
	if !ok {
		return nil, errNoTime("getFile")
	}
	var info fileInfo
	if err := a.do("getFile", struct {
		FileID string `json:"file_id"`
	}{att.Ref}, t, &info); err != nil {
		return nil, fetchError("getFile", err)
	}
	if err := tooLarge(info.FileSize, limit); err != nil {
		return nil, err
	}
	if info.FilePath == "" || strings.HasPrefix(info.FilePath, "/") || strings.ContainsAny(info.FilePath, "?#\\%") ||
		strings.Contains("/"+info.FilePath+"/", "/../") {
		return nil, abi.Errorf(abi.CodeIO, "getFile answered an unusable file_path %q", info.FilePath)
	}
	if t, ok = b.timeout(b.left()); !ok {
		return nil, errNoTime("file download")
	}
	resp, err := c.HTTP(&abi.HTTPRequest{
		Method:    "GET",
		URL:       cfg.APIBase + "/file/bot" + cfg.Token + "/" + info.FilePath,
		TimeoutMs: t.Milliseconds(),
		// A little past a tiny limit, so that an error page is still read as one.
		MaxBytes: max(limit, errorPage),
	})
	if err != nil {
		e := *abi.AsError(err)
		e.Message = a.scrub(e.Message)
		switch e.Code {
		case abi.CodeTooLarge:
			e.Message = "the file exceeds " + strconv.FormatInt(limit, 10) + " bytes (download stopped): " + e.Message
		case abi.CodeUncertain: // a download has no effect to be uncertain about: it failed
			e.Code = abi.CodeIO
		}
		return nil, &e
	}
	switch {
	case resp.Status == 404:
		return nil, abi.Errorf(abi.CodeNotFound, "file download: Telegram no longer has the file (404)")
	case resp.Status != 200:
		return nil, abi.Errorf(abi.CodeIO, "file download: HTTP %d", resp.Status)
	case int64(len(resp.Body)) > limit:
		return nil, abi.Errorf(abi.CodeTooLarge, "the file exceeds %d bytes (download stopped)", limit)
	}
	mt := att.MIMEType
	if ct := firstHeader(resp.Headers, "Content-Type"); ct != "" {
		if m, _, err := mime.ParseMediaType(ct); err == nil && m != "application/octet-stream" {
			mt = m
		}
	}
	return &abi.FetchResult{Data: resp.Body, MIMEType: mt}, nil
}

// tooLarge refuses a claimed size over limit (0: unknown, not refused).
func tooLarge(size, limit int64) error {
	if size <= limit {
		return nil
	}
	why := "the host's limit"
	if limit == MaxDownload {
		why = "the Bot API's download limit"
	}
	return abi.Errorf(abi.CodeTooLarge, "the file has %d bytes, over %s of %d; not downloaded", size, why, limit)
}

// fetchError maps a failed Bot API call of fetch to an export error.
func fetchError(method string, err error) error {
	var ae *apiError
	if !errors.As(err, &ae) {
		e := *abi.AsError(err)
		if e.Code == abi.CodeUncertain {
			e.Code = abi.CodeIO
		}
		return &e
	}
	desc := ae.r.describe()
	switch {
	case ae.r.is("file is too big"):
		return abi.Errorf(abi.CodeTooLarge, "%s: %s (the Bot API downloads at most %d bytes)", method, desc, MaxDownload)
	case ae.r.Status == 400 && (ae.r.is("file_id") || ae.r.is("file not found") || ae.r.is("invalid file")):
		return abi.Errorf(abi.CodeNotFound, "%s: %s", method, desc)
	case ae.unauthorized():
		return abi.Errorf(abi.CodeDenied, "%s: Telegram rejected the token (%s)", method, desc)
	case ae.r.Status == 429:
		return abi.Errorf(abi.CodeIO, "%s: rate limited (%s)", method, desc)
	case ae.r.Status >= 500 || !ae.r.Envelope:
		return abi.Errorf(abi.CodeIO, "%s: %s", method, desc)
	}
	return abi.Errorf(abi.CodeBadRequest, "%s: %s", method, desc)
}

// firstHeader returns the first value of the named header (case-insensitive), or "".
func firstHeader(h map[string][]string, name string) string {
	v, _ := header(h, name)
	return v
}
