package turn

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hermes-host/hermes-host/abi"
	"github.com/hermes-host/hermes-host/internal/agent"
	"github.com/hermes-host/hermes-host/internal/delivery"
	"github.com/hermes-host/hermes-host/internal/media"
	"github.com/hermes-host/hermes-host/internal/session"
)

// Files: a message's attachments are fetched, checked and stored when its turn runs (never at
// intake: the platform has its acknowledgement first), outside the key's boundary; the files
// an answer names (agent.Reply.Media) are sent, each as its own message, only from the
// conversation's working directory. A file refused either way is one line to the user.

// Fetcher asks the platform plugin that received a message for an attachment's bytes
// ((*plugin.Plugin).Fetch through the gateway's runtime). It must not be cancelled mid-call
// (a plugin call cut short is a crash): it gets a context without the turn's cancellation.
type Fetcher interface {
	Fetch(ctx context.Context, plugin, profile string, att abi.Attachment, maxBytes int64) (*abi.FetchResult, error)
}

// NoFiles is the line for the files of an answer to a platform whose plugin does not send
// attachments.
const NoFiles = "⚠️ I cannot send files on this platform."

// WorkDir is key's working directory: where the commands of its turns run and the only place
// an answer's files are sent from; "" when the engine has no Options.WorkRoot.
func (e *Engine) WorkDir(key string) string {
	if e.opt.WorkRoot == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(e.opt.WorkRoot, hex.EncodeToString(sum[:16]))
}

// workDir is WorkDir, created if it is not there.
func (e *Engine) workDir(key string) (string, error) {
	dir := e.WorkDir(key)
	if dir == "" {
		return "", nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("turn: the conversation's working directory: %w", err)
	}
	return dir, nil
}

// line is a message of one line that goes with the turn's answer, guarded as it is.
func (e *Engine) line(key string, it *item, st session.Stamp, text string) delivery.Message {
	m := e.noticeMsg(it.plugin, it.profile, key, it.src, text)
	m.Guard, m.Stamp, m.Generation, m.Origin = delivery.GuardWork, st, st.Generation, "turn:"+it.first()
	return m
}

// attachments fetches, checks and stores the files of it's messages and returns them for the
// agent; each one refused becomes a line in it.before, and nothing is stored for it.
func (e *Engine) attachments(ctx context.Context, key string, it *item, st session.Stamp) []agent.Attachment {
	var out []agent.Attachment
	for _, en := range it.entries {
		for _, a := range en.attachments {
			if ctx.Err() != nil {
				return nil
			}
			name := a.Name
			if name == "" {
				name = "the " + a.Kind
			}
			f, why := e.attachment(ctx, it, a)
			if why != "" {
				e.log.Info("turn: attachment refused", "key", key, "kind", a.Kind, "name", a.Name, "why", why)
				it.before = append(it.before, e.line(key, it, st, "⚠️ "+name+" was not accepted: "+why+"."))
				continue
			}
			out = append(out, agent.Attachment{Kind: a.Kind, MIMEType: f.MIMEType, Name: a.Name, Size: f.Size, Path: f.Path, Caption: a.Caption})
		}
	}
	return out
}

// attachment fetches and stores one attachment; why, if not "", is why it was refused.
func (e *Engine) attachment(ctx context.Context, it *item, a abi.Attachment) (media.File, string) {
	ms := e.opt.Media
	if ms == nil {
		return media.File{}, "this host does not take files"
	}
	max := ms.MaxFile()
	tooBig := func(n int64) string {
		return fmt.Sprintf("it is %s, more than the %s a file may have", media.Size(n), media.Size(max))
	}
	if a.Size > max {
		return media.File{}, tooBig(a.Size) // refused before anything is fetched
	}
	data := a.Data
	if len(data) == 0 {
		if e.opt.Fetcher == nil {
			return media.File{}, "this platform does not deliver files"
		}
		if testHookFetching != nil {
			testHookFetching(it)
		}
		res, err := e.opt.Fetcher.Fetch(context.WithoutCancel(ctx), it.plugin, it.profile, a, max)
		switch {
		case abi.CodeOf(err) == abi.CodeTooLarge:
			return media.File{}, fmt.Sprintf("it is more than the %s a file may have", media.Size(max))
		case err != nil:
			e.log.Warn("turn: fetching an attachment failed", "plugin", it.plugin, "profile", it.profile, "kind", a.Kind, "error", err)
			return media.File{}, "it could not be fetched from the platform"
		case res == nil || len(res.Data) == 0:
			return media.File{}, "the platform returned no bytes for it"
		}
		data = res.Data
	}
	if int64(len(data)) > max {
		return media.File{}, tooBig(int64(len(data)))
	}
	f, err := ms.Put(ctx, media.Item{Plugin: it.plugin, Profile: it.profile, Kind: a.Kind, Name: a.Name, Data: data})
	var ref *media.Refused
	switch {
	case errors.As(err, &ref):
		return media.File{}, ref.Reason
	case err != nil:
		e.log.Error("turn: storing an attachment failed", "plugin", it.plugin, "profile", it.profile, "error", err)
		return media.File{}, "it could not be stored"
	}
	return f, ""
}

