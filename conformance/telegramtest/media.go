package telegramtest

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"image"
	_ "image/gif" // photos the fake can measure
	_ "image/jpeg"
	_ "image/png"
	"net/http"
	"strconv"
	"strings"
)

// Limits of the Bot API on files.
const (
	MaxDownloadSize = 20 << 20   // getFile refuses larger files: "file is too big"
	MaxUploadSize   = 50 << 20   // multipart uploads above it: 413 Request Entity Too Large
	MaxPhotoSize    = 10 << 20   // sendPhoto refuses larger photos
	MaxCaption      = 1024       // caption length in UTF-16 code units after parsing
	maxButtonData   = 64         // callback_data bytes
	fileIDPrefix    = "AgACAgtt" // file ids look like Telegram's (base64url)
)

// Media kinds for Bot.Media.
const (
	KindPhoto     = "photo"
	KindDocument  = "document"
	KindVoice     = "voice"
	KindAudio     = "audio"
	KindVideo     = "video"
	KindVideoNote = "video_note"
	KindSticker   = "sticker"
)

// Attach describes the file of an inbound media message built by Bot.Media.
type Attach struct {
	Kind     string // Kind* (KindPhoto when empty)
	Data     []byte
	Size     int64 // claimed file_size; len(Data) when 0
	FileName string
	MIMEType string
	Width    int // photos and videos; 1280x960 when 0 for a photo
	Height   int
	Duration int // seconds: voice, audio, video
	Emoji    string
}

// AddFile registers data under fileID (a fresh id when empty) for getFile and download, and
// returns the file as registered.
func (s *Server) AddFile(fileID string, data []byte) File {
	return s.PutFile(File{ID: fileID, Data: data})
}

// PutFile registers f (see File; an empty ID or Path gets one) and returns it as registered.
func (s *Server) PutFile(f File) File {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *s.putFileLocked(f)
}

func (s *Server) putFileLocked(f File) *File {
	s.nextFile++
	if f.ID == "" {
		f.ID = fileIDPrefix + base64.RawURLEncoding.EncodeToString([]byte("file-"+strconv.Itoa(s.nextFile)))
	}
	if f.UniqueID == "" {
		sum := sha256.Sum256([]byte(f.ID))
		f.UniqueID = base64.RawURLEncoding.EncodeToString(sum[:9])
	}
	if f.Path == "" {
		f.Path = "files/file_" + strconv.Itoa(s.nextFile)
	}
	if f.Size == 0 {
		f.Size = int64(len(f.Data))
	}
	if s.files == nil {
		s.files = map[string]*File{}
	}
	stored := f
	s.files[f.ID] = &stored
	s.changedLocked()
	return &stored
}

// File returns the registered file with id (uploads included).
func (s *Server) File(id string) (File, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.files[id]; f != nil {
		return *f, true
	}
	return File{}, false
}

// getFile serves getFile: unknown ids are 400 "invalid file_id", files above MaxDownloadSize
// 400 "file is too big".
func (s *Server) getFile(c *call) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.files[strings.TrimSpace(c.params["file_id"])]
	switch {
	case c.params["file_id"] == "":
		return nil, badRequest("file_id is empty")
	case f == nil:
		return nil, badRequest("invalid file_id")
	case f.Size > MaxDownloadSize:
		return nil, badRequest("file is too big")
	}
	return struct {
		FileID       string `json:"file_id"`
		FileUniqueID string `json:"file_unique_id"`
		FileSize     int64  `json:"file_size"`
		FilePath     string `json:"file_path"`
	}{f.ID, f.UniqueID, f.Size, f.Path}, nil
}

