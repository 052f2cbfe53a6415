package telegramtest

import (
	"encoding/json"
	"net/http"
	"time"
)

// User is a Telegram user or bot, as the Bot API serializes it.
type User struct {
	ID        int64  `json:"id"`
	IsBot     bool   `json:"is_bot"`
	FirstName string `json:"first_name"`
	LastName  string `json:"last_name,omitempty"`
	Username  string `json:"username,omitempty"`

	// Only in getMe (which always sends them). CanReadAllGroupMessages is false while the bot's
	// privacy mode is on, the default for new bots: see Bot.SetPrivacyMode.
	CanJoinGroups           bool `json:"can_join_groups,omitempty"`
	CanReadAllGroupMessages bool `json:"can_read_all_group_messages,omitempty"`
	SupportsInlineQueries   bool `json:"supports_inline_queries,omitempty"`
}

// Chat types.
const (
	Private    = "private"
	Group      = "group"
	Supergroup = "supergroup"
	Channel    = "channel"
)

// Chat is a Telegram chat as it appears inside a Message.
type Chat struct {
	ID        int64  `json:"id"`
	Type      string `json:"type"` // Private, Group, Supergroup or Channel
	Title     string `json:"title,omitempty"`
	Username  string `json:"username,omitempty"`
	FirstName string `json:"first_name,omitempty"`
	LastName  string `json:"last_name,omitempty"`
	IsForum   bool   `json:"is_forum,omitempty"`
}

// MessageEntity marks a span of a message's text. Offset and Length count UTF-16 code units.
type MessageEntity struct {
	Type   string `json:"type"` // "mention", "bot_command", "bold", ...
	Offset int    `json:"offset"`
	Length int    `json:"length"`
	URL    string `json:"url,omitempty"`
	User   *User  `json:"user,omitempty"`
	Lang   string `json:"language,omitempty"`
}

// ForumTopicCreated is the service payload of the message that created a forum topic.
type ForumTopicCreated struct {
	Name      string `json:"name"`
	IconColor int    `json:"icon_color"`
}

// Message is a Telegram message, as the Bot API serializes it (the fields the fake uses).
type Message struct {
	MessageID       int64           `json:"message_id"`
	MessageThreadID int64           `json:"message_thread_id,omitempty"`
	IsTopicMessage  bool            `json:"is_topic_message,omitempty"`
	From            *User           `json:"from,omitempty"`
	SenderChat      *Chat           `json:"sender_chat,omitempty"`
	Chat            Chat            `json:"chat"`
	Date            int64           `json:"date"`
	EditDate        int64           `json:"edit_date,omitempty"`
	Text            string          `json:"text,omitempty"`
	Entities        []MessageEntity `json:"entities,omitempty"`
	ReplyToMessage  *Message        `json:"reply_to_message,omitempty"`

	ForumTopicCreated *ForumTopicCreated `json:"forum_topic_created,omitempty"`
	MigrateToChatID   int64              `json:"migrate_to_chat_id,omitempty"`
	MigrateFromChatID int64              `json:"migrate_from_chat_id,omitempty"`

	// ReplyMarkup is echoed back as sent (an inline keyboard), when there was one.
	ReplyMarkup json.RawMessage `json:"reply_markup,omitempty"`

	// Media: at most one is set; Caption and CaptionEntities go with it.
	Photo           []PhotoSize     `json:"photo,omitempty"` // sizes, smallest first
	Document        *Document       `json:"document,omitempty"`
	Voice           *Voice          `json:"voice,omitempty"`
	Audio           *Audio          `json:"audio,omitempty"`
	Video           *Video          `json:"video,omitempty"`
	VideoNote       *VideoNote      `json:"video_note,omitempty"`
	Sticker         *Sticker        `json:"sticker,omitempty"`
	Caption         string          `json:"caption,omitempty"`
	CaptionEntities []MessageEntity `json:"caption_entities,omitempty"`
}

