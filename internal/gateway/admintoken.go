package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// TokenFile is the admin token's file in the data directory: the console's login page asks for
// it.
const TokenFile = "admin.token"

// adminToken returns the token kept in the file at path, creating it (32 random bytes, hex, mode
// 0600) on first start. A file readable by others is refused: the token may have leaked.
//
// Stand-in until the admin listener's token (issue 10) lands: then that token is the console's.
func adminToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		var raw [32]byte
		rand.Read(raw[:])
		token := hex.EncodeToString(raw[:])
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return "", err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return adminToken(path) // created meanwhile by another process
		}
		if err != nil {
			return "", err
		}
		if _, err := f.WriteString(token + "\n"); err != nil {
			f.Close()
			return "", err
		}
		return token, f.Close()
	}
	if err != nil {
		return "", err
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s is readable by other users (mode %v): remove it and restart to generate a new one", path, fi.Mode().Perm())
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", fmt.Errorf("%s is empty: remove it and restart to generate a new one", path)
	}
	return token, nil
}
