// Package media is the host's content-addressed attachment store: the files of inbound
// messages (fetched from their platforms) and the files a turn sends, under
// <data_dir>/media/, each named by the SHA-256 of its bytes, with a row per plugin, profile and
// file in the database (table media_files). A file is written to a temporary file, synced and
// renamed into place, so a crash mid-write leaves no file under a hash name that is not
// exactly those bytes. Put enforces the per-file and per-profile caps and checks the sniffed
// type against the attachment's kind; Sweep deletes what is older than the retention.
package media

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hermes-host/hermes-host/internal/store"
)

var migrations = []store.Migration{store.Same(`
CREATE TABLE media_files (
	plugin     TEXT NOT NULL,
	profile    TEXT NOT NULL,
	hash       TEXT NOT NULL,
	kind       TEXT NOT NULL,
	mime       TEXT NOT NULL,
	name       TEXT NOT NULL,
	size       BIGINT NOT NULL,
	created_at BIGINT NOT NULL,
	PRIMARY KEY (plugin, profile, hash)
);
CREATE INDEX media_files_hash ON media_files (hash);
CREATE INDEX media_files_created ON media_files (created_at);`)}

// Options configure a Store.
type Options struct {
	// MaxFile caps one file, MaxProfile the bytes stored for one plugin's profile within the
	// retention. Defaults 20 MiB and 500 MiB.
	MaxFile, MaxProfile int64
	// Retention is how long a file is kept after it was last stored. Default 168h.
	Retention time.Duration
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// Store is the attachment store.
type Store struct {
	db  *sql.DB
	dir string
	opt Options
	// mu orders Put's file-then-row against Sweep's rows-then-files: a file Sweep finds
	// unreferenced is never one a Put is about to reference.
	mu sync.Mutex
}

// Refused is an attachment the store does not accept; Reason is in words for the user.
type Refused struct{ Reason string }

func (r *Refused) Error() string { return "media: refused: " + r.Reason }

// Item is a file to store.
type Item struct {
	Plugin, Profile string
	Kind            string // abi.Attach*: the sniffed type must fit it (Fits)
	Name            string
	Data            []byte
}

// File is a stored file.
type File struct {
	Hash     string // hex SHA-256 of the bytes
	MIMEType string // sniffed
	Size     int64
	Path     string
}

// Open migrates the store's table and creates dir. Temporary files a crash left are removed.
func Open(ctx context.Context, db *sql.DB, dir string, opt Options) (*Store, error) {
	if err := store.Migrate(ctx, db, "media", migrations); err != nil {
		return nil, err
	}
	if opt.MaxFile <= 0 {
		opt.MaxFile = 20 << 20
	}
	if opt.MaxProfile <= 0 {
		opt.MaxProfile = 500 << 20
	}
	if opt.Retention <= 0 {
		opt.Retention = 168 * time.Hour
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("media: %w", err)
	}
	s := &Store{db: db, dir: dir, opt: opt}
	if tmps, err := filepath.Glob(filepath.Join(dir, ".tmp-*")); err == nil {
		for _, t := range tmps {
			os.Remove(t)
		}
	}
	return s, nil
}

// MaxFile is the per-file cap in bytes.
func (s *Store) MaxFile() int64 { return s.opt.MaxFile }

// Dir is the directory the files are in.
func (s *Store) Dir() string { return s.dir }

// Path is where the file of hash is (whether or not it is stored).
func (s *Store) Path(hash string) string { return filepath.Join(s.dir, hash) }

// Put checks and stores it: at most MaxFile bytes, its sniffed type fits its kind, and the
// profile's stored bytes (other files, within the retention) plus these stay within
// MaxProfile. A refusal is a *Refused and stores nothing. The same bytes stored again are one
// file; storing them again renews their retention.
func (s *Store) Put(ctx context.Context, it Item) (File, error) {
	size := int64(len(it.Data))
	if size > s.opt.MaxFile {
		return File{}, &Refused{Reason: fmt.Sprintf("it is %s, more than the %s a file may have", Size(size), Size(s.opt.MaxFile))}
	}
	mime := Sniff(it.Data)
	if why := Fits(it.Kind, mime); why != "" {
		return File{}, &Refused{Reason: why}
	}
	sum := sha256.Sum256(it.Data)
	f := File{Hash: hex.EncodeToString(sum[:]), MIMEType: mime, Size: size}
	f.Path = s.Path(f.Hash)
	now := s.opt.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var used int64
	if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(size), 0) FROM media_files
		WHERE plugin = $1 AND profile = $2 AND hash <> $3 AND created_at >= $4`,
		it.Plugin, it.Profile, f.Hash, now.Add(-s.opt.Retention).UnixMilli()).Scan(&used); err != nil {
		return File{}, fmt.Errorf("media: reading the profile's usage: %w", err)
	}
	if used+size > s.opt.MaxProfile {
		return File{}, &Refused{Reason: fmt.Sprintf("this chat's platform account already stores %s of files; the limit is %s", Size(used), Size(s.opt.MaxProfile))}
	}
	if err := s.write(f, it.Data); err != nil {
		return File{}, err
	}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO media_files (plugin, profile, hash, kind, mime, name, size, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (plugin, profile, hash) DO UPDATE SET kind = $4, mime = $5, name = $6, created_at = $8`,
		it.Plugin, it.Profile, f.Hash, it.Kind, mime, it.Name, size, now.UnixMilli()); err != nil {
		return File{}, fmt.Errorf("media: recording %s: %w", f.Hash, err)
	}
	return f, nil
}