// PhotoSize is one size of a photo (or a thumbnail).
type PhotoSize struct {
	FileID       string `json:"file_id"`
	FileUniqueID string `json:"file_unique_id"`
	Width        int    `json:"width"`
	Height       int    `json:"height"`
	FileSize     int64  `json:"file_size,omitempty"`
}

// Document is a general file.
type Document struct {
	FileID       string `json:"file_id"`
	FileUniqueID string `json:"file_unique_id"`
	FileName     string `json:"file_name,omitempty"`
	MIMEType     string `json:"mime_type,omitempty"`
	FileSize     int64  `json:"file_size,omitempty"`
}

// Voice is a voice note (OGG/Opus as Telegram's clients record it).
type Voice struct {
	FileID       string `json:"file_id"`
	FileUniqueID string `json:"file_unique_id"`
	Duration     int    `json:"duration"`
	MIMEType     string `json:"mime_type,omitempty"`
	FileSize     int64  `json:"file_size,omitempty"`
}

// Audio is a music file.
type Audio struct {
	FileID       string `json:"file_id"`
	FileUniqueID string `json:"file_unique_id"`
	Duration     int    `json:"duration"`
	Performer    string `json:"performer,omitempty"`
	Title        string `json:"title,omitempty"`
	FileName     string `json:"file_name,omitempty"`
	MIMEType     string `json:"mime_type,omitempty"`
	FileSize     int64  `json:"file_size,omitempty"`
}

// Video is a video file.
type Video struct {
	FileID       string `json:"file_id"`
	FileUniqueID string `json:"file_unique_id"`
	Width        int    `json:"width"`
	Height       int    `json:"height"`
	Duration     int    `json:"duration"`
	FileName     string `json:"file_name,omitempty"`
	MIMEType     string `json:"mime_type,omitempty"`
	FileSize     int64  `json:"file_size,omitempty"`
}

// VideoNote is a round video message.
type VideoNote struct {
	FileID       string `json:"file_id"`
	FileUniqueID string `json:"file_unique_id"`
	Length       int    `json:"length"`
	Duration     int    `json:"duration"`
	FileSize     int64  `json:"file_size,omitempty"`
}

// Sticker is a sticker (WebP unless animated or video).
type Sticker struct {
	FileID       string `json:"file_id"`
	FileUniqueID string `json:"file_unique_id"`
	Type         string `json:"type"`
	Width        int    `json:"width"`
	Height       int    `json:"height"`
	IsAnimated   bool   `json:"is_animated"`
	IsVideo      bool   `json:"is_video"`
	Emoji        string `json:"emoji,omitempty"`
	FileSize     int64  `json:"file_size,omitempty"`
}

// CallbackQuery is a press of an inline keyboard button.
type CallbackQuery struct {
	ID           string   `json:"id"`
	From         User     `json:"from"`
	Message      *Message `json:"message,omitempty"`
	ChatInstance string   `json:"chat_instance"`
	Data         string   `json:"data,omitempty"`
}

// CallbackAnswer is a recorded answerCallbackQuery.
type CallbackAnswer struct {
	Token     string
	QueryID   string
	Text      string
	ShowAlert bool
	Time      time.Time
}

// Upload is one file part of a multipart request.
type Upload struct {
	Field       string // the form field ("photo", "document", ...)
	FileName    string
	ContentType string // the part's Content-Type
	Data        []byte
}

// File is a file the fake serves through getFile and /file/bot<token>/<path>.
type File struct {
	ID       string
	UniqueID string
	Path     string // file_path; "files/<id>" by default
	Data     []byte
	// Size is the file_size getFile reports: len(Data) when 0. A larger claim lets a test
	// check size limits without the bytes.
	Size int64
}

