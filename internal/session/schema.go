package session

// Component is the name under which the session kernel's migrations are recorded.
const Component = "session"

// migrations are append-only: never edit or reorder a released one.
var migrations = []string{
	// 1: physical sessions, the routing table, transcripts.
	`CREATE TABLE sessions (
		id                TEXT PRIMARY KEY,
		session_key       TEXT NOT NULL,
		parent_session_id TEXT,
		branched_from     TEXT,
		created_by        TEXT NOT NULL, -- new, reset, compression, branch, replace, suspended, idle, daily
		started_at        INTEGER NOT NULL, -- unix ms
		ended_at          INTEGER,          -- NULL while live
		end_reason        TEXT,
		origin            TEXT NOT NULL,    -- JSON abi.Source of the message that started it
		title             TEXT
	);
	CREATE INDEX sessions_by_parent ON sessions(parent_session_id, created_by);
	CREATE INDEX sessions_by_key_title ON sessions(session_key, title);
	CREATE TABLE session_routes (
		session_key TEXT PRIMARY KEY,
		session_id  TEXT NOT NULL REFERENCES sessions(id),
		generation  INTEGER NOT NULL,
		suspended   INTEGER NOT NULL DEFAULT 0,
		created_at  INTEGER NOT NULL,
		updated_at  INTEGER NOT NULL -- user-activity clock (auto-reset)
	) WITHOUT ROWID;
	CREATE TABLE session_messages (
		seq                 INTEGER PRIMARY KEY AUTOINCREMENT,
		session_id          TEXT NOT NULL REFERENCES sessions(id),
		role                TEXT NOT NULL,
		text                TEXT NOT NULL,
		platform_message_id TEXT,
		created_at          INTEGER NOT NULL,
		redacted_at         INTEGER,
		copied_from         INTEGER -- seq of the original when copied by /branch
	);
	CREATE INDEX session_messages_by_session ON session_messages(session_id, seq);
	CREATE INDEX session_messages_by_platform_id ON session_messages(platform_message_id)
		WHERE platform_message_id IS NOT NULL;`,
	// 2: which turn a message belongs to (the inbox id of the message that started it), so an
	// answer is read back after its question even when other messages arrived meanwhile; and the
	// agent's structured parts (tool calls, the call a tool result answers) as JSON.
	`ALTER TABLE session_messages ADD COLUMN turn_id TEXT;
	ALTER TABLE session_messages ADD COLUMN meta TEXT;`,
	// 3: chat aliases (alias.go): a chat that continues another's conversations.
	`CREATE TABLE session_chat_aliases (
		namespace  TEXT NOT NULL, -- the key namespace (profile) of both chats
		platform   TEXT NOT NULL,
		chat_id    TEXT NOT NULL, -- the new chat (a Telegram supergroup)
		alias_of   TEXT NOT NULL, -- the chat whose keys it uses (the group it was)
		created_at INTEGER NOT NULL,
		PRIMARY KEY (namespace, platform, chat_id)
	) WITHOUT ROWID;`,
	// 4: the key's generation at which a session became current when a transition created it.
	// With created_by it is the compression marker ClassifyWork follows: a compression child
	// created at generation g accounts for the bump from g-1 to g, which does not supersede work.
	// NULL for rows written before this migration (treated as "not a compression bump").
	`ALTER TABLE sessions ADD COLUMN created_gen INTEGER;`,
	// 5: the conversation's settings (settings.go): the model the chat chose (NULL: the
	// configured one) and the usage the model server reported.
	`ALTER TABLE sessions ADD COLUMN model TEXT;
	ALTER TABLE sessions ADD COLUMN prompt_tokens BIGINT NOT NULL DEFAULT 0;
	ALTER TABLE sessions ADD COLUMN completion_tokens BIGINT NOT NULL DEFAULT 0;
	ALTER TABLE sessions ADD COLUMN model_calls BIGINT NOT NULL DEFAULT 0;`,
}