// testHookFetching, when set by a test, runs right before a turn asks its plugin for an
// attachment's bytes.
var testHookFetching func(*item)

// files queues the files an answer names (paths in the conversation's working directory) as
// messages of one attachment each, after the answer (it.after); a file that is not sent is a
// line saying why (it.before).
func (e *Engine) files(ctx context.Context, key string, it *item, st session.Stamp, target abi.OutboundMessage, paths []string) {
	if len(paths) == 0 {
		return
	}
	if e.opt.CanAttach == nil || !e.opt.CanAttach(it.plugin) {
		it.after = append(it.after, e.line(key, it, st, NoFiles))
		return
	}
	for _, p := range paths {
		m, why := e.file(ctx, key, it, st, target, p)
		if why != "" {
			e.log.Info("turn: file not sent", "key", key, "path", p, "why", why)
			it.after = append(it.after, e.line(key, it, st, "⚠️ "+filepath.Base(p)+" was not sent: "+why+"."))
			continue
		}
		it.after = append(it.after, m)
	}
}

// file reads and stores the file at p for sending; why, if not "", is why it is not sent.
func (e *Engine) file(ctx context.Context, key string, it *item, st session.Stamp, target abi.OutboundMessage, p string) (delivery.Message, string) {
	ms := e.opt.Media
	dir, err := e.workDir(key)
	if ms == nil || dir == "" || err != nil {
		return delivery.Message{}, "this host sends no files"
	}
	rel := p
	if filepath.IsAbs(p) {
		rel = ""
		for _, d := range []string{dir, evalOr(dir)} {
			if r, err := filepath.Rel(d, filepath.Clean(p)); err == nil && filepath.IsLocal(r) {
				rel = r
				break
			}
		}
	}
	if rel == "" || !filepath.IsLocal(rel) {
		return delivery.Message{}, "it is outside this conversation's working directory"
	}
	// Opened through an os.Root: a symbolic link (or "..") that leads out of the directory is
	// refused by the open itself, with no window between a check and the read.
	root, err := os.OpenRoot(dir)
	if err != nil {
		return delivery.Message{}, "this conversation's working directory cannot be read"
	}
	defer root.Close()
	f, err := root.Open(rel)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return delivery.Message{}, "there is no such file"
		}
		return delivery.Message{}, "it leads outside this conversation's working directory"
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		return delivery.Message{}, "it is not a regular file"
	}
	if info.Size() > ms.MaxFile() {
		return delivery.Message{}, fmt.Sprintf("it is %s, more than the %s a file may have", media.Size(info.Size()), media.Size(ms.MaxFile()))
	}
	data, err := io.ReadAll(io.LimitReader(f, ms.MaxFile()+1))
	if err != nil {
		return delivery.Message{}, "it could not be read"
	}
	name := filepath.Base(rel)
	kind := media.KindOf(media.Sniff(data))
	stored, err := ms.Put(ctx, media.Item{Plugin: it.plugin, Profile: it.profile, Kind: kind, Name: name, Data: data})
	var ref *media.Refused
	switch {
	case errors.As(err, &ref):
		return delivery.Message{}, ref.Reason
	case err != nil:
		e.log.Error("turn: storing a file to send failed", "key", key, "error", err)
		return delivery.Message{}, "it could not be stored"
	}
	tg := target
	tg.Attachments = []abi.Attachment{{Kind: kind, MIMEType: stored.MIMEType, Name: name, Size: stored.Size, Ref: media.Ref(stored.Hash)}}
	return delivery.Message{Plugin: it.plugin, Profile: it.profile, Key: key, Target: tg, Parts: []string{""}, Kind: delivery.KindReply,
		Guard: delivery.GuardWork, Stamp: st, Generation: st.Generation, Origin: "turn:" + it.first()}, ""
}

// evalOr is dir with its symbolic links resolved, or dir.
func evalOr(dir string) string {
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		return r
	}
	return dir
}
