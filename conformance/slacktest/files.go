package slacktest

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// File is a file of the fake: shared by a user (ShareFile) or uploaded by the bot (the
// external upload flow).
type File struct {
	ID       string
	Team     string
	Name     string
	Title    string
	Mimetype string
	Filetype string
	Subtype  string // "slack_audio" for an audio clip recorded in Slack
	Data     []byte
	// Uploader is the token of a bot upload ("" for a user's file).
	Uploader string
	// Length is the length announced to files.getUploadURLExternal (a bot upload).
	Length int
	// Uploaded reports that the bytes were POSTed to the upload URL; Completed that
	// files.completeUploadExternal shared (or completed) the file.
	Uploaded, Completed bool
	// Channel, ThreadTS and InitialComment are completeUploadExternal's (or the share's).
	Channel, ThreadTS, InitialComment string
	// ShareTS is the ts of the message the file was shared in.
	ShareTS string

	uploadPath string // /upload/v1/<ticket> of a bot upload
}

// FileSpec is a file a user shares (Team.ShareFile).
type FileSpec struct {
	Name     string
	Mimetype string
	Filetype string // default: the name's extension
	Subtype  string // "slack_audio" for an audio clip
	Data     []byte
	Thread   string // the root ts of the thread it is shared in ("" for the top level)
}

// EventFile is a file as a message event carries it.
type EventFile struct {
	ID                 string `json:"id"`
	Created            int64  `json:"created"`
	Name               string `json:"name"`
	Title              string `json:"title"`
	Mimetype           string `json:"mimetype"`
	Filetype           string `json:"filetype"`
	PrettyType         string `json:"pretty_type,omitempty"`
	Subtype            string `json:"subtype,omitempty"`
	User               string `json:"user"`
	Mode               string `json:"mode"`
	Editable           bool   `json:"editable"`
	IsExternal         bool   `json:"is_external"`
	ExternalType       string `json:"external_type"`
	Size               int64  `json:"size"`
	URLPrivate         string `json:"url_private,omitempty"`
	URLPrivateDownload string `json:"url_private_download,omitempty"`
	Permalink          string `json:"permalink,omitempty"`
}

// Download is one request for a file's bytes (url_private or url_private_download).
type Download struct {
	FileID string
	Path   string
	Token  string // the Authorization header's bearer token ("" without one)
	Status int    // 200 with the bytes; 302 to the sign-in page; 404 for an unknown file
}

// Files returns every file of the fake (shared by users and uploaded by the bot), oldest first.
func (s *Server) Files() []File {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []File
	for _, f := range s.files {
		c := *f
		c.Data = append([]byte(nil), f.Data...)
		out = append(out, c)
	}
	return out
}

// Uploads returns the bot's uploads (files.getUploadURLExternal onwards), oldest first.
func (s *Server) Uploads() []File {
	var out []File
	for _, f := range s.Files() {
		if f.Uploader != "" {
			out = append(out, f)
		}
	}
	return out
}

// Downloads returns the file downloads attempted, oldest first.
func (s *Server) Downloads() []Download {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Download(nil), s.downloads...)
}

// newFileLocked adds a file with a new id. s.mu must be held.
func (s *Server) newFileLocked(f *File) *File {
	s.fileSeq++
	f.ID = fmt.Sprintf("F0%09d", s.fileSeq)
	s.files = append(s.files, f)
	s.changedLocked()
	return f
}

func (s *Server) fileLocked(id string) *File {
	for _, f := range s.files {
		if f.ID == id {
			return f
		}
	}
	return nil
}

// filePath is a file's url_private path, as Slack forms it: /files-pri/<team>-<file>/<name>.
func filePath(f *File, download bool) string {
	p := "/files-pri/" + f.Team + "-" + f.ID + "/"
	if download {
		p += "download/"
	}
	return p + url.PathEscape(f.Name)
}

// eventFile is f as a message event carries it.
func (s *Server) eventFile(f *File, user string) EventFile {
	return EventFile{ID: f.ID, Created: s.cfg.clock.Now().Unix(), Name: f.Name, Title: f.Title, Mimetype: f.Mimetype,
		Filetype: f.Filetype, Subtype: f.Subtype, User: user, Mode: "hosted", ExternalType: "", Size: int64(len(f.Data)),
		URLPrivate: s.hs.URL + filePath(f, false), URLPrivateDownload: s.hs.URL + filePath(f, true),
		Permalink: "https://" + strings.ToLower(f.Team) + ".slack.com/files/" + user + "/" + f.ID + "/" + url.PathEscape(f.Name)}
}

