//go:build !unix

package plugin

import "github.com/tetratelabs/wazero/experimental"

func newLinearMemory(_ uint64, acct *instanceMemory) experimental.LinearMemory {
	return &sliceMemory{acct: acct}
}
