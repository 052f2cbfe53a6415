package turn

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermes-host/hermes-host/internal/store"
	"github.com/hermes-host/hermes-host/internal/store/storetest"
)

// TestAnswerRecordedThroughAStoreOutage: the store refuses writes (another process holds
// SQLite's write lock past the busy timeout) just as the turn records its answer in the
// transcript. The record is retried until the store takes it: a transcript without the answer
// would show the model the user's request again, unanswered, in the next turn (the promise
// checker saw a model start a command twice that way).
func TestAnswerRecordedThroughAStoreOutage(t *testing.T) {
	if os.Getenv(storetest.StoreEnv) == "postgres" {
		t.Skip("holds SQLite's write lock")
	}
	a := newBlocking()
	h := newHarness(t, a, Options{})
	released := make(chan struct{})
	testHookAnswered = func(*item) {
		testHookAnswered = nil
		release := lockSQLite(t, filepath.Join(h.dir, "hermes.db"))
		go func() {
			// Longer than one busy timeout (5 s): the first write of the record is refused.
			time.Sleep(6 * time.Second)
			release()
			close(released)
		}()
	}
	defer func() { testHookAnswered = nil }()
	r := h.say(dm, "remember the number 42")
	a.next(t)
	a.release <- "noted: 42"
	h.chat.waitFor(t, "the answer", has("noted: 42"))
	<-released
	if tr := transcript(t, h.k, r.Session.SessionID); !strings.Contains(tr, "noted: 42") {
		t.Fatalf("the answer is not in the transcript: %q", tr)
	}
}

// lockSQLite takes the write lock of the SQLite database at path from a connection of its own
// (as another process would) until release is called.
func lockSQLite(t *testing.T, path string) (release func()) {
	ctx := context.Background()
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Error(err)
		return func() {}
	}
	conn, err := db.Conn(ctx)
	if err == nil {
		_, err = conn.ExecContext(ctx, `BEGIN IMMEDIATE`)
	}
	if err != nil {
		t.Error(err)
		db.Close()
		return func() {}
	}
	return func() {
		conn.ExecContext(ctx, `ROLLBACK`)
		conn.Close()
		db.Close()
	}
}