// ShareFile stores a file shared by user in a channel, with text, and queues its "message"
// event (subtype file_share, the file in files, url_private and url_private_download on the
// fake: reading them needs a bot token of the team).
func (t *Team) ShareFile(channelID, user, text string, spec FileSpec) Posted {
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.channels[channelID] == nil {
		panic("slacktest: unknown channel " + channelID + " in team " + t.ID)
	}
	ft := spec.Filetype
	if ft == "" {
		if i := strings.LastIndexByte(spec.Name, '.'); i >= 0 {
			ft = strings.ToLower(spec.Name[i+1:])
		}
	}
	f := s.newFileLocked(&File{Team: t.ID, Name: spec.Name, Title: spec.Name, Mimetype: spec.Mimetype, Filetype: ft,
		Subtype: spec.Subtype, Data: append([]byte(nil), spec.Data...), Channel: channelID, ThreadTS: spec.Thread,
		InitialComment: text, Uploaded: true, Completed: true})
	m := &Message{Team: t.ID, Channel: channelID, TS: s.nextTSLocked(), ThreadTS: spec.Thread, User: user, Text: text,
		Files: []string{f.ID}, Time: s.cfg.clock.Now()}
	f.ShareTS = m.TS
	s.messages = append(s.messages, m)
	ev := t.messageEventLocked(m)
	env := s.enqueueLocked(t, ev)
	return Posted{TS: m.TS, EventIDs: []string{env.EventID}, Envelopes: []*Envelope{env}}
}

// getUploadURLExternal serves files.getUploadURLExternal: filename and length (a positive
// integer) are required, as form or query parameters (the method does not read JSON bodies).
// It answers a one-use upload_url on the fake and the new file's id.
func (s *Server) getUploadURLExternal(c *call) (apiResponse, *methodError) {
	p := c.formParams()
	var missing []string
	for _, k := range []string{"filename", "length"} {
		if p[k] == "" {
			missing = append(missing, "[ERROR] missing required field: "+k)
		}
	}
	if len(missing) > 0 {
		return nil, refuse("invalid_arguments", missing...)
	}
	n, err := strconv.Atoi(p["length"])
	if err != nil || n <= 0 {
		return nil, refuse("invalid_arguments", "[ERROR] length must be a positive integer")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.newFileLocked(&File{Team: c.team.ID, Name: p["filename"], Title: p["filename"], Uploader: c.req.Token, Length: n})
	f.Mimetype = mime.TypeByExtension(extOf(f.Name))
	f.Filetype = strings.TrimPrefix(extOf(f.Name), ".")
	f.uploadPath = "/upload/v1/" + newEnvelopeID()
	return ok(apiResponse{"upload_url": s.hs.URL + f.uploadPath, "file_id": f.ID}), nil
}

func extOf(name string) string {
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		return strings.ToLower(name[i:])
	}
	return ""
}

// serveUpload takes a file's bytes at its upload URL: the raw body, or the "file" part of a
// multipart form (as slack-go sends it). It answers 200 "OK - <length>", as Slack does. It is
// recorded as a request of method "upload", so faults for "upload" apply to it (one after the
// effect: the bytes were taken, then the answer was lost).
func (s *Server) serveUpload(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, maxBody))
	rec := &Request{Method: "upload", Params: map[string]string{"path": r.URL.Path}, Header: r.Header.Clone(), Body: body,
		Time: s.cfg.clock.Now()}
	s.mu.Lock()
	s.requests = append(s.requests, rec)
	s.changedLocked()
	s.mu.Unlock()
	status := s.answerUpload(w, r, rec, body)
	s.mu.Lock()
	rec.Status = status
	s.changedLocked()
	s.mu.Unlock()
}

