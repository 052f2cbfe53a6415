package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// errStream is an ErrBadResponse of a stream that broke off.
var errStream = fmt.Errorf("%w: the stream broke off", ErrBadResponse)

// streamChunk is one server-sent event of a streamed chat completion.
type streamChunk struct {
	Choices []struct {
		Delta struct {
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
			Reasoning        *string `json:"reasoning"`
			ToolCalls        []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage  *Usage          `json:"usage"` // the last chunk's, when the request asked include_usage
	Error  json.RawMessage `json:"error"`
	Object string          `json:"object"` // "error" in older vLLM's error event
}

// readStream reads a streamed chat completion (server-sent events, "data: {json}" until
// "data: [DONE]"), calling onText with the text so far after each piece. An error event
// (llama.cpp and vLLM send {"error": …} or {"object": "error", …} mid-stream) becomes an
// *APIError marked InStream, with the status the event gives (its code) or else status, the
// response's; a stream that ends before a finish_reason or [DONE] is errStream.
func readStream(r io.Reader, status int, onText func(string)) (result, error) {
	br := bufio.NewReaderSize(io.LimitReader(r, maxResponseBytes+1), 64<<10)
	var (
		res      result
		text     strings.Builder
		thought  strings.Builder // reasoning_content deltas
		calls    []toolCall
		data     strings.Builder
		finished bool
		read     int
	)
	dispatch := func() (bool, error) {
		d := strings.TrimSpace(data.String())
		data.Reset()
		if d == "" {
			return false, nil
		}
		if d == "[DONE]" {
			return true, nil
		}
		var c streamChunk
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			return false, fmt.Errorf("%w: event: %v", ErrBadResponse, err)
		}
		if (len(c.Error) > 0 && string(c.Error) != "null") || c.Object == "error" {
			msg, typ, code := errorFields([]byte(d))
			st := status
			if n, err := strconv.Atoi(code); err == nil && n >= 100 && n <= 599 {
				st = n
			}
			return false, &APIError{Status: st, Message: msg, Type: typ, Code: code, InStream: true, Hint: hintFor(st, msg, "")}
		}
		if c.Usage != nil {
			res.usage = c.Usage
		}
		if len(c.Choices) == 0 {
			return false, nil // e.g. a usage-only chunk
		}
		ch := c.Choices[0]
		for _, r := range []*string{ch.Delta.ReasoningContent, ch.Delta.Reasoning} {
			if r != nil {
				thought.WriteString(*r)
			}
		}
		if ch.Delta.Content != nil && *ch.Delta.Content != "" {
			text.WriteString(*ch.Delta.Content)
			if onText != nil && len(calls) == 0 {
				if v := visibleText(text.String()); v != "" {
					onText(v) // the answer so far, without a <think> block
				}
			}
		}
		for _, d := range ch.Delta.ToolCalls {
			for len(calls) <= d.Index {
				calls = append(calls, toolCall{Type: "function"})
			}
			tc := &calls[d.Index]
			if d.ID != "" && tc.ID == "" {
				tc.ID = d.ID
			}
			if d.Function.Name != "" && tc.Function.Name == "" {
				tc.Function.Name = d.Function.Name
			}
			tc.Function.Arguments += d.Function.Arguments
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			res.finish, finished = *ch.FinishReason, true
		}
		return false, nil
	}
	for {
		line, err := br.ReadString('\n')
		read += len(line)
		if read > maxResponseBytes {
			return result{}, fmt.Errorf("%w: response larger than %d bytes", errTooLarge, maxResponseBytes)
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			done, derr := dispatch()
			if derr != nil {
				return result{}, derr
			}
			if done {
				finished = true
				goto end
			}
		case strings.HasPrefix(line, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				done, derr := dispatch()
				if derr != nil {
					return result{}, derr
				}
				finished = finished || done
				break
			}
			return result{}, err
		}
	}
end:
	if !finished {
		return result{}, errStream
	}
	res.content, res.reasoning = text.String(), thought.String()
	for i := range calls {
		if calls[i].ID == "" {
			calls[i].ID = fmt.Sprintf("call_%d", i)
		}
	}
	res.calls = calls
	return res, nil
}