// write puts data at f.Path unless a file is there already (the same bytes: it is named by
// their hash): into a temporary file in the same directory, synced, then renamed.
func (s *Store) write(f File, data []byte) error {
	if st, err := os.Stat(f.Path); err == nil && st.Size() == f.Size {
		return nil
	}
	tmp, err := os.CreateTemp(s.dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("media: %w", err)
	}
	if testHookWriting != nil {
		testHookWriting(tmp.Name())
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), f.Path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("media: writing %s: %w", f.Hash, err)
	}
	if d, err := os.Open(s.dir); err == nil {
		d.Sync() // the rename is durable before the row that names the file commits
		d.Close()
	}
	return nil
}

// testHookWriting, set by tests, runs after a file's temporary file was created, before its
// bytes are written.
var testHookWriting func(tmp string)

// Load reads the stored file of hash and checks its bytes still are those.
func (s *Store) Load(hash string) ([]byte, error) {
	if len(hash) != 64 || strings.Trim(hash, "0123456789abcdef") != "" {
		return nil, fmt.Errorf("media: %q is not a file's hash", hash)
	}
	data, err := os.ReadFile(s.Path(hash))
	if err != nil {
		return nil, fmt.Errorf("media: %w", err)
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != hash {
		return nil, fmt.Errorf("media: the file %s does not hold the bytes it is named by", hash)
	}
	return data, nil
}

// Sweep deletes the rows stored before now minus the retention, and the files no row names
// any more (and temporary files, which only a crash leaves while no Put runs). It returns how
// many files it deleted.
func (s *Store) Sweep(ctx context.Context, now time.Time) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.db.ExecContext(ctx, `DELETE FROM media_files WHERE created_at < $1`, now.Add(-s.opt.Retention).UnixMilli()); err != nil {
		return 0, fmt.Errorf("media: sweeping: %w", err)
	}
	live, err := store.Strings(ctx, s.db, `SELECT DISTINCT hash FROM media_files`)
	if err != nil {
		return 0, fmt.Errorf("media: sweeping: %w", err)
	}
	keep := map[string]bool{}
	for _, h := range live {
		keep[h] = true
	}
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return 0, fmt.Errorf("media: sweeping: %w", err)
	}
	n := 0
	var errs []error
	for _, e := range ents {
		if e.IsDir() || keep[e.Name()] {
			continue
		}
		if err := os.Remove(filepath.Join(s.dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		if !strings.HasPrefix(e.Name(), ".tmp-") {
			n++
		}
	}
	return n, errors.Join(errs...)
}

// Run sweeps every interval until ctx is cancelled, logging failures through logf.
func (s *Store) Run(ctx context.Context, every time.Duration, logf func(n int, err error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		n, err := s.Sweep(ctx, s.opt.Now())
		if logf != nil && (n > 0 || err != nil) {
			logf(n, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Size is n bytes in words ("3.2 MiB").
func Size(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// RefPrefix starts the Ref of an outbound attachment whose bytes are in the store: the ledger
// row holds the reference, and the bytes are loaded at send time (Ref, ParseRef).
const RefPrefix = "hermes-media:sha256:"

// Ref is the reference to the stored file of hash.
func Ref(hash string) string { return RefPrefix + hash }

// ParseRef returns the hash a Ref names, and whether ref is one.
func ParseRef(ref string) (string, bool) {
	h, ok := strings.CutPrefix(ref, RefPrefix)
	return h, ok
}
