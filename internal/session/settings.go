package session

import (
	"fmt"
)

// Settings of a conversation that its turns use and report: the model the chat chose (/model;
// "" for the configured one) and the usage the model server reported for it (/usage). A
// compression continuation keeps the model; usage is counted per session.

// SetModel records the model of session id (of this key): "" for the configured default. A
// compression continuation inherits it.
func (b *Boundary) SetModel(id, model string) error {
	if err := b.check(); err != nil {
		return err
	}
	res, err := b.k.db.ExecContext(b.ctx, `UPDATE sessions SET model = ? WHERE id = ? AND session_key = ?`, nullStr(model), id, b.key)
	if err := mustAffect(res, err); err != nil {
		return fmt.Errorf("session: model of %s: %w", id, err)
	}
	return nil
}

// AddUsage adds a turn's usage (tokens the server counted, and its model calls) to session id
// (of this key).
func (b *Boundary) AddUsage(id string, prompt, completion, calls int) error {
	if err := b.check(); err != nil {
		return err
	}
	res, err := b.k.db.ExecContext(b.ctx, `UPDATE sessions SET prompt_tokens = prompt_tokens + ?,
		completion_tokens = completion_tokens + ?, model_calls = model_calls + ? WHERE id = ? AND session_key = ?`,
		prompt, completion, calls, id, b.key)
	if err := mustAffect(res, err); err != nil {
		return fmt.Errorf("session: usage of %s: %w", id, err)
	}
	return nil
}