// serveFile serves GET /file/bot<token>/<file_path>, recorded as method "file" with the
// file_path parameter; faults queued for "file" apply to it.
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request, rest string) {
	token, path, _ := strings.Cut(rest, "/")
	rec := &Request{Token: token, Method: "file", Params: map[string]string{"file_path": path},
		Header: r.Header.Clone(), Time: s.cfg.clock.Now()}
	s.mu.Lock()
	s.requests = append(s.requests, rec)
	bot := s.bots[token]
	var data []byte
	found := false
	for _, f := range s.files {
		if f.Path == path {
			data, found = f.Data, true
		}
	}
	s.changedLocked()
	s.mu.Unlock()

	status := func() int {
		if bot == nil || !found || (r.Method != "GET" && r.Method != "HEAD") {
			return s.fail(w, errNotFound)
		}
		f, faulted := s.takeFault(rec)
		if faulted && !f.after {
			return f.apply(w, nil)
		}
		if faulted {
			switch f.kind {
			case faultDelay:
				if !s.sleep(r.Context(), f.delay) {
					return 0
				}
			case faultHang:
				s.sleep(r.Context(), 1<<62)
				return 0
			default:
				return f.apply(w, data)
			}
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.WriteHeader(http.StatusOK)
		w.Write(data)
		return http.StatusOK
	}()
	s.mu.Lock()
	rec.Status = status
	s.changedLocked()
	s.mu.Unlock()
}

// Downloads returns the recorded file downloads (method "file"), oldest first.
func (s *Server) Downloads() []Request { return s.Requests("file", 0) }

// Media queues a media message from from in chatID (from's private chat when chatID is
// from.ID, else a group as with GroupText) with caption, registering its file (a photo also
// gets a 90px thumbnail, listed first as Telegram lists sizes smallest first). It returns the
// update and the main file.
func (b *Bot) Media(chatID int64, from User, a Attach, caption string) (Update, File) {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var ch *chat
	if chatID == from.ID {
		ch = s.privateLocked(from)
	} else {
		ch = s.groupLocked(chatID)
	}
	f := s.putFileLocked(File{Data: a.Data, Size: a.Size})
	m := &Message{From: ptr(from), Caption: caption, CaptionEntities: detectEntities(caption)}
	if caption == "" {
		m.CaptionEntities = nil
	}
	switch a.Kind {
	case KindPhoto, "":
		w, h := a.Width, a.Height
		if w == 0 || h == 0 {
			w, h = 1280, 960
		}
		thumb := s.putFileLocked(File{Data: []byte("thumbnail of " + f.ID)})
		m.Photo = []PhotoSize{
			{FileID: thumb.ID, FileUniqueID: thumb.UniqueID, Width: 90, Height: 90 * h / w, FileSize: thumb.Size},
			{FileID: f.ID, FileUniqueID: f.UniqueID, Width: w, Height: h, FileSize: f.Size},
		}
	case KindDocument:
		m.Document = &Document{FileID: f.ID, FileUniqueID: f.UniqueID, FileName: a.FileName, MIMEType: a.MIMEType, FileSize: f.Size}
	case KindVoice:
		mt := a.MIMEType
		if mt == "" {
			mt = "audio/ogg"
		}
		m.Voice = &Voice{FileID: f.ID, FileUniqueID: f.UniqueID, Duration: a.Duration, MIMEType: mt, FileSize: f.Size}
	case KindAudio:
		m.Audio = &Audio{FileID: f.ID, FileUniqueID: f.UniqueID, Duration: a.Duration, FileName: a.FileName, MIMEType: a.MIMEType, FileSize: f.Size}
	case KindVideo:
		m.Video = &Video{FileID: f.ID, FileUniqueID: f.UniqueID, Width: a.Width, Height: a.Height, Duration: a.Duration,
			FileName: a.FileName, MIMEType: a.MIMEType, FileSize: f.Size}
	case KindVideoNote:
		m.VideoNote = &VideoNote{FileID: f.ID, FileUniqueID: f.UniqueID, Length: a.Width, Duration: a.Duration, FileSize: f.Size}
	case KindSticker:
		m.Sticker = &Sticker{FileID: f.ID, FileUniqueID: f.UniqueID, Type: "regular", Width: 512, Height: 512, Emoji: a.Emoji, FileSize: f.Size}
	}
	return b.injectLocked(ch, m), *f
}

// mediaMethods are the upload methods: the file's form field, and how the sent message
// carries it.
var mediaMethods = map[string]string{
	"sendphoto": "photo", "senddocument": "document", "sendvoice": "voice", "sendaudio": "audio", "sendvideo": "video",
}

// sendMedia serves sendPhoto, sendDocument, sendVoice, sendAudio and sendVideo. The file is a
// multipart part named after the method's field (or "attach://<part>"), or a known file_id;
// URLs are not fetched. Checks run as for sendMessage, with the caption (parse_mode, at most
// MaxCaption) in place of the text, then the file: present, non-empty, within MaxUploadSize
// (413), and for a photo a decodable image within MaxPhotoSize whose sides add up to at most
// 10000 with a ratio of at most 20 ("PHOTO_INVALID_DIMENSIONS").
func (s *Server) sendMedia(c *call) (any, *apiError) {
	p := c.params
	method := strings.ToLower(c.req.Method)
	field := mediaMethods[method]
	thread, _, e := optInt(p, "message_thread_id")
	if e != nil {
		return nil, e
	}
	var up *Upload
	name := field
	if ref, ok := strings.CutPrefix(p[field], "attach://"); ok {
		name = ref
	}
	for i := range c.req.Uploads {
		if c.req.Uploads[i].Field == name {
			up = &c.req.Uploads[i]
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, e := s.resolveChatLocked(p)
	if e != nil {
		return nil, e
	}
	if e := ch.checkThread(thread, true); e != nil {
		return nil, e
	}
	caption, perr := parseText(p["caption"], p["parse_mode"])
	if perr != "" {
		return nil, badRequest("%s", perr)
	}
	if utf16Len(caption.text) > MaxCaption {
		return nil, badRequest("message caption is too long")
	}
	markup, e := checkMarkup(p)
	if e != nil {
		return nil, e
	}
	reply, e := s.replyLocked(ch, p)
	if e != nil {
		return nil, e
	}
	var f *File
	switch {
	case up != nil && len(up.Data) > MaxUploadSize:
		return nil, &apiError{code: 413, desc: "Request Entity Too Large"}
	case up != nil && len(up.Data) == 0:
		return nil, badRequest("file must be non-empty")
	case up != nil:
		if method == "sendphoto" {
			if e := checkPhoto(up.Data); e != nil {
				return nil, e
			}
		}
		f = s.putFileLocked(File{Data: up.Data})
	case s.files[p[field]] != nil:
		f = s.files[p[field]]
	case p[field] == "":
		return nil, badRequest("there is no %s in the request", field)
	default:
		return nil, badRequest("wrong file identifier/HTTP URL specified")
	}
	if thread == 0 && reply != nil && reply.IsTopicMessage {
		thread = reply.MessageThreadID
	}
	if e := s.floodLocked(ch); e != nil {
		return nil, e
	}
	now := s.cfg.clock.Now()
	m := &Message{From: c.bot.sender(), Date: now.Unix(), Caption: caption.text, CaptionEntities: caption.entities,
		ReplyMarkup: markup, ReplyToMessage: shallow(reply)}
	fname, mt := "", ""
	if up != nil {
		fname, mt = up.FileName, up.ContentType
	}
	switch field {
	case "photo":
		w, h := 0, 0
		if cfg, _, err := image.DecodeConfig(bytes.NewReader(f.Data)); err == nil {
			w, h = cfg.Width, cfg.Height
		}
		m.Photo = []PhotoSize{{FileID: f.ID, FileUniqueID: f.UniqueID, Width: w, Height: h, FileSize: f.Size}}
	case "document":
		m.Document = &Document{FileID: f.ID, FileUniqueID: f.UniqueID, FileName: fname, MIMEType: mt, FileSize: f.Size}
	case "voice":
		m.Voice = &Voice{FileID: f.ID, FileUniqueID: f.UniqueID, MIMEType: mt, FileSize: f.Size}
	case "audio":
		m.Audio = &Audio{FileID: f.ID, FileUniqueID: f.UniqueID, FileName: fname, MIMEType: mt, FileSize: f.Size}
	case "video":
		m.Video = &Video{FileID: f.ID, FileUniqueID: f.UniqueID, FileName: fname, MIMEType: mt, FileSize: f.Size}
	}
	m = ch.newMessageLocked(m)
	if thread != 0 {
		m.MessageThreadID, m.IsTopicMessage = thread, true
	}
	rec := &SentMessage{Token: c.bot.token, Message: *m, Raw: p["caption"], ParseMode: p["parse_mode"], Time: now,
		Method: c.req.Method}
	if up != nil {
		cp := *up
		rec.File = &cp
	}
	k := threadKey{ch.ID, thread}
	s.sent[k] = append(s.sent[k], rec)
	s.order = append(s.order, rec)
	s.changedLocked()
	return *m, nil
}

// checkPhoto applies sendPhoto's rules to an uploaded image.
func checkPhoto(data []byte) *apiError {
	if len(data) > MaxPhotoSize {
		return badRequest("PHOTO_SAVE_FILE_INVALID")
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return badRequest("IMAGE_PROCESS_FAILED")
	}
	w, h := cfg.Width, cfg.Height
	if w <= 0 || h <= 0 || w+h > 10000 || w > 20*h || h > 20*w {
		return badRequest("PHOTO_INVALID_DIMENSIONS")
	}
	return nil
}

// checkMarkup parses reply_markup: JSON, and an inline keyboard's buttons each with text and
// exactly one action, callback_data being 1-64 bytes ("BUTTON_DATA_INVALID"). It returns the
// markup normalized (see markupParam), or nil when there is none.
func checkMarkup(p map[string]string) (json.RawMessage, *apiError) {
	raw := p["reply_markup"]
	if raw == "" {
		return nil, nil
	}
	var m struct {
		Inline [][]map[string]json.RawMessage `json:"inline_keyboard"`
	}
	if json.Unmarshal([]byte(raw), &m) != nil {
		return nil, badRequest("can't parse reply keyboard markup JSON object")
	}
	for _, row := range m.Inline {
		for _, btn := range row {
			var text, data string
			if json.Unmarshal(btn["text"], &text) != nil || text == "" {
				return nil, badRequest("text buttons are unallowed in the inline keyboard")
			}
			if d, ok := btn["callback_data"]; ok {
				if json.Unmarshal(d, &data) != nil || data == "" || len(data) > maxButtonData {
					return nil, badRequest("BUTTON_DATA_INVALID")
				}
			} else if _, ok := btn["url"]; !ok {
				return nil, badRequest("can't find field \"callback_data\" or another action in the inline keyboard button")
			}
		}
	}
	return markupParam(p), nil
}