// Update is one incoming update. At most one of the optional payload fields is set.
type Update struct {
	UpdateID          int64          `json:"update_id"`
	Message           *Message       `json:"message,omitempty"`
	EditedMessage     *Message       `json:"edited_message,omitempty"`
	ChannelPost       *Message       `json:"channel_post,omitempty"`
	EditedChannelPost *Message       `json:"edited_channel_post,omitempty"`
	CallbackQuery     *CallbackQuery `json:"callback_query,omitempty"`
}

// Kind returns the name of the update's payload field ("message", "edited_message", ...), as
// used by allowed_updates.
func (u Update) Kind() string {
	switch {
	case u.Message != nil:
		return "message"
	case u.EditedMessage != nil:
		return "edited_message"
	case u.ChannelPost != nil:
		return "channel_post"
	case u.EditedChannelPost != nil:
		return "edited_channel_post"
	case u.CallbackQuery != nil:
		return "callback_query"
	}
	return ""
}

// Payload returns the update's message, whatever its kind, or nil.
func (u Update) Payload() *Message {
	for _, m := range []*Message{u.Message, u.EditedMessage, u.ChannelPost, u.EditedChannelPost} {
		if m != nil {
			return m
		}
	}
	return nil
}

// WebhookInfo is what getWebhookInfo returns.
type WebhookInfo struct {
	URL                  string   `json:"url"`
	HasCustomCertificate bool     `json:"has_custom_certificate"`
	PendingUpdateCount   int      `json:"pending_update_count"`
	LastErrorDate        int64    `json:"last_error_date,omitempty"`
	LastErrorMessage     string   `json:"last_error_message,omitempty"`
	MaxConnections       int      `json:"max_connections,omitempty"`
	AllowedUpdates       []string `json:"allowed_updates,omitempty"`
}

// ResponseParameters explain a failed request: where a group went, or how long to wait.
type ResponseParameters struct {
	MigrateToChatID int64 `json:"migrate_to_chat_id,omitempty"`
	RetryAfter      int   `json:"retry_after,omitempty"`
}

// Request is one HTTP request the fake received, as recorded.
type Request struct {
	Token  string            // the bot token in the path ("" when the path had none)
	Method string            // the method as written in the path (use strings.EqualFold)
	Params map[string]string // form values, or top-level JSON values (objects as raw JSON)
	Files  []string          // names of multipart file fields
	// Uploads are the multipart file parts, with their bytes.
	Uploads []Upload
	Header  http.Header
	Body    []byte
	Time    time.Time // arrival, on the server's clock
	ChatID  int64     // chat_id parsed as an integer, 0 when absent or a @username
	Thread  int64     // message_thread_id, 0 when absent
	Status  int       // the HTTP status answered; 0 while the request is in progress
	Fault   string    // the injected fault that answered it, if any
}

// SentMessage is a message a bot sent through the fake, with its history.
type SentMessage struct {
	Token     string   // the bot that sent it
	Message   Message  // as returned to the bot (after edits: the current version)
	Raw       string   // the text parameter as sent, before parsing
	ParseMode string   // parse_mode as sent
	Edits     []string // earlier texts (parsed), oldest first, when edited
	// File is the uploaded file of a sendPhoto, sendDocument, sendVoice, sendAudio or
	// sendVideo (nil for a text, or a file re-sent by file_id); Method names the method.
	File   *Upload
	Method string
	Time   time.Time
}

// ChatAction is a recorded sendChatAction call.
type ChatAction struct {
	Token  string
	ChatID int64
	Thread int64
	Action string
	Time   time.Time
}

// WebhookDelivery is one attempt to push an update to a bot's webhook.
type WebhookDelivery struct {
	UpdateID   int64
	Attempt    int // 1 for the first try
	URL        string
	Secret     string // the X-Telegram-Bot-Api-Secret-Token header sent
	SecretSent bool   // whether the header was sent at all
	Status     int    // the HTTP status received, 0 on a transport error
	Err        string // the transport error, if any
	Time       time.Time
}
