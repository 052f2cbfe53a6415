package telegramtest

import (
	"strconv"
	"strings"
)

// GeneralTopic is the thread id of a forum's General topic. Messages in General carry no
// message_thread_id; sendMessage refuses message_thread_id 1 ("message thread not found") while
// sendChatAction accepts it.
const GeneralTopic = 1

// chat is a chat the fake knows, with its messages. Guarded by Server.mu.
type chat struct {
	Chat
	topics     map[int64]string // forum topics (or private-chat topics), not General
	migratedTo int64
	nextID     int64
	messages   map[int64]*Message
}

// ForumAdmin is the user who creates the topics of AddForum, AddTopic and TopicText: the sender
// of each topic's creation message.
var ForumAdmin = Person(100001, "Forum Admin")

// Topic is a forum topic to create with AddForum.
type Topic struct {
	ID   int64 // its message_thread_id: the id of the message that created it; 0 picks one
	Name string
}

// Person returns a human user with id, first name and a lowercase username.
func Person(id int64, name string) User {
	return User{ID: id, FirstName: name, Username: strings.ToLower(strings.ReplaceAll(name, " ", "_"))}
}

// AddPrivate makes the private chat between the bots and u known (its id is u's id) and returns it.
func (s *Server) AddPrivate(u User) Chat {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.privateLocked(u).Chat
}

func (s *Server) privateLocked(u User) *chat {
	if c := s.chats[u.ID]; c != nil {
		return c
	}
	return s.addChatLocked(Chat{ID: u.ID, Type: Private, FirstName: u.FirstName, LastName: u.LastName, Username: u.Username})
}

// AddGroup makes a basic group known (ids like -4012345678).
func (s *Server) AddGroup(id int64, title string) Chat {
	return s.AddChat(Chat{ID: id, Type: Group, Title: title})
}

// AddSupergroup makes a supergroup without topics known (ids like -1001234567890).
func (s *Server) AddSupergroup(id int64, title string) Chat {
	return s.AddChat(Chat{ID: id, Type: Supergroup, Title: title})
}

// AddChannel makes a channel known; username (without @) may be empty.
func (s *Server) AddChannel(id int64, title, username string) Chat {
	return s.AddChat(Chat{ID: id, Type: Channel, Title: title, Username: username})
}

// AddForum makes a forum supergroup known, with its General topic and the given topics. Topics
// with ID 0 get the next message id. It returns the chat and the topics' ids in order.
func (s *Server) AddForum(id int64, title string, topics ...Topic) (Chat, []int64) {
	c := s.AddChat(Chat{ID: id, Type: Supergroup, Title: title, IsForum: true})
	var ids []int64
	for _, t := range topics {
		ids = append(ids, s.AddTopic(c.ID, t.ID, t.Name))
	}
	return c, ids
}

// AddChat makes any chat known (or updates its description) and returns it.
func (s *Server) AddChat(c Chat) Chat {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.chats[c.ID]; old != nil {
		old.Chat = c
		return c
	}
	return s.addChatLocked(c).Chat
}

func (s *Server) addChatLocked(c Chat) *chat {
	ch := &chat{Chat: c, topics: map[int64]string{}, nextID: 1, messages: map[int64]*Message{}}
	if c.IsForum {
		ch.nextID = 2 // message 1 is General's
	}
	s.chats[c.ID] = ch
	s.changedLocked()
	return ch
}

// AddTopic creates a topic in chatID, which becomes a forum if it is a supergroup (a private
// chat gets bot topics, as with Bot API 9 "topics in private chats"). The topic's id is the id of
// the service message that created it; id 0 picks the next message id. It returns the id. The
// chat is created as a forum supergroup if unknown.
func (s *Server) AddTopic(chatID, id int64, name string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.topicLocked(s.forumLocked(chatID), id, name)
}