func (s *Server) answerUpload(w http.ResponseWriter, r *http.Request, rec *Request, body []byte) int {
	f, faulted := s.takeFault(rec)
	if faulted && !f.after {
		return s.apply(f, w, r, nil)
	}
	if r.Method != http.MethodPost {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return http.StatusMethodNotAllowed
	}
	data := body
	if mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "multipart/form-data" {
		data = nil
		mr := multipart.NewReader(strings.NewReader(string(body)), params["boundary"])
		for {
			part, err := mr.NextPart()
			if err != nil {
				break
			}
			if part.FormName() == "file" {
				data, _ = io.ReadAll(part)
				break
			}
		}
	}
	s.mu.Lock()
	var file *File
	for _, x := range s.files {
		if x.uploadPath != "" && x.uploadPath == r.URL.Path {
			file = x
		}
	}
	if file == nil || file.Uploaded {
		s.mu.Unlock()
		http.Error(w, "unknown or used upload URL", http.StatusNotFound)
		return http.StatusNotFound
	}
	file.Data, file.Uploaded = append([]byte(nil), data...), true
	s.changedLocked()
	s.mu.Unlock()
	answer := []byte("OK - " + strconv.Itoa(len(data)))
	if faulted {
		return s.apply(f, w, r, answer)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	w.Write(answer)
	return http.StatusOK
}

// completeUploadExternal serves files.completeUploadExternal: files (a JSON array of {id,
// title}) of the caller's uploads, each uploaded; with channel_id the files are shared there
// (channel_not_found, not_in_channel; thread_ts must name a message of the channel) in a
// message carrying initial_comment. Like getUploadURLExternal it reads forms only.
func (s *Server) completeUploadExternal(c *call) (apiResponse, *methodError) {
	p := c.formParams()
	var list []struct {
		ID    string `json:"id"`
		Title string `json:"title"`
	}
	if p["files"] == "" || json.Unmarshal([]byte(p["files"]), &list) != nil || len(list) == 0 {
		return nil, refuse("invalid_arguments", "[ERROR] missing required field: files")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var files []*File
	for _, x := range list {
		f := s.fileLocked(x.ID)
		switch {
		case f == nil || f.Uploader == "" || f.Team != c.team.ID:
			return nil, refuse("file_not_found")
		case !f.Uploaded || f.Completed:
			return nil, refuse("file_upload_incomplete") // a guess at the code
		}
		if x.Title != "" {
			f.Title = x.Title
		}
		files = append(files, f)
	}
	chID, thread := p["channel_id"], p["thread_ts"]
	var ch *channel
	if chID != "" {
		ch = c.team.channel(chID)
		switch {
		case ch == nil:
			return nil, refuse("channel_not_found")
		case !ch.member:
			return nil, refuse("not_in_channel")
		}
		if thread != "" {
			if !tsRE.MatchString(thread) {
				return nil, refuse("invalid_thread_ts", "[ERROR] "+thread+" is not a valid thread_ts")
			}
			root := s.findLocked(c.team.ID, ch.id, thread)
			switch {
			case root == nil:
				return nil, refuse("thread_not_found")
			case root.ThreadTS != "":
				thread = root.ThreadTS
			}
		}
	}
	var out []apiResponse
	var m *Message
	if ch != nil {
		m = &Message{Team: c.team.ID, Channel: ch.id, TS: s.nextTSLocked(), ThreadTS: thread, User: c.team.BotUser,
			BotID: c.team.BotID, Text: p["initial_comment"], Token: c.req.Token, Time: s.cfg.clock.Now()}
		s.messages = append(s.messages, m)
	}
	for _, f := range files {
		f.Completed, f.Channel, f.ThreadTS, f.InitialComment = true, chID, thread, p["initial_comment"]
		ans := apiResponse{"id": f.ID, "title": f.Title}
		if m != nil {
			f.ShareTS = m.TS
			m.Files = append(m.Files, f.ID)
			if !s.cfg.asyncShares {
				kind := "public"
				if ch.typ != "channel" {
					kind = "private"
				}
				share := map[string]any{"ts": m.TS, "channel_name": ch.name, "team_id": c.team.ID, "share_user_id": c.team.BotUser}
				if thread != "" {
					share["thread_ts"] = thread
				}
				ans["shares"] = map[string]any{kind: map[string]any{ch.id: []any{share}}}
			}
		}
		out = append(out, ans)
	}
	if m != nil {
		s.changedLocked()
		if s.cfg.botEcho {
			s.echoLocked(c.team, ch, m)
		}
	}
	return ok(apiResponse{"files": out}), nil
}

// formParams are the request's parameters as a form-only method reads them: none from a JSON
// body.
func (c *call) formParams() map[string]string {
	if c.json {
		return map[string]string{}
	}
	return c.req.Params
}

// serveFile serves url_private (/files-pri/<team>-<file>/<name>) and url_private_download
// (.../download/<name>): the bytes, with the file's mimetype, to a bot token of the file's
// team (in the Authorization header). Without one, Slack redirects to the workspace's sign-in
// page (an HTML page, its redir parameter the file's path): so does the fake.
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request) {
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	d := Download{Path: r.URL.Path, Token: token}
	rest := strings.TrimPrefix(r.URL.Path, "/files-pri/")
	seg, _, _ := strings.Cut(rest, "/")
	team, id, _ := strings.Cut(seg, "-")
	s.mu.Lock()
	f := s.fileLocked(id)
	t := s.tokens[token]
	s.mu.Unlock()
	switch {
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		d.Status = http.StatusMethodNotAllowed
		http.Error(w, "method not allowed", d.Status)
	case f == nil || f.Team != team || !f.Completed || (r.URL.EscapedPath() != filePath(f, false) && r.URL.EscapedPath() != filePath(f, true)):
		d.Status = http.StatusNotFound
		http.Error(w, "file not found", d.Status)
	case t == nil || t.ID != f.Team:
		d.Status = http.StatusFound
		http.Redirect(w, r, "/signin?redir="+url.QueryEscape(r.URL.Path), d.Status)
	default:
		d.FileID, d.Status = f.ID, http.StatusOK
		ct := f.Mimetype
		if ct == "" {
			ct = "application/octet-stream"
		}
		w.Header().Set("Content-Type", ct)
		w.Header().Set("Content-Length", strconv.Itoa(len(f.Data)))
		w.WriteHeader(http.StatusOK)
		w.Write(f.Data)
	}
	if d.FileID == "" && f != nil {
		d.FileID = f.ID
	}
	s.mu.Lock()
	s.downloads = append(s.downloads, d)
	s.changedLocked()
	s.mu.Unlock()
}

// serveSignin is the workspace's sign-in page, where a download without access ends.
func (s *Server) serveSignin(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, `<!DOCTYPE html><html><head><title>Sign in | Slack</title></head><body><form action="/signin">Sign in to your workspace</form></body></html>`)
}
