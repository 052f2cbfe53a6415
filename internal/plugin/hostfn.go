package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	extism "github.com/extism/go-sdk"

	"github.com/hermes-host/hermes-host/abi"
)

// hostFunction adapts Env.Invoke to Extism: it reads the JSON request from Extism memory, runs
// the function for the caller of the export call in progress, and writes the JSON reply back.
// Nothing here traps the guest: every failure becomes an error reply.
func (r *Runtime) hostFunction(name string) extism.HostFunction {
	env := r.cfg.Env
	return extism.NewHostFunctionWithStack(name,
		func(ctx context.Context, p *extism.CurrentPlugin, stack []uint64) {
			st, _ := ctx.Value(callKey{}).(*callState)
			if st == nil {
				// Called outside an export call (cannot happen through Plugin.Call).
				st = &callState{}
			}
			var reply []byte
			req, err := readRequest(p, stack[0], env.maxRequest())
			if err != nil {
				reply = errorReply(err)
			} else {
				var panicked error
				reply, panicked = env.Invoke(ctx, st.caller, name, req)
				if panicked != nil {
					st.panicked = panicked
				}
			}
			ptr, err := p.WriteBytes(reply)
			if err != nil {
				// The guest's memory cannot take the reply (it is out of memory); there is
				// no way to tell it, so the instance is marked for discarding.
				st.panicked = fmt.Errorf("host function %s: writing the reply: %w", name, err)
				ptr = 0
			}
			stack[0] = ptr
		},
		[]extism.ValueType{extism.ValueTypePTR}, []extism.ValueType{extism.ValueTypePTR})
}

func readRequest(p *extism.CurrentPlugin, offset uint64, max int) ([]byte, error) {
	if offset == 0 {
		return nil, nil
	}
	n, err := p.Length(offset)
	if err != nil {
		return nil, abi.Errorf(abi.CodeBadRequest, "request pointer %d is not an Extism allocation", offset)
	}
	if n > uint64(max) {
		return nil, abi.Errorf(abi.CodeTooLarge, "host function request of %d bytes exceeds the cap of %d", n, max)
	}
	// Read the block directly: CurrentPlugin.ReadBytes would ask the kernel for its length
	// again (one more kernel call per host call).
	b, ok := p.Memory().Read(uint32(offset), uint32(n))
	if !ok {
		return nil, abi.Errorf(abi.CodeBadRequest, "reading request: block %d+%d is outside memory", offset, n)
	}
	return bytes.Clone(b), nil
}

func errorReply(err error) []byte {
	b, _ := json.Marshal(abi.Reply{Error: abi.AsError(err)})
	return b
}