func (s *Server) forumLocked(chatID int64) *chat {
	c := s.chats[chatID]
	if c == nil {
		return s.addChatLocked(Chat{ID: chatID, Type: Supergroup, Title: "Forum " + strconv.FormatInt(chatID, 10), IsForum: true})
	}
	if c.Type == Supergroup && !c.IsForum {
		c.IsForum = true
		c.nextID = max(c.nextID, 2)
	}
	return c
}

func (s *Server) topicLocked(c *chat, id int64, name string) int64 {
	if id == 0 {
		id = c.nextID
	}
	if _, ok := c.topics[id]; ok {
		return id
	}
	if name == "" {
		name = "Topic " + strconv.FormatInt(id, 10)
	}
	c.topics[id] = name
	c.nextID = max(c.nextID, id+1)
	c.messages[id] = &Message{
		MessageID: id, MessageThreadID: id, IsTopicMessage: true, From: ptr(ForumAdmin),
		Chat: c.Chat, Date: s.cfg.clock.Now().Unix(),
		ForumTopicCreated: &ForumTopicCreated{Name: name, IconColor: 7322096},
	}
	s.changedLocked()
	return id
}

// MigrateGroup upgrades the basic group oldID to the supergroup newID: sends to oldID then fail
// with 400 "group chat was upgraded to a supergroup chat" and parameters.migrate_to_chat_id.
// The supergroup is created (with the group's title) if unknown.
func (s *Server) MigrateGroup(oldID, newID int64) Chat {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.chats[oldID]
	if old == nil {
		old = s.addChatLocked(Chat{ID: oldID, Type: Group, Title: "Group " + strconv.FormatInt(oldID, 10)})
	}
	old.migratedTo = newID
	nc := s.chats[newID]
	if nc == nil {
		nc = s.addChatLocked(Chat{ID: newID, Type: Supergroup, Title: old.Title})
	}
	s.changedLocked()
	return nc.Chat
}

// Chat returns what the fake knows of chat id.
func (s *Server) Chat(id int64) (Chat, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.chats[id]; c != nil {
		return c.Chat, true
	}
	return Chat{}, false
}

// Message returns a message of chat id (inbound or sent), as stored.
func (s *Server) Message(chatID, messageID int64) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.chats[chatID]; c != nil {
		if m := c.messages[messageID]; m != nil {
			return *m, true
		}
	}
	return Message{}, false
}

// resolveChatLocked finds the chat of a chat_id parameter (an integer or @username).
func (s *Server) resolveChatLocked(params map[string]string) (*chat, *apiError) {
	v := strings.TrimSpace(params["chat_id"])
	if v == "" {
		return nil, badRequest("chat_id is empty")
	}
	if name, ok := strings.CutPrefix(v, "@"); ok {
		for _, c := range s.chats {
			if c.Username != "" && strings.EqualFold(c.Username, name) {
				return c, nil
			}
		}
		return nil, badRequest("chat not found")
	}
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return nil, badRequest("chat not found")
	}
	c := s.chats[id]
	if c == nil {
		return nil, badRequest("chat not found")
	}
	if c.migratedTo != 0 {
		return nil, &apiError{code: 400, desc: "Bad Request: group chat was upgraded to a supergroup chat",
			params: &ResponseParameters{MigrateToChatID: c.migratedTo}}
	}
	return c, nil
}

// checkThread validates a message_thread_id for a send (forSend) or a chat action.
func (c *chat) checkThread(thread int64, forSend bool) *apiError {
	if thread == 0 {
		return nil
	}
	if c.IsForum && thread == GeneralTopic && !forSend {
		return nil
	}
	if _, ok := c.topics[thread]; ok && (c.IsForum || c.Type == Private) {
		return nil
	}
	return badRequest("message thread not found")
}

// newMessageLocked stores a new message in c with the next message id.
func (c *chat) newMessageLocked(m *Message) *Message {
	if m.MessageID == 0 {
		m.MessageID = c.nextID
	}
	c.nextID = max(c.nextID, m.MessageID+1)
	m.Chat = c.Chat
	c.messages[m.MessageID] = m
	return m
}
