package session

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/hermes-host/hermes-host/abi"
)

// Chat aliases carry a conversation over when a chat changes its id: a Telegram group upgraded
// to a supergroup continues under a new chat id, and without an alias every key of the new chat
// would start fresh conversations while the old ones (their transcripts, their background
// processes, the notices those still owe) stay behind under the old id.
//
// An alias (platform, profile, new chat) → old chat makes Key build every key of the new chat
// with the old chat's id. The old keys stay the canonical ones: sessions, routes, process
// stamps and ledger rows keep them, so nothing stored is rewritten, and a stamp taken in the
// group still classifies and delivers after the upgrade. Sending to the old chat id is the
// delivery ledger's business (it re-addresses a migrated chat).
//
// An alias is recorded only while the new chat has no conversation of its own: a host that
// learns of the migration late (it missed the service messages, or ran a plugin that dropped
// them) must not take over a supergroup conversation users already have. The first alias of a
// chat wins; recording it again is a no-op.
//
// Several hosts on one PostgreSQL database each keep the table in memory. A host reloads it when
// it records an alias, and otherwise at most aliasRefresh after another host recorded one: a
// message of the new chat that reaches another host within that window is keyed under the new
// chat's own id.

// aliasRefresh is how old a host's copy of the alias table may get on PostgreSQL, where other
// hosts may add to it.
const aliasRefresh = 2 * time.Second

// aliasKey names a chat within a key namespace: aliases follow the namespace (profile) and
// platform, as keys do.
type aliasKey struct{ ns, platform, chat string }

// chatAliases is the published alias table; it is replaced, never modified (copy on write), so
// Key reads it without a lock.
type chatAliases map[aliasKey]string

func (k *Kernel) loadAliases(ctx context.Context) error {
	rows, err := k.db.QueryContext(ctx, `SELECT namespace, platform, chat_id, alias_of FROM session_chat_aliases`)
	if err != nil {
		return fmt.Errorf("session: load chat aliases: %w", err)
	}
	defer rows.Close()
	m := chatAliases{}
	for rows.Next() {
		var a aliasKey
		var to string
		if err := rows.Scan(&a.ns, &a.platform, &a.chat, &to); err != nil {
			return fmt.Errorf("session: load chat aliases: %w", err)
		}
		m[a] = to
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("session: load chat aliases: %w", err)
	}
	k.aliases.Store(&m)
	k.aliasesAt.Store(time.Now().UnixNano())
	return nil
}

// refreshAliases reloads the alias table on PostgreSQL when the copy is older than aliasRefresh.
// One caller reloads while the others go on with the copy they have; a failed reload is tried
// again after aliasRefresh.
func (k *Kernel) refreshAliases() {
	if !k.shared || time.Now().UnixNano()-k.aliasesAt.Load() < int64(aliasRefresh) {
		return
	}
	if !k.aliasMu.TryLock() {
		return
	}
	defer k.aliasMu.Unlock()
	if time.Now().UnixNano()-k.aliasesAt.Load() < int64(aliasRefresh) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), aliasRefresh)
	defer cancel()
	if k.loadAliases(ctx) != nil {
		k.aliasesAt.Store(time.Now().UnixNano())
	}
}

// aliased returns src with its chat id replaced by the chat it continues, if any.
func (k *Kernel) aliased(src abi.Source) abi.Source {
	k.refreshAliases()
	m := k.aliases.Load()
	if m == nil || len(*m) == 0 || src.ChatID == "" {
		return src
	}
	ns, err := k.opt.Keys.namespace(src.Profile)
	if err != nil {
		return src // BuildKey reports it
	}
	if to, ok := (*m)[aliasKey{ns, src.Platform, src.ChatID}]; ok {
		src.ChatID = to
	}
	return src
}

// ChatAlias returns the chat that chat continues (for platform and profile), if it has an alias.
func (k *Kernel) ChatAlias(platform, profile, chat string) (string, bool) {
	src := k.aliased(abi.Source{Platform: platform, Profile: profile, ChatID: chat})
	return src.ChatID, src.ChatID != chat
}

// AliasChat records that chat continues the conversations of aliasOf on platform for profile
// (a Telegram group aliasOf upgraded to the supergroup chat): from then on Key builds chat's
// keys with aliasOf's id. If aliasOf itself continues another chat, the alias points there.
//
// It reports whether this call recorded the alias. It records nothing, without error, when chat
// already has an alias (the first wins) or already has conversations of its own (a session
// route under any of its keys). It takes no key lock and writes with one statement, so it may
// be called inside or outside a boundary.
func (k *Kernel) AliasChat(ctx context.Context, platform, profile, chat, aliasOf string) (bool, error) {
	ns, err := k.opt.Keys.namespace(profile)
	if err != nil {
		return false, err
	}
	if !validName(platform) || chat == "" || aliasOf == "" {
		return false, fmt.Errorf("%w: chat alias needs a platform and two chat ids", ErrMalformedKey)
	}
	k.aliasMu.Lock()
	defer k.aliasMu.Unlock()
	if k.shared { // another host may have recorded aliases since
		if err := k.loadAliases(ctx); err != nil {
			return false, err
		}
	}
	cur := *k.aliases.Load()
	if to, ok := cur[aliasKey{ns, platform, aliasOf}]; ok {
		aliasOf = to // chains collapse: keys always use the first chat's id
	}
	if _, ok := cur[aliasKey{ns, platform, chat}]; ok || aliasOf == chat {
		return false, nil
	}
	used, err := k.chatInUse(ctx, abi.Source{Platform: platform, Profile: profile, ChatID: chat})
	if err != nil || used {
		return false, err
	}
	res, err := k.db.ExecContext(ctx, `INSERT INTO session_chat_aliases (namespace, platform, chat_id, alias_of, created_at)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`, ns, platform, chat, aliasOf, k.now().UnixMilli())
	if err != nil {
		return false, fmt.Errorf("session: record chat alias: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil
	}
	next := maps.Clone(cur)
	next[aliasKey{ns, platform, chat}] = aliasOf
	k.aliases.Store(&next)
	return true, nil
}

// chatInUse reports whether any key of src's chat (of any chat type, any thread or participant)
// has a route. Keys share the prefix agent:<ns>:<platform>:<chat_type>[:<scope>]:<chat>, so each
// chat type is one range scan of the route table's primary key.
func (k *Kernel) chatInUse(ctx context.Context, src abi.Source) (bool, error) {
	opt := k.opt.Keys
	opt.SharedGroups = true // no participant: the key ends at the chat id
	src.ChatType, src.ThreadID, src.UserID = abi.ChatGroup, "", ""
	base, err := BuildKey(src, opt)
	if err != nil {
		return false, err
	}
	parts := strings.SplitN(base, ":", 5) // agent, ns, platform, chat_type, [scope:]chat
	for _, t := range []string{abi.ChatDM, abi.ChatGroup, abi.ChatChannel, abi.ChatThread, abi.ChatForum} {
		parts[3] = t
		prefix := strings.Join(parts, ":")
		var one int
		// The key itself, or any key that continues it with ":…" (';' follows ':' in byte order).
		err := k.db.QueryRowContext(ctx, `SELECT 1 FROM session_routes
			WHERE session_key = $1 OR (`+k.bytewise("session_key")+` > $2 AND `+k.bytewise("session_key")+` < $3) LIMIT 1`,
			prefix, prefix+":", prefix+";").Scan(&one)
		switch {
		case err == nil:
			return true, nil
		case !errors.Is(err, sql.ErrNoRows):
			return false, fmt.Errorf("session: chat in use: %w", err)
		}
	}
	return false, nil
}
