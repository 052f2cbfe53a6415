//go:build !linux

package process

import "errors"

// ProtectHost is only implemented on Linux.
func ProtectHost() error {
	return errors.New("process: protecting the host from its children is implemented on Linux only")
}
